/* kinds/uring.bpf.h — the `uring` event: io_uring requests of the targets from submission to
 * completion, with the submitter's stacks at submission and the request's file at completion.
 * Built on the io_uring tracepoints that pass the request (struct io_kiocb, CO-RE reads):
 * io_uring_submit_req, io_uring_queue_async_work, io_uring_poll_arm, io_uring_complete; and
 * io_uring_cqring_wait, a thread beginning to wait for completions (with `switch`).
 * Included by stacks.bpf.c after common.bpf.h. */
#pragma once

/* Tunables, set by user space before load. */
const volatile __u32 uring_stacks = 0; /* STACKS_WANT_* (user stacks only, `u` or `d`) */
/* `uring`'s MIN, changed while recording (--control; a global of the .bss, as control.bpf.h's):
 * requests completed sooner are summed in the aggregation tables (aggregate.bpf.h) per
 * submitter, op, how it ran, error, descriptor, file and log2 latency bucket, without stacks:
 * a row a second per such group, its count, bytes and time exact. 0: none. */
volatile __u64 uring_min_ns = 0;

#define URING_REQ_F_FIXED_FILE 1ULL   /* REQ_F_FIXED_FILE (bit 0 of io_kiocb.flags) */

/* Requests in flight with stacks (`u`, `d`), each in the slot its address hashes to
 * (uring_slot_of), claimed with a compare-and-swap of `key` and built in place: no copy of the
 * record and no allocation. A request whose slot another holds goes to uring_inflight. A
 * request's 5.5 KiB record in that table (BPF_F_NO_PREALLOC) cost ~6 µs at each submission and
 * ~2 µs at each completion under fio at depth 8: the BPF allocator keeps 1 to 4 free elements
 * of that size per CPU, so nearly every insertion asks for a refill and every deletion for a
 * free, each an irq_work (a self-IPI, an exit to the hypervisor here), besides the record's
 * copy from the scratch area. 1,024 slots (5.6 MiB; one when `uring` takes no stacks). */
#define URING_SLOTS 1024

struct uring_slot {
	__u64 key; /* the request in the slot; 0: free */
	struct stacks_event e;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, URING_SLOTS);
	__type(key, __u32);
	__type(value, struct uring_slot);
} uring_slots SEC(".maps");

/* Requests in flight with stacks whose slot was taken (request address -> its record, built
 * at submission in uring_scratch). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, struct stacks_event);
} uring_inflight SEC(".maps");

/* The slot of request `key` (its address: io_kiocb objects of one slab, a multiplicative
 * hash spreads them). */
static __always_inline struct uring_slot *uring_slot_of(__u64 key)
{
	__u32 i = (__u32)((key * 0x9E3779B97F4A7C15ULL) >> 54) & (URING_SLOTS - 1);
	return bpf_map_lookup_elem(&uring_slots, &i);
}

/* The address of the request a program's first argument points to, as a number: the
 * argument is a typed pointer, on which the verifier allows no hashing. */
static __always_inline __u64 uring_req_addr(void *ctx)
{
	__u64 addr = 0;
	bpf_probe_read_kernel(&addr, sizeof(addr), ctx);
	return addr;
}

/* In-flight request `key`'s record with stacks, from its slot (`*held`: the slot's key, to
 * free it) or the table (`*held` NULL); NULL when it is in neither. */
static __always_inline struct stacks_event *uring_find(__u64 key, __u64 **held)
{
	struct uring_slot *s = uring_slot_of(key);
	if (s && s->key == key) {
		*held = &s->key;
		return &s->e;
	}
	*held = NULL;
	return bpf_map_lookup_elem(&uring_inflight, &key);
}

/* In-flight request `key` is done: its slot freed, or out of the table. */
static __always_inline void uring_retire(__u64 key, __u64 *held)
{
	if (held)
		*held = 0;
	else
		bpf_map_delete_elem(&uring_inflight, &key);
}

