// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/* stacks.bpf.c — BPF programs of stacks-record: CPU samples with stacks captured at event time,
 * target filtering by pid / process name / descendants, and lost-event accounting. Built on
 * perf_event and tp_btf tracepoints only (no kprobes, no fentry). */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "stacks.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

#define BPF_F_USER_STACK_FLAG (1ULL << 8)

/* Tunables, set by user space before load. */
const volatile bool trace_all = false;      /* -a: every process */
const volatile bool include_idle = false;   /* with -a: also pid 0 (the idle tasks) */
const volatile bool follow_forks = true;    /* children of targets become targets */
const volatile __u32 profile_stacks = 0;    /* STACKS_WANT_* for profile samples */
/* Wake the reader only once this much data waits (it also polls on a short timer), so a busy
 * event source does not cost a reader wakeup per event. 0: wake on every event. */
const volatile __u64 wakeup_bytes = 0;

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 16 << 20); /* resized by user space */
} events SEC(".maps");

/* Traced processes (tgid -> 1). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __u32);
	__type(value, __u8);
} targets SEC(".maps");

/* Process names to trace, matched at exec (comm, NUL padded -> 1). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, char[STACKS_COMM_LEN]);
	__type(value, __u8);
} target_comms SEC(".maps");

/* Events that could not be handed to user space (ring buffer full), per CPU. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} lost SEC(".maps");

static __always_inline bool is_target(__u32 tgid, __u32 tid)
{
	if (trace_all)
		return tid != 0 || include_idle;
	return bpf_map_lookup_elem(&targets, &tgid) != NULL;
}

static __always_inline void count_lost(void)
{
	__u32 zero = 0;
	__u64 *n = bpf_map_lookup_elem(&lost, &zero);
	if (n)
		__sync_fetch_and_add(n, 1);
}

static __always_inline __u64 wakeup_flags(void)
{
	if (!wakeup_bytes)
		return 0;
	return bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA) >= wakeup_bytes ? BPF_RB_FORCE_WAKEUP
									       : BPF_RB_NO_WAKEUP;
}

static __always_inline struct stacks_event *reserve(__u32 kind, __u32 tgid, __u32 tid)
{
	struct stacks_event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		count_lost();
		return NULL;
	}
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();
	e->ts = bpf_ktime_get_boot_ns();
	e->value = 0;
	e->kind = kind;
	e->pid = tgid;
	e->tid = tid;
	e->cpu = bpf_get_smp_processor_id();
	e->kstack_len = STACKS_NOT_REQUESTED;
	e->ustack_len = STACKS_NOT_REQUESTED;
	bpf_get_current_comm(e->thread, sizeof(e->thread));
	BPF_CORE_READ_STR_INTO(&e->comm, task, group_leader, comm);
	return e;
}

/* Capture the wanted stacks into the event; lengths are frames or -errno. */
static __always_inline void capture_stacks(void *ctx, struct stacks_event *e, __u32 want)
{
	if (want & STACKS_WANT_KERNEL) {
		long n = bpf_get_stack(ctx, e->kstack, sizeof(e->kstack), 0);
		e->kstack_len = n < 0 ? (__s32)n : (__s32)(n / sizeof(__u64));
	}
	if (want & STACKS_WANT_USER) {
		long n = bpf_get_stack(ctx, e->ustack, sizeof(e->ustack), BPF_F_USER_STACK_FLAG);
		e->ustack_len = n < 0 ? (__s32)n : (__s32)(n / sizeof(__u64));
	}
}

SEC("perf_event")
int on_cpu_sample(struct bpf_perf_event_data *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32, tid = (__u32)id;

	if (!is_target(tgid, tid))
		return 0;
	struct stacks_event *e = reserve(STACKS_EV_PROFILE, tgid, tid);
	if (!e)
		return 0;
	e->value = ctx->sample_period;
	capture_stacks(ctx, e, profile_stacks);
	bpf_ringbuf_submit(e, wakeup_flags());
	return 0;
}

/* Emit a bookkeeping event about task p (not the current task's stacks). */
static __always_inline void lifecycle(__u32 kind, struct task_struct *p)
{
	struct stacks_event *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		count_lost();
		return;
	}
	e->ts = bpf_ktime_get_boot_ns();
	e->value = 0;
	e->kind = kind;
	e->pid = BPF_CORE_READ(p, tgid);
	e->tid = BPF_CORE_READ(p, pid);
	e->cpu = bpf_get_smp_processor_id();
	e->kstack_len = STACKS_NOT_REQUESTED;
	e->ustack_len = STACKS_NOT_REQUESTED;
	BPF_CORE_READ_STR_INTO(&e->thread, p, comm);
	BPF_CORE_READ_STR_INTO(&e->comm, p, group_leader, comm);
	bpf_ringbuf_submit(e, BPF_RB_FORCE_WAKEUP);
}

SEC("tp_btf/sched_process_exec")
int BPF_PROG(on_exec, struct task_struct *p, pid_t old_pid, struct linux_binprm *bprm)
{
	__u32 tgid = BPF_CORE_READ(p, tgid);
	__u8 one = 1;

	if (!trace_all && !bpf_map_lookup_elem(&targets, &tgid)) {
		char comm[STACKS_COMM_LEN] = {};
		BPF_CORE_READ_STR_INTO(&comm, p, comm);
		if (!bpf_map_lookup_elem(&target_comms, comm))
			return 0;
		bpf_map_update_elem(&targets, &tgid, &one, BPF_ANY);
	}
	lifecycle(STACKS_EV_EXEC, p);
	return 0;
}

SEC("tp_btf/sched_process_fork")
int BPF_PROG(on_fork, struct task_struct *parent, struct task_struct *child)
{
	__u32 ptgid = BPF_CORE_READ(parent, tgid);
	__u32 ctgid = BPF_CORE_READ(child, tgid);
	__u8 one = 1;

	if (trace_all || !follow_forks || ptgid == ctgid)
		return 0;
	if (bpf_map_lookup_elem(&targets, &ptgid))
		bpf_map_update_elem(&targets, &ctgid, &one, BPF_ANY);
	return 0;
}

SEC("tp_btf/sched_process_exit")
int BPF_PROG(on_exit, struct task_struct *p)
{
	__u32 tgid = BPF_CORE_READ(p, tgid);
	__u32 pid = BPF_CORE_READ(p, pid);

	if (pid != tgid)
		return 0;
	if (!trace_all && !bpf_map_lookup_elem(&targets, &tgid))
		return 0;
	lifecycle(STACKS_EV_EXIT, p);
	if (!trace_all)
		bpf_map_delete_elem(&targets, &tgid);
	return 0;
}
