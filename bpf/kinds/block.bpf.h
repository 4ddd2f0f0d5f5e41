/* kinds/block.bpf.h — the `block` event: block requests from submission to completion, with the
 * submitter's stacks. Included by stacks.bpf.c after common.bpf.h. */
#pragma once

/* Tunables, set by user space before load. */
const volatile __u32 block_stacks = 0; /* STACKS_WANT_* */

/* ---- Block IO ----------------------------------------------------------------------- */

/* Block requests in flight (request pointer -> record built at submission, issue time). */
struct block_request {
	__u64 issue_ts; /* when the request was issued to the device; 0: not seen yet */
	struct stacks_event ev;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, struct block_request);
} block_inflight SEC(".maps");

/* The same without stacks (`block:n`), for a request whose slot (block_slots, below) another
 * holds: the header and the block member, from which the completion builds the record in the
 * ring buffer. Which table is used is settled at load. */
struct block_request_bare {
	__u64 issue_ts;
	struct stacks_header hdr;
	struct stacks_block block;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, struct block_request_bare);
} block_inflight_bare SEC(".maps");

/* In-flight `block:n` requests, each in the slot of its tag (block_slot_of), claimed with a
 * compare-and-swap of `key` (the request's address) and filled in place: a slot is found with a
 * few instructions, where an insertion into block_inflight_bare and its deletion cost ~500 ns
 * together (halving the value's size changed neither). A request whose slot another holds
 * (another disk's request with the same tag) goes to block_inflight_bare. A request that ends
 * without a completion (merged into another) leaves its slot held until its tag is used again:
 * a tag stands for the same request structure of its queue, so the next one claims it back.
 * 1,024 slots (240 KiB). */
#define BLOCK_SLOTS 1024
/* The slots in use, less one (a power of two less one, at most BLOCK_SLOTS - 1): set lower by
 * the tests (STACKS_BLOCK_SLOTS) to send requests to the table. */
const volatile __u32 block_slot_mask = BLOCK_SLOTS - 1;

struct block_slot {
	__u64 key; /* the request in the slot; 0: free */
	struct block_request_bare r;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, BLOCK_SLOTS);
	__type(key, __u32);
	__type(value, struct block_slot);
} block_slots SEC(".maps");

/* In-flight requests of `block` taking stacks, likewise each in the slot of its tag, the whole
 * record built in place: under io_uring at depth 8, inserting each 5.5 KiB record into
 * block_inflight (copied from block_scratch) and deleting it cost 9.7 µs at submission and
 * 3.3 µs at completion, the BPF allocator refilling and draining its per-CPU caches of
 * entries that size through irq_work (a self-IPI, an exit to the hypervisor here) nearly every
 * time. A request whose slot another holds goes to block_inflight. 1,024 slots (5.6 MiB),
 * sized to one when `block` takes no stacks (kinds/block.rs). */
struct block_stack_slot {
	__u64 key; /* the request in the slot; 0: free */
	struct block_request r;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, BLOCK_SLOTS);
	__type(key, __u32);
	__type(value, struct block_stack_slot);
} block_stack_slots SEC(".maps");

/* The slot index of request `rq`: its tag, the scheduler's while it has one (kept until the
 * request is freed), else the driver's (both small numbers, unique among a queue's requests in
 * flight). */
static __always_inline __u32 block_tag_of(struct request *rq)
{
	int t = rq->internal_tag >= 0 ? rq->internal_tag : rq->tag;
	return (__u32)t & block_slot_mask & (BLOCK_SLOTS - 1);
}

static __always_inline struct block_stack_slot *block_stack_slot_of(struct request *rq)
{
	__u32 i = block_tag_of(rq);
	return bpf_map_lookup_elem(&block_stack_slots, &i);
}

/* The slot of `block:n` request `rq` (block_tag_of). Another disk's request with the same tag
 * goes to the table. */
static __always_inline struct block_slot *block_slot_of(struct request *rq)
{
	__u32 i = block_tag_of(rq);
	return bpf_map_lookup_elem(&block_slots, &i);
}

/* An in-flight request found: its issue time, header and block member; its whole record
 * (`e`) when the table holds records (block stacks); its slot's key (`slot`) when in one. */
struct block_found {
	__u64 *issue_ts;
	struct stacks_header *hdr;
	struct stacks_block *block;
	struct stacks_event *e;
	__u64 *slot;
};

