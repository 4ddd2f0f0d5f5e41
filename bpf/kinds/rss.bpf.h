/* kinds/rss.bpf.h — the `rss` event: RSS growth (kmem:rss_stat) in the thread whose memory
 * grew, every Nth growth event of a thread and counter. Included by stacks.bpf.c after
 * common.bpf.h. */
#pragma once

/* Tunables, set by user space before load. */
const volatile __u32 rss_stacks = 0; /* STACKS_WANT_* */
const volatile __u32 rss_every = 1;         /* emit every Nth growth event of a thread's counter */

/* ---- RSS growth --------------------------------------------------------------------- */

/* Each process's counters as last seen (tgid -> struct rss_state, in stacks.h). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __u32);
	__type(value, struct rss_state);
} rss_store SEC(".maps");

/* Each thread's growth not yet emitted, by counter (tid -> struct rss_thread): a row stands
 * for one thread's growth of one counter, so neither another thread's growth nor another
 * counter's lands in a sampled row. User space takes what is left at the end. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __u32);
	__type(value, struct rss_thread);
	__uint(map_flags, BPF_F_NO_PREALLOC); /* the threads whose memory grows: few at a time */
} rss_threads SEC(".maps");

/* Thread `task` exits: emit what is left of its growth, a row without stacks per counter. */
static __always_inline void rss_thread_exit(struct task_struct *task)
{
	__u32 tid = BPF_CORE_READ(task, pid);
	struct rss_thread *t = bpf_map_lookup_elem(&rss_threads, &tid);
	if (!t)
		return;
	for (int m = 0; m < 4; m++) {
		if (!t->events[m])
			continue;
		struct stacks_event *e = scratch_for(SCRATCH_TASK);
		if (!e)
			break;
		fill_header(e, STACKS_EV_RSS, task);
		e->hdr.count = t->events[m];
		e->info.rss.growth_bytes = t->growth[m];
		e->info.rss.resident_bytes = 0;
		e->info.rss.counter = m;
		e->info.rss.pad = 0;
		submit(e);
	}
	bpf_map_delete_elem(&rss_threads, &tid);
}

/* The last thread of process `tgid` exits: forget its counters. */
static __always_inline void rss_exit(__u32 tgid)
{
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
			count_drop(STACKS_DROP_MAP_FULL + STACKS_EV_RSS);
		return 0;
	}
	__s64 last = r->last[member & 3];
	r->last[member & 3] = size;
	if (last < 0 || size <= last)
		return 0;
	__u64 growth = size - last;
	__u32 events = 1;
	if (rss_every > 1) {
		__u32 tid = (__u32)id;
		struct rss_thread *t = bpf_map_lookup_elem(&rss_threads, &tid);
		if (!t) {
			struct rss_thread init = { .tgid = tgid };
			if (bpf_map_update_elem(&rss_threads, &tid, &init, BPF_NOEXIST) == -E2BIG) {
				count_drop(STACKS_DROP_MAP_FULL + STACKS_EV_RSS);
				return 0;
			}
			t = bpf_map_lookup_elem(&rss_threads, &tid);
			if (!t)
				return 0;
		}
		growth += t->growth[member & 3];
		events += t->events[member & 3];
		if (events < rss_every) {
			t->growth[member & 3] = growth;
			t->events[member & 3] = events;
			return 0;
		}
		t->growth[member & 3] = 0;
		t->events[member & 3] = 0;
	}

	struct stacks_event *e = scratch_for(SCRATCH_TASK);
	if (!e)
		return 0;
	fill_header(e, STACKS_EV_RSS, task);
	e->hdr.count = events;
	e->info.rss.growth_bytes = growth;
	e->info.rss.counter = member;
	e->info.rss.pad = 0;
	e->info.rss.resident_bytes = rss_counter_bytes(mm, MM_FILEPAGES) +
				     rss_counter_bytes(mm, MM_ANONPAGES) +
				     rss_counter_bytes(mm, MM_SHMEMPAGES);
	read_span(&e->hdr.span);
	capture_stacks_d(ctx, e, rss_stacks);
	submit_room(e);
	return 0;
}
