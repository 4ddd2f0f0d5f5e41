/* aggregate.bpf.h — in-kernel aggregation of `vfs` and `net` events while the IO ring buffer
 * is backed up: past agg_on_bytes waiting, events are summed per (kind, thread, stacks,
 * operation, error, file or connection, log2 latency bucket) into the current generation's
 * table instead of sent one by one, until at most agg_off_bytes wait. Totals (events, bytes,
 * latency) stay exact; what degrades is per-event detail (each event's time, its `tracing`
 * span, `d` stacks, which become frame-pointer stacks). User space flips the generation once a
 * second, waits for programs still writing the old one, takes its table out and clears its
 * stack tables (struct stacks_agg_key in stacks.h). Included by common.bpf.h. */

/* Tunables, set by user space before load; agg_on_bytes 0: never aggregate. */
const volatile __u64 agg_on_bytes = 0;
const volatile __u64 agg_off_bytes = 0;

/* The generation events go to (its low bit), written by user space. */
volatile __u32 agg_gen = 0;
/* 1 while events are aggregated. */
__u32 agg_active = 0;

/* One generation's tables: the sums, and the stacks their keys name by id (kernel addresses;
 * user frames as build id + file offset). Sized by user space (1 entry when no kind of the
 * IO ring is recorded). */
#define AGG_TABLES(g)                                                                  \
	struct {                                                                       \
		__uint(type, BPF_MAP_TYPE_HASH);                                       \
		__uint(max_entries, 1);                                                \
		__type(key, struct stacks_agg_key);                                    \
		__type(value, struct stacks_agg);                                      \
	} agg_events##g SEC(".maps");                                                  \
	struct {                                                                       \
		__uint(type, BPF_MAP_TYPE_STACK_TRACE);                                \
		__uint(max_entries, 1);                                                \
		__uint(key_size, sizeof(__u32));                                       \
		__uint(value_size, STACKS_MAX_DEPTH * 8);                              \
	} agg_kstacks##g SEC(".maps");                                                 \
	struct {                                                                       \
		__uint(type, BPF_MAP_TYPE_STACK_TRACE);                                \
		__uint(max_entries, 1);                                                \
		__uint(map_flags, BPF_F_STACK_BUILD_ID);                               \
		__uint(key_size, sizeof(__u32));                                       \
		__uint(value_size, STACKS_MAX_DEPTH * STACKS_UFRAME_SIZE);             \
	} agg_ustacks##g SEC(".maps");

AGG_TABLES(0)
AGG_TABLES(1)

/* A new entry's value under construction (one per CPU: too large for the BPF stack). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct stacks_agg);
} agg_scratch SEC(".maps");

/* Whether IO events are aggregated now: on from agg_on_bytes waiting in the IO ring, off again
 * at agg_off_bytes. */
static __always_inline bool agg_now(void)
{
	if (!agg_on_bytes)
		return false;
	__u64 waiting = ring_waiting(STACKS_RING_IO);
	if (waiting >= agg_on_bytes) {
		if (!agg_active)
			agg_active = 1;
	} else if (agg_active && waiting <= agg_off_bytes) {
		agg_active = 0;
	}
	return agg_active;
}

/* floor(log2(v)); 0 for 0. */
static __always_inline __u32 log2_u64(__u64 v)
{
	__u32 r = 0;
	if (v >> 32) {
		v >>= 32;
		r += 32;
	}
	if (v >> 16) {
		v >>= 16;
		r += 16;
	}
	if (v >> 8) {
		v >>= 8;
		r += 8;
	}
	if (v >> 4) {
		v >>= 4;
		r += 4;
	}
	if (v >> 2) {
		v >>= 2;
		r += 2;
	}
	if (v >> 1)
		r += 1;
	return r;
}

/* One event into table `events` (stacks into `kst`, `ust`): key `k` with its stack ids still
 * to set, `want` its kind's STACKS_WANT_*; `fd`'s file (none: -1) is read at a new entry.
 * False when the table was full. */
static __always_inline bool agg_put(void *ctx, void *events, void *kst, void *ust,
				    struct stacks_agg_key *k, __u32 want, __u64 bytes,
				    __u64 latency, __u64 ts, int fd)
{
	k->kstack = STACKS_NOT_REQUESTED;
	k->ustack = STACKS_NOT_REQUESTED;
	if (want & STACKS_WANT_KERNEL)
		k->kstack = (__s32)bpf_get_stackid(ctx, kst, 0);
	if (want & STACKS_WANT_USER)
		k->ustack = (__s32)bpf_get_stackid(ctx, ust, BPF_F_USER_STACK);
	struct stacks_agg *a = bpf_map_lookup_elem(events, k);
	if (a) {
		__sync_fetch_and_add(&a->count, 1);
		__sync_fetch_and_add(&a->bytes, bytes);
		__sync_fetch_and_add(&a->latency_ns, latency);
		return true;
	}
	__u32 zero = 0;
	struct stacks_agg *first = bpf_map_lookup_elem(&agg_scratch, &zero);
	if (!first)
		return false;
	struct task_struct *task = bpf_get_current_task_btf();
	first->count = 1;
	first->bytes = bytes;
	first->latency_ns = latency;
	first->first_ts = ts;
	first->cpu = bpf_get_smp_processor_id();
	first->pad = 0;
	BPF_CORE_READ_STR_INTO(&first->thread, task, comm);
	BPF_CORE_READ_STR_INTO(&first->comm, task, group_leader, comm);
	first->cgroup = task_cgroup(task);
	file_info(&first->file, task, fd); /* none for fd -1 */
	long rc = bpf_map_update_elem(events, k, first, BPF_NOEXIST);
	if (rc == 0)
		return true;
	if (rc == -EEXIST) {
		/* Another CPU added it first. */
		a = bpf_map_lookup_elem(events, k);
		if (a) {
			__sync_fetch_and_add(&a->count, 1);
			__sync_fetch_and_add(&a->bytes, bytes);
			__sync_fetch_and_add(&a->latency_ns, latency);
			return true;
		}
	}
	count_drop(STACKS_DROP_AGG_FULL + (k->kind & (STACKS_EV_ROOM - 1)));
	return false;
}

/* Add one event of key `k` (kind, ids, operation, error, file or connection and latency
 * bucket set) to the current generation's table. True when it was counted there (then it is
 * not sent); false when the table was full (then it is sent as a record). */
static __always_inline bool agg_add(void *ctx, struct stacks_agg_key *k, __u32 want, __u64 bytes,
				    __u64 latency, __u64 ts, int fd)
{
	bool ok;
	if (agg_gen & 1)
		ok = agg_put(ctx, &agg_events1, &agg_kstacks1, &agg_ustacks1, k, want, bytes,
			     latency, ts, fd);
	else
		ok = agg_put(ctx, &agg_events0, &agg_kstacks0, &agg_ustacks0, k, want, bytes,
			     latency, ts, fd);
	if (ok)
		count_drop(STACKS_DROP_AGGREGATED + (k->kind & (STACKS_EV_ROOM - 1)));
	return ok;
}