/* In-flight request `key` into `f`; false when it is not in flight (or not traced). */
static __always_inline bool block_find(struct request *rq, __u64 *key, struct block_found *f)
{
	f->e = NULL;
	f->slot = NULL;
	if (block_stacks) {
		struct block_request *b = NULL;
		struct block_stack_slot *ss = block_stack_slot_of(rq);
		if (ss && ss->key == *key) {
			f->slot = &ss->key;
			b = &ss->r;
		} else {
			b = bpf_map_lookup_elem(&block_inflight, key);
		}
		if (!b)
			return false;
		f->issue_ts = &b->issue_ts;
		f->e = &b->ev;
		f->hdr = &b->ev.hdr;
		f->block = &b->ev.info.block;
		return true;
	}
	struct block_request_bare *r = NULL;
	struct block_slot *s = block_slot_of(rq);
	if (s && s->key == *key) {
		f->slot = &s->key;
		r = &s->r;
	} else {
		r = bpf_map_lookup_elem(&block_inflight_bare, key);
	}
	if (!r)
		return false;
	f->issue_ts = &r->issue_ts;
	f->hdr = &r->hdr;
	f->block = &r->block;
	return true;
}

/* Request `key` is done: out of its slot or table. */
static __always_inline void block_retire(__u64 *key, struct block_found *f)
{
	if (f->slot) {
		*f->slot = 0;
	} else if (block_stacks) {
		bpf_map_delete_elem(&block_inflight, key);
	} else {
		bpf_map_delete_elem(&block_inflight_bare, key);
	}
}

/* Where a block record is built before it goes into block_inflight (one per CPU). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct block_request);
} block_scratch SEC(".maps");

/* The request's disk as major:minor (0:0 when it has none). */
static __always_inline void rq_dev(struct stacks_block *b, struct request *rq)
{
	struct gendisk *disk = rq->q ? rq->q->disk : NULL;
	b->dev_major = 0;
	b->dev_minor = 0;
	if (!disk)
		return;
	b->dev_major = disk->major;
	b->dev_minor = disk->first_minor;
}

/* A `d` user stack of a request's submitter, sent now in its own record of kind `part` (the
 * request's record `e` waits in its in-flight table until completion, without room for a stack
 * copy): the request's record says so, or carries the capture's error. Block's, and uring's
 * (kinds/uring.bpf.h). */
static __always_inline void ustack_apart(void *ctx, struct stacks_event *e, __u64 key, __u32 part)
{
	struct stacks_event *u = scratch_for(SCRATCH_TASK);
	if (!u) {
		e->hdr.ustack_len = -ENOMEM;
		return;
	}
	fill_header(u, part, bpf_get_current_task_btf());
	u->info.uwindow.request = key;
	capture_dwarf(ctx, u, 0);
	if (!u->hdr.uwindow)
		e->hdr.ustack_len = u->hdr.ustack_len;
	else
		e->hdr.ustack_len = submit_room(u) ? STACKS_USTACK_APART : -ENOSPC;
}

/* An io-wq worker's block request for an io_uring request: its submitter into `b` (and, with
 * `e`, the submitter's user stack into `e`'s); kinds/uring.bpf.h. */
static __always_inline void uring_on_behalf(struct stacks_event *e, struct stacks_block *b,
					    struct task_struct *task);

/* The block member of request `rq` (named `key`) at its submission. */
static __always_inline void block_at_start(struct stacks_block *b, struct request *rq, __u64 key)
{
	b->op = rq->cmd_flags & REQ_OP_MASK;
	rq_dev(b, rq);
	b->bytes = rq->__data_len;
	b->latency_ns = 0;
	b->error = 0;
	b->request = key;
	b->submitter = 0;
	b->pad = 0;
}

/* Request `key`'s record `r` into `table` (block_inflight or block_inflight_bare, whose values
 * both open with the issue time). Found there already and issued: the request structure's last
 * request ended unseen (STACKS_DROP_BLOCK_UNSEEN); one never issued was merged into another,
 * whose row has its bytes. */
static __always_inline void block_table_put(void *table, __u64 *key, void *r)
{
	long err = bpf_map_update_elem(table, key, r, BPF_NOEXIST);
	if (err == -EEXIST) {
		__u64 *old = bpf_map_lookup_elem(table, key);
		if (old && *old)
			count_drop(STACKS_DROP_BLOCK_UNSEEN);
		err = bpf_map_update_elem(table, key, r, BPF_ANY);
	}
	if (err)
		count_drop(STACKS_DROP_MAP_FULL + STACKS_EV_BLOCK);
}