/* The same without stacks (`uring:n`): the header and the uring member without its file (the
 * file comes at completion, into the record built then): 216 bytes, not 384. Preallocated:
 * no allocation at each submission. Which table is used is settled at load. */
struct uring_request_bare {
	struct stacks_header hdr;
	__u8 u[offsetof(struct stacks_uring, file)] __attribute__((aligned(8)));
};

/* A bare request's uring member (its fields before `file`, the only ones used). */
#define URING_BARE(r) ((struct stacks_uring *)(r)->u)

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, struct uring_request_bare);
} uring_inflight_bare SEC(".maps");

/* Threads waiting for completions, by ring (its struct io_ring_ctx address): the latest
 * thread of each that waited in io_uring_enter (io_uring_cqring_wait: min_complete asked for,
 * fewer posted). Its wait ends once the ring's CQ tail reaches `target`: the completions
 * posted at positions below it are the ones it waited for. Loaded with `switch` only. */
struct uring_wait {
	__u64 since;  /* when it began to wait */
	__u32 tid;
	__u32 target; /* the CQ head then + min_complete */
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u64);
	__type(value, struct uring_wait);
} uring_waits SEC(".maps");

/* Set once a wait was seen: the completions look in uring_waits only then. */
volatile __u32 uring_waits_seen = 0;

extern struct task_struct *bpf_task_from_pid(s32 pid) __weak __ksym;
extern void bpf_task_release(struct task_struct *p) __weak __ksym;

/* Where records are assembled, per CPU: a submission's whose slot is taken, before it goes
 * into uring_inflight (URING_SCRATCH_SUBMIT), and a completion's file (URING_SCRATCH_COMPLETE:
 * the path walk's reads may run past the path, so never in a record whose frames are already
 * written). Two slots: a completion posted from an interrupt never writes into a submission
 * being built. */
#define URING_SCRATCH_SUBMIT 0
#define URING_SCRATCH_COMPLETE 1
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, struct stacks_event);
} uring_scratch SEC(".maps");

/* The uring member of request `req` at its submission (the file comes at completion). */
static __always_inline void uring_at_submit(struct stacks_uring *u, struct io_kiocb *req,
					    bool sqpoll)
{
	u->latency_ns = 0;
	u->request = (__u64)req;
	u->res = 0;
	u->fd = req->cqe.fd;
	u->opcode = req->opcode;
	u->how = sqpoll ? STACKS_URING_SQPOLL : STACKS_URING_INLINE;
	u->fixed = (req->flags & URING_REQ_F_FIXED_FILE) ? 1 : 0;
	u->pad = 0;
	u->waiter = 0;
	u->waiter_off_ts = 0;
}

/* `d`: the submitter's registers and stack window go now, apart (block.bpf.h's ustack_apart):
 * the request's record `e` waits in uring_inflight without room for them. A function of its
 * own: its stack frame and on_uring_submit's `uring:n` record do not fit in one. */
static __noinline void uring_ustack_apart(void *ctx, struct stacks_event *e, __u64 key)
{
	if (e)
		ustack_apart(ctx, e, key, STACKS_EV_URING_USTACK);
}

