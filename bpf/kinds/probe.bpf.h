/* kinds/probe.bpf.h — the probes named in -e (tp:, uprobe:, uretprobe:, usdt:): one program per
 * probe type, attached once per probe with the probe's index as its BPF cookie. A hit becomes a
 * record; a hit of a counting probe (`:count`) adds one to its (probe, thread, stack ids) entry
 * of probe_counts instead, which user space turns into rows once a second, so a hot probe costs
 * a map update, not a record. A hit that cannot be counted (table full, or the stack table's
 * slot for its stack taken by another stack) is sent as a record. Included by stacks.bpf.c after
 * common.bpf.h. */
#pragma once
#include <bpf/usdt.bpf.h>

/* Each probe's settings, by index (the attach cookie); set by user space before load. */
const volatile struct stacks_probe_conf probe_conf[STACKS_MAX_PROBES] = {};

/* Hits of counting probes (see struct stacks_probe_key); sized by user space. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1);
	__type(key, struct stacks_probe_key);
	__type(value, struct stacks_probe_count);
} probe_counts SEC(".maps");

/* The stacks of counting probes' hits, by id: kernel addresses, and user frames as build id
 * + file offset (BPF_F_STACK_BUILD_ID). Sized by user space; an id stays valid for the whole
 * recording (no BPF_F_REUSE_STACKID). */
struct {
	__uint(type, BPF_MAP_TYPE_STACK_TRACE);
	__uint(max_entries, 1);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, STACKS_MAX_DEPTH * 8);
} probe_kstacks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_STACK_TRACE);
	__uint(max_entries, 1);
	__uint(map_flags, BPF_F_STACK_BUILD_ID);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, STACKS_MAX_DEPTH * STACKS_UFRAME_SIZE);
} probe_ustacks SEC(".maps");

/* A second user stack table (another size: other slots) for stacks whose slot in the first is
 * taken. The kernel resolves a frame's build id only when it gets the address space's lock
 * without waiting, so the same stack comes both with build ids and as bare addresses: the
 * first variant takes the slot and the other would not be counted. Ids from this table have
 * STACKS_PROBE_USTACK2 set. */
struct {
	__uint(type, BPF_MAP_TYPE_STACK_TRACE);
	__uint(max_entries, 1);
	__uint(map_flags, BPF_F_STACK_BUILD_ID);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, STACKS_MAX_DEPTH * STACKS_UFRAME_SIZE);
} probe_ustacks2 SEC(".maps");

/* Per-CPU probe records under construction. Probes fire in any context and uprobe programs
 * can be preempted, so a hit claims a free slot (busy 0 -> 1) and releases it after sending. */
struct probe_slot {
	__u64 busy; /* 64 bits: BPF's atomics before cpu v3 */
	union {
		struct stacks_event e;
		struct stacks_event_room room; /* room for a `d` stack's registers and copy */
	};
};
_Static_assert(sizeof(struct probe_slot) < 32768, "a per-CPU value is at most 32 KiB");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, STACKS_PROBE_SLOTS);
	__type(key, __u32);
	__type(value, struct probe_slot);
} probe_slots SEC(".maps");

static __always_inline struct probe_slot *probe_claim(void)
{
	for (__u32 i = 0; i < STACKS_PROBE_SLOTS; i++) {
		struct probe_slot *s = bpf_map_lookup_elem(&probe_slots, &i);
		if (s && __sync_val_compare_and_swap(&s->busy, 0, 1) == 0)
			return s;
	}
	return NULL;
}

/* Count a hit of counting probe `idx` in probe_counts; false when it could not be counted
 * (the caller sends it as a record). */
