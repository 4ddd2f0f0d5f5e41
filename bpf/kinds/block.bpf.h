/* kinds/block.bpf.h — the `block` event: block requests from submission to completion, with the
 * submitter's stacks. Included by stacks.bpf.c after common.bpf.h. */

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

/* The same without stacks (`block:n`): the record without its frames area, whose copy into
 * the table was most of a submission's cost. Which table is used is settled at load. */
struct block_request_bare {
	__u64 issue_ts;
	__u8 ev[STACKS_EVENT_HEADER_SIZE];
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, struct block_request_bare);
} block_inflight_bare SEC(".maps");

/* The in-flight record of request `key` and its issue time, in the table in use. */
static __always_inline struct stacks_event *block_find(__u64 *key, __u64 **issue_ts)
{
	if (block_stacks) {
		struct block_request *b = bpf_map_lookup_elem(&block_inflight, key);
		if (!b)
			return NULL;
		*issue_ts = &b->issue_ts;
		return &b->ev;
	}
	struct block_request_bare *b = bpf_map_lookup_elem(&block_inflight_bare, key);
	if (!b)
		return NULL;
	*issue_ts = &b->issue_ts;
	return (struct stacks_event *)b->ev;
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

/* A `d` user stack of a block request's submitter, sent now in its own record (the
 * request's record waits in block_inflight until completion, without room for a stack copy):
 * the request's record says so, or carries the capture's error. */
static __always_inline void block_ustack_apart(void *ctx, struct stacks_event *e, __u64 key)
{
	struct stacks_event *u = scratch_for(SCRATCH_TASK);
	if (!u) {
		e->hdr.ustack_len = -ENOMEM;
		return;
	}
	fill_header(u, STACKS_EV_UWINDOW, bpf_get_current_task_btf());
	u->info.uwindow.request = key;
	capture_dwarf(ctx, u, 0);
	if (!u->hdr.uwindow)
		e->hdr.ustack_len = u->hdr.ustack_len;
	else
		e->hdr.ustack_len = submit_room(u) ? STACKS_USTACK_APART : -ENOSPC;
}

SEC("tp_btf/block_io_start")
int BPF_PROG(on_block_start, struct request *rq)
{
	if (!current_is_target())
		return 0;
	__u32 zero = 0;
	struct block_request *b = bpf_map_lookup_elem(&block_scratch, &zero);
	if (!b)
		return 0;
	struct stacks_event *e = &b->ev;
	b->issue_ts = 0;
	fill_header(e, STACKS_EV_BLOCK, bpf_get_current_task_btf());
	e->info.block.op = rq->cmd_flags & REQ_OP_MASK;
	rq_dev(&e->info.block, rq);
	e->info.block.bytes = rq->__data_len;
	e->info.block.latency_ns = 0;
	e->info.block.error = 0;
	read_span(&e->hdr.span);
	__u64 key = (__u64)rq;
	e->info.block.request = key;
	if ((block_stacks & STACKS_WANT_DWARF) && !ringbuf_crowded(STACKS_EV_BLOCK)) {
		capture_stacks(ctx, e, block_stacks & STACKS_WANT_KERNEL);
		block_ustack_apart(ctx, e, key);
	} else {
		capture_stacks(ctx, e, block_stacks);
	}
	long rc = block_stacks ? bpf_map_update_elem(&block_inflight, &key, b, BPF_ANY)
			       : bpf_map_update_elem(&block_inflight_bare, &key, b, BPF_ANY);
	if (rc)
		count_drop(STACKS_DROP_BLOCK_MAP_FULL);
	return 0;
}

SEC("tp_btf/block_rq_issue")
int BPF_PROG(on_block_issue, struct request *rq)
{
	__u64 key = (__u64)rq;
	__u64 *issue_ts;
	struct stacks_event *e = block_find(&key, &issue_ts);
	if (!e)
		return 0;
	*issue_ts = bpf_ktime_get_boot_ns(); /* latency runs from here to completion */
	e->info.block.bytes = rq->__data_len;
	return 0;
}

SEC("tp_btf/block_rq_complete")
int BPF_PROG(on_block_complete, struct request *rq, blk_status_t error, unsigned int nr_bytes)
{
	__u64 key = (__u64)rq;
	__u64 *issue_ts;
	struct stacks_event *e = block_find(&key, &issue_ts);
	if (!e)
		return 0;
	__u64 now = bpf_ktime_get_boot_ns();
	__u64 issued = *issue_ts ? *issue_ts : e->hdr.ts;
	__u32 remaining = rq->__data_len;
	e->info.block.latency_ns = now - issued;
	e->info.block.bytes = nr_bytes;
	e->info.block.error = error;
	e->hdr.cpu = bpf_get_smp_processor_id();
	if (block_stacks) {
		submit(e);
	} else {
		__u32 ring = ring_of(STACKS_EV_BLOCK);
		if (ring_output(ring, e, STACKS_EVENT_HEADER_SIZE, wakeup_flags(ring)))
			count_drop(STACKS_DROP_RINGBUF + STACKS_EV_BLOCK);
	}
	if (nr_bytes >= remaining) {
		if (block_stacks)
			bpf_map_delete_elem(&block_inflight, &key);
		else
			bpf_map_delete_elem(&block_inflight_bare, &key);
	} else {
		*issue_ts = issued; /* the rest completes later, timed from the same issue */
	}
	return 0;
}