SEC("tp_btf/io_uring_submit_req")
int BPF_PROG(on_uring_submit, struct io_kiocb *req)
{
	if (!current_is_target())
		return 0;
	struct task_struct *task = bpf_get_current_task_btf();
	/* Submitted by the ring's SQPOLL thread (a thread of the owner, with no user stack). */
	bool sqpoll = task->flags & PF_IO_WORKER_BIT;
	__u64 key = (__u64)req;
	if (!uring_stacks) {
		struct uring_request_bare r;
		__builtin_memset(&r, 0, sizeof(r));
		fill_hdr(&r.hdr, STACKS_EV_URING, task, bpf_ktime_get_boot_ns());
		uring_at_submit(URING_BARE(&r), req, sqpoll);
		read_span(&r.hdr.span);
		if (bpf_map_update_elem(&uring_inflight_bare, &key, &r, BPF_ANY))
			count_drop(STACKS_DROP_MAP_FULL + STACKS_EV_URING);
		return 0;
	}
	struct stacks_event *e = NULL;
	key = uring_req_addr(ctx); /* a number, to hash */
	struct uring_slot *s = uring_slot_of(key);
	if (s) {
		/* Held by this address already: an earlier request there whose completion was
		 * not seen (posted without a CQE); it is this one's now. */
		__u64 held = __sync_val_compare_and_swap(&s->key, 0, key);
		if (held == 0 || held == key)
			e = &s->e;
	}
	bool tabled = !e;
	if (tabled) {
		__u32 slot = URING_SCRATCH_SUBMIT;
		e = bpf_map_lookup_elem(&uring_scratch, &slot);
		if (!e)
			return 0;
	}
	fill_header(e, STACKS_EV_URING, task);
	uring_at_submit(&e->info.uring, req, sqpoll);
	file_none(&e->info.uring.file);
	read_span(&e->hdr.span);
	if (sqpoll)
		; /* no user stack (the header says none was requested) */
	else if ((uring_stacks & STACKS_WANT_DWARF) && !ringbuf_crowded(STACKS_EV_URING))
		uring_ustack_apart(ctx, e, key);
	else
		capture_stacks(ctx, e, uring_stacks & STACKS_WANT_USER);
	if (tabled && bpf_map_update_elem(&uring_inflight, &key, e, BPF_ANY))
		count_drop(STACKS_DROP_MAP_FULL + STACKS_EV_URING);
	return 0;
}

SEC("tp_btf/io_uring_cqring_wait")
int BPF_PROG(on_uring_wait, void *rctx, int min_events)
{
	if (!current_is_target())
		return 0;
	struct io_ring_ctx *c = bpf_core_cast(rctx, struct io_ring_ctx);
	struct uring_wait w = {
		.since = bpf_ktime_get_boot_ns(),
		.tid = (__u32)bpf_get_current_pid_tgid(),
		.target = c->rings->cq.head + (__u32)min_events,
	};
	__u64 key = (__u64)rctx;
	bpf_map_update_elem(&uring_waits, &key, &w, BPF_ANY);
	if (!uring_waits_seen)
		uring_waits_seen = 1;
	return 0;
}

/* The off-CPU interval of waiter `w` (kinds/switch.bpf.h's state of the thread): its last
 * switch-out, when it came after the wait began (the thread is off CPU in it, or was just
 * woken from it); 0 otherwise. */
static __always_inline __u64 uring_waiter_off(struct task_struct *t, struct uring_wait *w)
{
	struct switch_state *s = bpf_task_storage_get(&switch_store, t, 0, 0);
	if (!s)
		return 0;
	__u64 out = s->ev.hdr.ts;
	return out >= w->since ? out : 0;
}

/* The completion just posted on ring `rctx` (the CQ's cached tail counts it): the thread
 * waiting for it, and that wait's off-CPU interval, into `u`. */
static __always_inline void uring_waited(struct io_ring_ctx *rctx, struct stacks_uring *u)
{
	u->waiter = 0;
	u->waiter_off_ts = 0;
	if (!uring_waits_seen)
		return;
	__u64 key = (__u64)rctx;
	struct uring_wait *w = bpf_map_lookup_elem(&uring_waits, &key);
	if (!w)
		return;
	struct io_ring_ctx *c = bpf_core_cast(rctx, struct io_ring_ctx);
	__u32 tail = c->cached_cq_tail;
	/* Its position (tail - 1) below the target: the wait counted it. */
	if ((__s32)(w->target - tail) < 0)
		return;
	u->waiter = w->tid;
	struct task_struct *me = bpf_get_current_task_btf();
	if (me->pid == w->tid) {
		/* Posted by the waiter itself, woken (its task work). */
		u->waiter_off_ts = uring_waiter_off(me, w);
	} else if (bpf_task_from_pid) {
		struct task_struct *t = bpf_task_from_pid(w->tid);
		if (t) {
			u->waiter_off_ts = uring_waiter_off(t, w);
			bpf_task_release(t);
		}
	}
}