static __always_inline bool probe_count(void *ctx, __u32 idx, __u32 want)
{
	struct stacks_probe_key k = {};
	__u64 id = bpf_get_current_pid_tgid();

	k.probe = idx;
	k.pid = id >> 32;
	k.tid = (__u32)id;
	k.kstack = STACKS_NOT_REQUESTED;
	k.ustack = STACKS_NOT_REQUESTED;
	if (want & STACKS_WANT_KERNEL) {
		long s = bpf_get_stackid(ctx, &probe_kstacks, 0);
		if (s == -EEXIST)
			goto uncounted;
		k.kstack = (__s32)s;
	}
	if (want & STACKS_WANT_USER) {
		long s = bpf_get_stackid(ctx, &probe_ustacks, BPF_F_USER_STACK);
		if (s == -EEXIST) {
			s = bpf_get_stackid(ctx, &probe_ustacks2, BPF_F_USER_STACK);
			if (s >= 0)
				s |= STACKS_PROBE_USTACK2;
		}
		if (s == -EEXIST)
			goto uncounted;
		k.ustack = (__s32)s;
	}
	struct stacks_probe_count *c = bpf_map_lookup_elem(&probe_counts, &k);
	if (c) {
		__sync_fetch_and_add(&c->hits, 1);
		return true;
	}
	struct stacks_probe_count first = {};
	struct task_struct *task = bpf_get_current_task_btf();
	first.hits = 1;
	first.first_ts = bpf_ktime_get_boot_ns();
	first.cpu = bpf_get_smp_processor_id();
	BPF_CORE_READ_STR_INTO(&first.thread, task, comm);
	BPF_CORE_READ_STR_INTO(&first.comm, task, group_leader, comm);
	first.cgroup = task_cgroup(task);
	long rc = bpf_map_update_elem(&probe_counts, &k, &first, BPF_NOEXIST);
	if (rc == 0)
		return true;
	if (rc == -EEXIST) {
		/* Another CPU added it first. */
		c = bpf_map_lookup_elem(&probe_counts, &k);
		if (c) {
			__sync_fetch_and_add(&c->hits, 1);
			return true;
		}
	}
uncounted:
	count_drop(STACKS_DROP_PROBE_UNCOUNTED);
	return false;
}

/* A claimed slot holding a fresh record of `kind` for the current task (its header filled),
 * or NULL when every slot is in use (counted). */
static __always_inline struct probe_slot *probe_record(enum stacks_event_kind kind)
{
	struct probe_slot *s = probe_claim();
	if (!s) {
		count_drop(STACKS_DROP_PROBE_BUSY);
		return NULL;
	}
	fill_header(&s->e, kind, bpf_get_current_task_btf());
	return s;
}

/* A hit of probe `idx` with `nargs` arguments in `args`. */
static __always_inline int probe_hit(void *ctx, __u64 cookie, const __u64 *args, __u32 nargs)
{
	if (cookie >= STACKS_MAX_PROBES || !current_is_target())
		return 0;
	__u32 idx = (__u32)cookie;
	__u32 want = probe_conf[idx].stacks;
	if (probe_conf[idx].counting && probe_count(ctx, idx, want))
		return 0;
	struct probe_slot *s = probe_record(STACKS_EV_PROBE);
	if (!s)
		return 0;
	struct stacks_event *e = &s->e;
	e->info.probe.probe = idx;
	e->info.probe.nargs = nargs;
	for (__u32 i = 0; i < STACKS_PROBE_ARGS; i++)
		e->info.probe.args[i] = args[i];
	read_span(&e->hdr.span);
	capture_stacks_d(ctx, e, want);
	submit_room(e);
	s->busy = 0;
	return 0;
}

/* A kernel tracepoint, attached by name (raw tracepoint: no tracefs). Its fields are the
 * u64s the context points to; user space keeps as many as the tracepoint has (BTF). */
SEC("raw_tp")
int on_probe_tp(struct bpf_raw_tracepoint_args *ctx)
{
	__u64 args[STACKS_PROBE_ARGS] = {};
	bpf_probe_read_kernel(args, sizeof(args), ctx->args);
	return probe_hit(ctx, bpf_get_attach_cookie(ctx), args, STACKS_PROBE_ARGS);
}

/* A function's entry: its first six integer arguments. */
SEC("uprobe")
int on_probe_uprobe(struct pt_regs *ctx)
{
	__u64 args[STACKS_PROBE_ARGS] = {
		PT_REGS_PARM1(ctx), PT_REGS_PARM2(ctx), PT_REGS_PARM3(ctx),
		PT_REGS_PARM4(ctx), PT_REGS_PARM5(ctx), PT_REGS_PARM6(ctx),
	};
	return probe_hit(ctx, bpf_get_attach_cookie(ctx), args, STACKS_PROBE_ARGS);
}

/* A function's return: the return value. */
SEC("uretprobe")
int on_probe_uretprobe(struct pt_regs *ctx)
{
	__u64 args[STACKS_PROBE_ARGS] = {PT_REGS_RC(ctx)};
	return probe_hit(ctx, bpf_get_attach_cookie(ctx), args, 1);
}

/* A USDT probe: its arguments as the probe's note describes them. */
SEC("usdt")
int on_probe_usdt(struct pt_regs *ctx)
{
	__u64 args[STACKS_PROBE_ARGS] = {};
	int cnt = bpf_usdt_arg_cnt(ctx);
	__u32 n = 0;

	for (__u32 i = 0; i < STACKS_PROBE_ARGS; i++) {
		long v;
		if ((int)i >= cnt || bpf_usdt_arg(ctx, i, &v))
			break;
		args[i] = (__u64)v;
		n = i + 1;
	}
	return probe_hit(ctx, bpf_usdt_cookie(ctx), args, n);
}