SEC("tp_btf/block_io_start")
int BPF_PROG(on_block_start, struct request *rq)
{
	if (!current_is_target())
		return 0;
	__u64 key = (__u64)rq;
	if (!block_stacks) {
		struct task_struct *task = bpf_get_current_task_btf();
		__u64 now = bpf_ktime_get_boot_ns();
		struct block_slot *s = block_slot_of(rq);
		if (s) {
			__u64 held = __sync_val_compare_and_swap(&s->key, 0, key);
			if (held == 0 || held == key) {
				if (held == key && s->r.issue_ts)
					count_drop(STACKS_DROP_BLOCK_UNSEEN);
				s->r.issue_ts = 0;
				fill_hdr(&s->r.hdr, STACKS_EV_BLOCK, task, now);
				block_at_start(&s->r.block, rq, key);
				uring_on_behalf(NULL, &s->r.block, task);
				read_span(&s->r.hdr.span);
				return 0;
			}
		}
		/* Its slot is taken: built on the stack (224 bytes, all written), into the table. */
		struct block_request_bare r;
		__builtin_memset(&r, 0, sizeof(r));
		fill_hdr(&r.hdr, STACKS_EV_BLOCK, task, now);
		block_at_start(&r.block, rq, key);
		uring_on_behalf(NULL, &r.block, task);
		read_span(&r.hdr.span);
		count_drop(STACKS_DROP_BLOCK_TABLED);
		block_table_put(&block_inflight_bare, &key, &r);
		return 0;
	}
	/* Built in its slot, or (the slot another's) in block_scratch and then into the table. */
	struct block_request *b = NULL;
	struct block_stack_slot *ss = block_stack_slot_of(rq);
	if (ss) {
		__u64 held = __sync_val_compare_and_swap(&ss->key, 0, key);
		if (held == 0 || held == key) {
			if (held == key && ss->r.issue_ts)
				count_drop(STACKS_DROP_BLOCK_UNSEEN);
			b = &ss->r;
		}
	}
	bool tabled = !b;
	if (tabled) {
		__u32 zero = 0;
		b = bpf_map_lookup_elem(&block_scratch, &zero);
		if (!b)
			return 0;
		count_drop(STACKS_DROP_BLOCK_TABLED);
	}
	struct stacks_event *e = &b->ev;
	struct task_struct *task = bpf_get_current_task_btf();
	b->issue_ts = 0;
	fill_header(e, STACKS_EV_BLOCK, task);
	block_at_start(&e->info.block, rq, key);
	read_span(&e->hdr.span);
	if (task->flags & PF_IO_WORKER_BIT) {
		/* An io_uring worker has no user stack of its own: the submitter's, when known. */
		capture_stacks(ctx, e, block_stacks & STACKS_WANT_KERNEL);
		if (block_stacks & (STACKS_WANT_USER | STACKS_WANT_DWARF)) {
			e->hdr.ustack_len = -EFAULT;
			uring_on_behalf(e, &e->info.block, task);
		} else {
			uring_on_behalf(NULL, &e->info.block, task);
		}
	} else if ((block_stacks & STACKS_WANT_DWARF) && !ringbuf_crowded(STACKS_EV_BLOCK)) {
		capture_stacks(ctx, e, block_stacks & STACKS_WANT_KERNEL);
		ustack_apart(ctx, e, key, STACKS_EV_UWINDOW);
	} else {
		capture_stacks(ctx, e, block_stacks);
	}
	if (tabled)
		block_table_put(&block_inflight, &key, b);
	return 0;
}

SEC("tp_btf/block_rq_issue")
int BPF_PROG(on_block_issue, struct request *rq)
{
	__u64 key = (__u64)rq;
	struct block_found f;
	if (!block_find(rq, &key, &f))
		return 0;
	*f.issue_ts = bpf_ktime_get_boot_ns(); /* latency runs from here to completion */
	f.block->bytes = rq->__data_len;
	return 0;
}

/* A `block:n` record of header `h` and block member `b` into the IO ring: built there (the
 * info member past the block one zeroed), no frames. False when the ring is full. */
static __always_inline bool block_send_bare(struct stacks_header *h, struct stacks_block *b)
{
	__u32 ring = ring_of(STACKS_EV_BLOCK);
	__u64 flags = wakeup_flags(ring);
	struct stacks_event *r = ring_reserve(ring, STACKS_EVENT_HEADER_SIZE);
	if (!r)
		return false;
	__builtin_memcpy(&r->hdr, h, sizeof(*h));
	__builtin_memset(&r->info, 0, sizeof(r->info));
	__builtin_memcpy(&r->info.block, b, sizeof(*b));
	bpf_ringbuf_submit(r, flags);
	return true;
}

SEC("tp_btf/block_rq_complete")
int BPF_PROG(on_block_complete, struct request *rq, blk_status_t error, unsigned int nr_bytes)
{
	__u64 key = (__u64)rq;
	struct block_found f;
	if (!block_find(rq, &key, &f))
		return 0;
	__u64 now = bpf_ktime_get_boot_ns();
	__u64 issued = *f.issue_ts ? *f.issue_ts : f.hdr->ts;
	__u32 remaining = rq->__data_len;
	f.block->latency_ns = now - issued;
	f.block->bytes = nr_bytes;
	f.block->error = error;
	f.hdr->cpu = bpf_get_smp_processor_id();
	if (f.e)
		submit(f.e);
	else if (!block_send_bare(f.hdr, f.block))
		count_drop(STACKS_DROP_RINGBUF + STACKS_EV_BLOCK);
	if (nr_bytes >= remaining)
		block_retire(&key, &f);
	else
		*f.issue_ts = issued; /* the rest completes later, timed from the same issue */
	return 0;
}