/* Request `req`, the first argument of program context `ctx`, ran as `how` (in flight and
 * traced: else nothing). */
static __always_inline void uring_ran(void *ctx, struct io_kiocb *req, __u8 how)
{
	__u64 key = (__u64)req;
	if (uring_stacks) {
		__u64 *held;
		struct stacks_event *e = uring_find(uring_req_addr(ctx), &held);
		if (e)
			e->info.uring.how = how;
		return;
	}
	struct uring_request_bare *r = bpf_map_lookup_elem(&uring_inflight_bare, &key);
	if (r)
		URING_BARE(r)->how = how;
}

SEC("tp_btf/io_uring_queue_async_work")
int BPF_PROG(on_uring_async, struct io_kiocb *req, int rw)
{
	uring_ran(ctx, req, STACKS_URING_ASYNC);
	return 0;
}

SEC("tp_btf/io_uring_poll_arm")
int BPF_PROG(on_uring_poll, struct io_kiocb *req, int mask, int events)
{
	uring_ran(ctx, req, STACKS_URING_POLL);
	return 0;
}

SEC("tp_btf/io_uring_complete")
int BPF_PROG(on_uring_complete, struct io_ring_ctx *rctx, void *request, struct io_uring_cqe *cqe)
{
	if (!request)
		return 0;
	__u64 key = (__u64)request;
	struct stacks_event *e = NULL;
	struct uring_request_bare *r = NULL;
	__u64 *held = NULL;
	struct stacks_header *h;
	struct stacks_uring *u;
	if (uring_stacks) {
		e = uring_find(key, &held);
		if (!e)
			return 0;
		h = &e->hdr;
		u = &e->info.uring;
	} else {
		r = bpf_map_lookup_elem(&uring_inflight_bare, &key);
		if (!r)
			return 0;
		h = &r->hdr;
		u = URING_BARE(r);
	}
	__u32 slot = URING_SCRATCH_COMPLETE;
	struct stacks_event *s = bpf_map_lookup_elem(&uring_scratch, &slot);
	if (!s)
		return 0;
	__u64 now = bpf_ktime_get_boot_ns();
	u->latency_ns = now - h->ts;
	u->res = cqe->res;
	h->cpu = bpf_get_smp_processor_id();
	/* The request's file (every op's command data starts with it; NULL when it has none). */
	struct io_kiocb *req = bpf_core_cast(request, struct io_kiocb);
	struct file *f = req->file;
	if (u->latency_ns < uring_min_ns) {
		/* Folded: summed, no row of its own (the table full: sent as a row after all). */
		struct stacks_agg_key k;
		__builtin_memset(&k, 0, sizeof(k));
		k.kind = STACKS_EV_URING;
		k.pid = h->pid;
		k.tid = h->tid;
		k.op = (__u32)u->opcode | ((__u32)u->how << 8) | ((__u32)u->fixed << 16);
		k.error = u->res < 0 ? -u->res : 0;
		k.fd = u->fd;
		k.inode = f ? BPF_CORE_READ(f, f_inode, i_ino) : 0;
		k.latency_log2 = log2_u64(u->latency_ns);
		if (agg_add(ctx, &k, 0, u->res > 0 ? u->res : 0, u->latency_ns, h->ts, -1)) {
			/* A new group's file: the request's (agg_put read none: the completing task
			 * may not be the submitter, whose descriptors `fd` names). */
			struct stacks_agg *a = bpf_map_lookup_elem(
				(agg_gen & 1) ? (void *)&agg_events1 : (void *)&agg_events0, &k);
			if (a && f && !a->file.inode) {
				file_fill(&a->file, f);
				file_path(&a->file, f);
			}
			if (e)
				uring_retire(key, held);
			else
				bpf_map_delete_elem(&uring_inflight_bare, &key);
			return 0;
		}
	}
	uring_waited(rctx, u);
	struct stacks_file *v = &s->info.uring.file;
	bool walked = false;
	file_none(v);
	if (f) {
		file_fill(v, f);
		struct path_key k = { .dentry = v->dentry, .mnt = v->mnt };
		struct path_seen_val *seen = bpf_map_lookup_elem(&path_seen, &k);
		if (seen && seen->inode == v->inode && seen->gen == path_gen) {
			v->path_complete = STACKS_PATH_SAME;
		} else {
			file_path(v, f);
			walked = true;
		}
	}
	bool sent;
	if (e) {
		__builtin_memcpy(&u->file, v, sizeof(*v));
		sent = submit(e);
		uring_retire(key, held);
	} else {
		__builtin_memcpy(&s->hdr, h, sizeof(*h));
		__builtin_memcpy(&s->info.uring, u, offsetof(struct stacks_uring, file));
		sent = submit(s);
		bpf_map_delete_elem(&uring_inflight_bare, &key);
	}
	if (sent && walked)
		file_path_sent(v);
	return 0;
}

