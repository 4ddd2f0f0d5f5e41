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
	struct gendisk *disk = BPF_CORE_READ(rq, q, disk);
	b->dev_major = 0;
	b->dev_minor = 0;
	if (!disk)
		return;
	b->dev_major = BPF_CORE_READ(disk, major);
	b->dev_minor = BPF_CORE_READ(disk, first_minor);
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
	fill_header(u, STACKS_EV_UWINDOW, (struct task_struct *)bpf_get_current_task());
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
	fill_header(e, STACKS_EV_BLOCK, (struct task_struct *)bpf_get_current_task());
	e->info.block.op = BPF_CORE_READ(rq, cmd_flags) & REQ_OP_MASK;
	rq_dev(&e->info.block, rq);
	e->info.block.bytes = BPF_CORE_READ(rq, __data_len);
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
	if (bpf_map_update_elem(&block_inflight, &key, b, BPF_ANY))
		count_drop(STACKS_DROP_BLOCK_MAP_FULL);
	return 0;
}

SEC("tp_btf/block_rq_issue")
int BPF_PROG(on_block_issue, struct request *rq)
{
	__u64 key = (__u64)rq;
	struct block_request *b = bpf_map_lookup_elem(&block_inflight, &key);
	if (!b)
		return 0;
	b->issue_ts = bpf_ktime_get_boot_ns(); /* latency runs from here to completion */
	b->ev.info.block.bytes = BPF_CORE_READ(rq, __data_len);
	return 0;
}

SEC("tp_btf/block_rq_complete")
int BPF_PROG(on_block_complete, struct request *rq, blk_status_t error, unsigned int nr_bytes)
{
	__u64 key = (__u64)rq;
	struct block_request *b = bpf_map_lookup_elem(&block_inflight, &key);
	if (!b)
		return 0;
	struct stacks_event *e = &b->ev;
	__u64 now = bpf_ktime_get_boot_ns();
	__u64 issued = b->issue_ts ? b->issue_ts : e->hdr.ts;
	__u32 remaining = BPF_CORE_READ(rq, __data_len);
	e->info.block.latency_ns = now - issued;
	e->info.block.bytes = nr_bytes;
	e->info.block.error = error;
	e->hdr.cpu = bpf_get_smp_processor_id();
	submit(e);
	if (nr_bytes >= remaining)
		bpf_map_delete_elem(&block_inflight, &key);
	else
		b->issue_ts = issued; /* the rest completes later, timed from the same issue */
	return 0;
}
