/* kinds/rss.bpf.h — the `rss` event: RSS growth per process (kmem:rss_stat), every Nth growth
 * event. Included by stacks.bpf.c after common.bpf.h. */

/* Tunables, set by user space before load. */
const volatile __u32 rss_stacks = 0; /* STACKS_WANT_* */
const volatile __u32 rss_every = 1;         /* emit every Nth RSS growth event per process */

/* ---- RSS growth --------------------------------------------------------------------- */

/* Per-process RSS accounting (tgid -> struct rss_state, in stacks.h: user space takes what
 * is left at the end). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __u32);
	__type(value, struct rss_state);
} rss_store SEC(".maps");

/* A process exits: emit what is left of its RSS growth (no stacks) and forget it. */
static __always_inline void rss_exit(__u32 tgid, struct task_struct *task)
{
	struct rss_state *r = bpf_map_lookup_elem(&rss_store, &tgid);
	if (!r)
		return;
	if (r->events) {
		struct stacks_event *e = scratch_for(SCRATCH_TASK);
		if (e) {
			fill_header(e, STACKS_EV_RSS, task);
			e->hdr.count = r->events;
			e->info.rss.growth_bytes = r->growth;
			e->info.rss.resident_bytes = 0;
			e->info.rss.counter = r->member;
			e->info.rss.pad = 0;
			submit(e);
		}
	}
	bpf_map_delete_elem(&rss_store, &tgid);
}

/* The counter as the kmem:rss_stat tracepoint reports it (get_mm_counter: the percpu
 * counter's shared count, clamped at 0), in bytes. */
static __always_inline __s64 rss_counter_bytes(struct mm_struct *mm, int member)
{
	__s64 pages = BPF_CORE_READ(mm, rss_stat[member & 3].count);
	return pages > 0 ? pages * 4096 : 0;
}

/* tp_btf (attached by name through BTF, no tracefs): the raw tracepoint's arguments are the
 * mm whose counter changed and which counter. */
SEC("tp_btf/rss_stat")
int BPF_PROG(on_rss_stat, struct mm_struct *mm, int member)
{
	struct task_struct *task = bpf_get_current_task_btf();
	if (mm != BPF_CORE_READ(task, mm))
		return 0; /* another process's memory (reclaim, unmap of a foreign mm) */
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32;
	if (!is_target(task, tgid, (__u32)id))
		return 0;
	if (member < 0 || member > 3)
		return 0;
	__s64 size = rss_counter_bytes(mm, member);

	struct rss_state *r = bpf_map_lookup_elem(&rss_store, &tgid);
	if (!r) {
		struct rss_state init = { .last = { -1, -1, -1, -1 } };
		init.last[member & 3] = size;
		if (bpf_map_update_elem(&rss_store, &tgid, &init, BPF_NOEXIST) == -E2BIG)
			count_drop(STACKS_DROP_RSS_MAP_FULL);
		return 0;
	}
	__s64 last = r->last[member & 3];
	r->last[member & 3] = size;
	if (last < 0 || size <= last)
		return 0;
	r->growth += size - last;
	r->events += 1;
	r->member = member;
	if (r->events < rss_every)
		return 0;

	struct stacks_event *e = scratch_for(SCRATCH_TASK);
	if (!e)
		return 0;
	fill_header(e, STACKS_EV_RSS, task);
	e->hdr.count = r->events;
	e->info.rss.growth_bytes = r->growth;
	e->info.rss.counter = member;
	e->info.rss.pad = 0;
	e->info.rss.resident_bytes = rss_counter_bytes(mm, MM_FILEPAGES) +
				     rss_counter_bytes(mm, MM_ANONPAGES) +
				     rss_counter_bytes(mm, MM_SHMEMPAGES);
	r->growth = 0;
	r->events = 0;
	read_span(&e->hdr.span);
	capture_stacks_d(ctx, e, rss_stacks);
	submit_room(e);
	return 0;
}