/* The io_uring request io-wq worker `task` (an `iou-wrk-*` thread) is running, or 0: its
 * io_worker's current work, a member of the request. */
static __always_inline __u64 uring_worker_request(struct task_struct *task)
{
	if (!(task->flags & PF_IO_WORKER_BIT) || !task->worker_private)
		return 0;
	/* SQPOLL threads (`iou-sqp-*`) are IO workers too, without an io_worker. */
	char comm[8];
	__builtin_memcpy(comm, task->comm, sizeof(comm));
	if (comm[0] != 'i' || comm[1] != 'o' || comm[2] != 'u' || comm[3] != '-' ||
	    comm[4] != 'w' || comm[5] != 'r' || comm[6] != 'k')
		return 0;
	struct io_worker *w = bpf_core_cast(task->worker_private, struct io_worker);
	/* Read as a number (the slot of a request is a hash of its address). */
	__u64 work = 0;
	bpf_probe_read_kernel(&work, sizeof(work), &w->cur_work);
	if (!work)
		return 0;
	return work - bpf_core_field_offset(struct io_kiocb, work);
}

static __always_inline void uring_on_behalf(struct stacks_event *e, struct stacks_block *b,
					    struct task_struct *task)
{
	__u64 key = uring_worker_request(task);
	if (!key)
		return;
	if (!uring_stacks) {
		struct uring_request_bare *r = bpf_map_lookup_elem(&uring_inflight_bare, &key);
		if (r)
			b->submitter = r->hdr.tid;
		return;
	}
	__u64 *held;
	struct stacks_event *u = uring_find(key, &held);
	if (!u)
		return;
	b->submitter = u->hdr.tid;
	if (!e)
		return;
	/* The submitter's user stack (uring takes no kernel stack: its frames come first) after
	 * this record's kernel frames. */
	__s32 n = u->hdr.ustack_len;
	if (n <= 0 || n > STACKS_MAX_DEPTH || u->hdr.kstack_len > 0) {
		/* A `d` stack sent apart is the uring request's, not this block request's. */
		e->hdr.ustack_len = n <= 0 && n != STACKS_USTACK_APART ? n : -EFAULT;
		return;
	}
	__s32 kl = e->hdr.kstack_len;
	__u32 k = kl > 0 ? (__u32)kl : 0;
	if (k > STACKS_MAX_DEPTH)
		k = STACKS_MAX_DEPTH;
	k &= 127; /* as the verifier sees it: the clamp's register may not be the one used */
	__u32 bytes = (__u32)n * STACKS_UFRAME_SIZE;
	if (bytes > STACKS_MAX_DEPTH * STACKS_UFRAME_SIZE)
		return;
	if (bpf_probe_read_kernel((__u8 *)e->frames + k * 8, bytes, u->frames))
		return;
	e->hdr.ustack_len = n;
}
