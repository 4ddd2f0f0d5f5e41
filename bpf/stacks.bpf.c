// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/* stacks.bpf.c — BPF programs of stacks-record: CPU samples, off-CPU intervals (offcpu.bpf.h),
 * RSS growth, block IO, file and socket IO, each with stacks captured at the event (user stacks
 * by frame pointers, or copied for CFI unwinding: dwarf.bpf.h), thread states sampled by a task
 * iterator (state.bpf.h), hits of probes named in -e (probe.bpf.h), plus process lifecycle,
 * target filtering by pid / process name / descendants, and lost-event accounting.
 * Built on perf_event, tp_btf and raw_tp (attached by name through BTF: no tracefs needed),
 * uprobes/USDT and iter/task only (no kprobes, no fentry). */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>
#include <asm-generic/errno-base.h>
#include "stacks.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

#define STACK_BYTES (STACKS_MAX_DEPTH * 8)
#define USTACK_BYTES (STACKS_MAX_DEPTH * STACKS_UFRAME_SIZE)
#define AF_INET 2
#define AF_INET6 10
#define S_IFMT 00170000
#define S_IFIFO 0010000
#define S_IFSOCK 0140000
#define S_IFMT_SHIFT 12
#define TASK_INTERRUPTIBLE 0x1
#define TASK_UNINTERRUPTIBLE 0x2
#define TASK_STOPPED_BITS 0x4
#define TASK_TRACED_BITS 0x8
#define TASK_NOLOAD 0x400
#define REQ_OP_MASK 0xff
#define NS_PER_SEC 1000000000ULL

/* The header names the kernel's values it passes through: they must agree. */
_Static_assert(STACKS_RSS_FILE == MM_FILEPAGES && STACKS_RSS_ANON == MM_ANONPAGES &&
		       STACKS_RSS_SWAP == MM_SWAPENTS && STACKS_RSS_SHMEM == MM_SHMEMPAGES,
	       "enum stacks_rss_counter is the kernel's MM_* counters");
_Static_assert(STACKS_BLOCK_READ == REQ_OP_READ && STACKS_BLOCK_WRITE == REQ_OP_WRITE &&
		       STACKS_BLOCK_FLUSH == REQ_OP_FLUSH && STACKS_BLOCK_DISCARD == REQ_OP_DISCARD,
	       "enum stacks_block_op is the kernel's REQ_OP_*");
_Static_assert(STACKS_NET_INET == AF_INET && STACKS_NET_INET6 == AF_INET6 &&
		       STACKS_NET_TCP == IPPROTO_TCP && STACKS_NET_UDP == IPPROTO_UDP,
	       "enum stacks_net_* are the kernel's AF_* and IPPROTO_*");
_Static_assert(STACKS_FILE_FIFO == (S_IFIFO >> S_IFMT_SHIFT) &&
		       STACKS_FILE_SOCKET == (S_IFSOCK >> S_IFMT_SHIFT),
	       "enum stacks_file_type is the inode mode's type bits");
_Static_assert(sizeof(struct bpf_stack_build_id) == STACKS_UFRAME_SIZE,
	       "a user frame is a struct bpf_stack_build_id");

/* Tunables, set by user space before load. */
const volatile bool trace_all = false;      /* -a: every process */
const volatile bool include_idle = false;   /* with -a: also pid 0 (the idle tasks) */
const volatile bool follow_forks = true;    /* children of targets become targets */
const volatile __u32 profile_stacks = 0;    /* STACKS_WANT_* per event kind */
const volatile __u32 switch_stacks = 0;
const volatile __u32 rss_stacks = 0;
const volatile __u32 block_stacks = 0;
const volatile __u32 vfs_stacks = 0;
const volatile __u32 net_stacks = 0;
const volatile __u64 switch_min_ns = 0;     /* shorter off-CPU intervals are folded */
const volatile __u32 rss_every = 1;         /* emit every Nth RSS growth event per process */
const volatile bool read_spans = true;      /* read the `tracing` span of each event (span_procs) */
const volatile __u32 ustack_window = 16384; /* bytes of user stack copied for `d` stacks */
const volatile __u64 ringbuf_half = 8 << 20; /* past this much waiting data, no stack copies */
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

/* Events that could not be delivered, per CPU and cause (enum stacks_drop). The read-only
 * marker below puts the enum in the object's BTF, so the skeleton generates its type. */
const volatile enum stacks_drop drop_causes = STACKS_DROP_COUNT;
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, STACKS_DROP_COUNT);
	__type(key, __u32);
	__type(value, __u64);
} drops SEC(".maps");

/* Per-CPU records under construction: slot 0 for the perf_event program (it can interrupt
 * the others), slot 1 for programs running in task context. Each has room for a `d` stack. */
#define SCRATCH_PERF 0
#define SCRATCH_TASK 1
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, struct stacks_event_room);
} scratch SEC(".maps");
_Static_assert(sizeof(struct stacks_event_room) < 32768, "a per-CPU value is at most 32 KiB");

static __always_inline bool is_target(__u32 tgid, __u32 tid)
{
	if (trace_all)
		return tid != 0 || include_idle;
	return bpf_map_lookup_elem(&targets, &tgid) != NULL;
}

static __always_inline bool current_is_target(void)
{
	__u64 id = bpf_get_current_pid_tgid();
	return is_target(id >> 32, (__u32)id);
}

static __always_inline void count_drop(__u32 cause)
{
	__u64 *n = bpf_map_lookup_elem(&drops, &cause);
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

/* The cgroup v2 id of `task` (its cgroup's kernfs node id, the directory's inode number). */
static __always_inline __u64 task_cgroup(struct task_struct *task)
{
	return BPF_CORE_READ(task, cgroups, dfl_cgrp, kn, id);
}

/* Reset the header of a record for task `task` (ids and names), no stacks; the caller fills
 * the info member of its kind. */
static __always_inline void fill_header(struct stacks_event *e, enum stacks_event_kind kind, struct task_struct *task)
{
	struct stacks_header *h = &e->hdr;

	h->ts = bpf_ktime_get_boot_ns();
	h->kind = kind;
	h->pid = BPF_CORE_READ(task, tgid);
	h->tid = BPF_CORE_READ(task, pid);
	h->cpu = bpf_get_smp_processor_id();
	h->kstack_len = STACKS_NOT_REQUESTED;
	h->ustack_len = STACKS_NOT_REQUESTED;
	h->count = 1;
	h->uwindow = 0;
	BPF_CORE_READ_STR_INTO(&h->thread, task, comm);
	BPF_CORE_READ_STR_INTO(&h->comm, task, group_leader, comm);
	h->cgroup = task_cgroup(task);
	h->span.span_id = 0;
	h->span.attrs_len = 0;
}

/* ---- Span labels -------------------------------------------------------------------- */

/* Traced processes whose executable has tracing-stacks' thread context (tgid -> offsets),
 * filled by user space when it finds one; forks inherit it, exec and exit drop it. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __u32);
	__type(value, struct stacks_span_proc);
} span_procs SEC(".maps");

/* The span the current task is in, into `out` (span_id 0 when none, or not known): read
 * through the thread pointer from the thread-context record the process published. The
 * process's first read checks the canary; on a mismatch its spans are never read. */
static __always_inline void read_span(struct stacks_span *out)
{
	out->span_id = 0;
	out->attrs_len = 0;
	if (!read_spans)
		return;
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	struct stacks_span_proc *sp = bpf_map_lookup_elem(&span_procs, &tgid);
	if (!sp || sp->failed)
		return;
#if defined(__TARGET_ARCH_x86)
	struct task_struct *task = bpf_get_current_task_btf();
	__u64 tp = task->thread.fsbase;
#else
	__u64 tp = 0; /* other architectures: not read yet */
#endif
	if (!tp)
		return;
	if (!sp->checked) {
		__u64 canary = 0;
		if (bpf_probe_read_user(&canary, sizeof(canary), (void *)(tp + sp->canary_off)))
			return; /* not readable now (paged out): check at a later event */
		if (canary != STACKS_SPAN_CANARY) {
			sp->failed = 1;
			return;
		}
		sp->checked = 1;
	}
	__u64 rec = 0;
	if (bpf_probe_read_user(&rec, sizeof(rec), (void *)(tp + sp->ctx_off)) || !rec)
		return;
	/* Header and attributes in one read (each user-memory read costs ~200 ns here): the bytes
	 * past a short record are not used. Only when that runs into an unmapped page, the
	 * header and then the attributes it announces. */
	if (!bpf_probe_read_user(out, STACKS_SPAN_HEADER + STACKS_SPAN_ATTRS, (void *)rec)) {
		if (!out->valid)
			out->span_id = 0;
		return;
	}
	if (bpf_probe_read_user(out, STACKS_SPAN_HEADER, (void *)rec) || !out->valid) {
		out->span_id = 0;
		out->attrs_len = 0;
		return;
	}
	__u32 n = out->attrs_len;
	if (n > STACKS_SPAN_ATTRS)
		n = STACKS_SPAN_ATTRS;
	if (n && bpf_probe_read_user(out->attrs, n, (void *)(rec + STACKS_SPAN_HEADER)))
		out->attrs_len = 0;
}

static __always_inline struct stacks_event *scratch_for(__u32 slot)
{
	struct stacks_event_room *r = bpf_map_lookup_elem(&scratch, &slot);
	return r ? &r->e : NULL;
}

/* Capture the current task's wanted stacks into the record: kernel addresses first, then the
 * user frames (build id + file offset) right after them; lengths are frames or -errno. */
static __always_inline void capture_stacks(void *ctx, struct stacks_event *e, __u32 want)
{
	__u32 k = 0;

	if (want & STACKS_WANT_KERNEL) {
		long n = bpf_get_stack(ctx, e->frames, STACK_BYTES, 0);
		if (n < 0) {
			e->hdr.kstack_len = (__s32)n;
		} else {
			k = (__u32)n / 8;
			if (k > STACKS_MAX_DEPTH)
				k = STACKS_MAX_DEPTH;
			e->hdr.kstack_len = (__s32)k;
		}
	}
	if (want & STACKS_WANT_USER) {
		if (k > STACKS_MAX_DEPTH)
			k = STACKS_MAX_DEPTH;
		long n = bpf_get_stack(ctx, &e->frames[k], USTACK_BYTES,
				       BPF_F_USER_STACK | BPF_F_USER_BUILD_ID);
		if (n < 0) {
			e->hdr.ustack_len = (__s32)n;
		} else {
			__u32 u = (__u32)n / STACKS_UFRAME_SIZE;
			if (u > STACKS_MAX_DEPTH)
				u = STACKS_MAX_DEPTH;
			e->hdr.ustack_len = (__s32)u;
		}
	}
}

/* Hand a record to user space with only the frames it uses (none when no stack was
 * captured), waking the reader as `wake_flags` says. False when the ring buffer was full. */
static __always_inline bool submit_with(struct stacks_event *e, __u64 wake_flags)
{
	__u64 size = STACKS_EVENT_HEADER_SIZE;
	if (e->hdr.kstack_len > 0 && e->hdr.kstack_len <= STACKS_MAX_DEPTH)
		size += (__u64)e->hdr.kstack_len * 8;
	if (e->hdr.ustack_len > 0 && e->hdr.ustack_len <= STACKS_MAX_DEPTH)
		size += (__u64)e->hdr.ustack_len * STACKS_UFRAME_SIZE;
	if (size > sizeof(*e))
		size = sizeof(*e);
	if (bpf_ringbuf_output(&events, e, size, wake_flags)) {
		count_drop(STACKS_DROP_RINGBUF + (e->hdr.kind & 15));
		return false;
	}
	return true;
}

/* Hand a record to user space; the reader wakes once enough data waits. False when the ring
 * buffer was full. */
static __always_inline bool submit(struct stacks_event *e)
{
	return submit_with(e, wakeup_flags());
}

#include "dwarf.bpf.h"

/* ---- CPU samples -------------------------------------------------------------------- */

SEC("perf_event")
int on_cpu_sample(struct bpf_perf_event_data *ctx)
{
	if (!current_is_target())
		return 0;
	struct stacks_event *e = scratch_for(SCRATCH_PERF);
	if (!e)
		return 0;
	fill_header(e, STACKS_EV_PROFILE, (struct task_struct *)bpf_get_current_task());
	e->info.profile.period_ns = ctx->sample_period;
	read_span(&e->hdr.span);
	capture_stacks_d(ctx, e, profile_stacks);
	submit_room(e);
	return 0;
}

/* ---- Process lifecycle -------------------------------------------------------------- */

/* An exit hands over what the off-CPU and RSS sections below still hold for the task. */
static __always_inline void off_cpu_exit(void *ctx, struct task_struct *p);
static __always_inline void rss_exit(__u32 tgid, struct task_struct *p);

/* A lifecycle record of task `p` to fill, or NULL. */
static __always_inline struct stacks_event *lifecycle(enum stacks_event_kind kind,
						      struct task_struct *p)
{
	struct stacks_event *e = scratch_for(SCRATCH_TASK);
	if (e)
		fill_header(e, kind, p);
	return e;
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
	/* A new image: where its thread context is (if anywhere) is for user space to find. */
	bpf_map_delete_elem(&span_procs, &tgid);
	struct stacks_event *e = lifecycle(STACKS_EV_EXEC, p);
	if (!e)
		return 0;
	e->info.exec.filename[0] = 0;
	bpf_probe_read_kernel_str(e->info.exec.filename, sizeof(e->info.exec.filename),
				  BPF_CORE_READ(bprm, filename));
	submit_now(e);
	return 0;
}

SEC("tp_btf/sched_process_fork")
int BPF_PROG(on_fork, struct task_struct *parent, struct task_struct *child)
{
	__u32 ptgid = BPF_CORE_READ(parent, tgid);
	__u32 ctgid = BPF_CORE_READ(child, tgid);
	__u8 one = 1;

	if (ptgid == ctgid)
		return 0; /* a new thread, not a process */
	if (!trace_all) {
		if (!bpf_map_lookup_elem(&targets, &ptgid))
			return 0;
		if (!follow_forks)
			return 0;
		bpf_map_update_elem(&targets, &ctgid, &one, BPF_ANY);
	}
	/* The child runs the parent's image: its thread context is where the parent's is. */
	struct stacks_span_proc *sp = bpf_map_lookup_elem(&span_procs, &ptgid);
	if (sp)
		bpf_map_update_elem(&span_procs, &ctgid, sp, BPF_ANY);
	struct stacks_event *e = lifecycle(STACKS_EV_FORK, parent);
	if (!e)
		return 0;
	e->info.fork.child_pid = ctgid;
	submit_now(e);
	return 0;
}

SEC("tp_btf/sched_process_exit")
int BPF_PROG(on_exit, struct task_struct *p, bool group_dead)
{
	__u32 tgid = BPF_CORE_READ(p, tgid);

	if (!trace_all && !bpf_map_lookup_elem(&targets, &tgid))
		return 0;
	off_cpu_exit(ctx, p);
	if (!group_dead)
		return 0;
	rss_exit(tgid, p);
	struct stacks_event *e = lifecycle(STACKS_EV_EXIT, p);
	if (e) {
		e->info.exit.exit_code = BPF_CORE_READ(p, exit_code);
		submit_now(e);
	}
	if (!trace_all)
		bpf_map_delete_elem(&targets, &tgid);
	bpf_map_delete_elem(&span_procs, &tgid);
	return 0;
}

#include "offcpu.bpf.h"

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
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();
	if (mm != BPF_CORE_READ(task, mm))
		return 0; /* another process's memory (reclaim, unmap of a foreign mm) */
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32;
	if (!is_target(tgid, (__u32)id))
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
	if ((block_stacks & STACKS_WANT_DWARF) && !ringbuf_crowded()) {
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

/* ---- File reads and writes ---------------------------------------------------------- */

/* Per-thread system call in progress (vfs). */
struct vfs_call {
	__u64 ts;
	__s32 fd;
	__u32 call;
};

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct vfs_call);
} vfs_store SEC(".maps");

/* System call numbers of the calls `vfs` traces, for this architecture. The syscalls:*
 * tracepoints need tracefs to attach; the raw sys_enter/sys_exit tracepoints attach by name
 * through BTF (tp_btf) and see every call, so the number picks ours. */
#if defined(__TARGET_ARCH_arm64)
#define NR_read 63
#define NR_write 64
#define NR_readv 65
#define NR_writev 66
#define NR_pread64 67
#define NR_pwrite64 68
#define NR_preadv 69
#define NR_pwritev 70
#define NR_preadv2 286
#define NR_pwritev2 287
#define SYSCALL_ARG0_FIELD regs[0]
#define SYSCALL_NR_FIELD syscallno
#else
#define NR_read 0
#define NR_write 1
#define NR_pread64 17
#define NR_pwrite64 18
#define NR_readv 19
#define NR_writev 20
#define NR_preadv 295
#define NR_pwritev 296
#define NR_preadv2 327
#define NR_pwritev2 328
#define SYSCALL_ARG0_FIELD di
#define SYSCALL_NR_FIELD orig_ax
#endif

/* The traced call a system call number stands for, or -1. */
static __always_inline int vfs_call_of(long nr)
{
	switch (nr) {
	case NR_read: return STACKS_VFS_READ;
	case NR_write: return STACKS_VFS_WRITE;
	case NR_pread64: return STACKS_VFS_PREAD64;
	case NR_pwrite64: return STACKS_VFS_PWRITE64;
	case NR_readv: return STACKS_VFS_READV;
	case NR_writev: return STACKS_VFS_WRITEV;
	case NR_preadv: return STACKS_VFS_PREADV;
	case NR_pwritev: return STACKS_VFS_PWRITEV;
	case NR_preadv2: return STACKS_VFS_PREADV2;
	case NR_pwritev2: return STACKS_VFS_PWRITEV2;
	default: return -1;
	}
}

SEC("tp_btf/sys_enter")
int BPF_PROG(vfs_enter, struct pt_regs *regs, long id)
{
	int call = vfs_call_of(id);
	if (call < 0 || !current_is_target())
		return 0;
	struct task_struct *task = bpf_get_current_task_btf();
	struct vfs_call *c = bpf_task_storage_get(&vfs_store, task, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!c) {
		count_drop(STACKS_DROP_VFS_STORAGE);
		return 0;
	}
	c->ts = bpf_ktime_get_boot_ns();
	c->fd = (__s32)BPF_CORE_READ(regs, SYSCALL_ARG0_FIELD);
	c->call = call;
	return 0;
}

/* The file's path into v->path (see struct stacks_file); path_complete when the walk reached
 * the root. */
#define PATH_MAX_COMPONENTS 12
#define NAME_READ 64

static __always_inline void file_path(struct stacks_file *v, struct file *f)
{
	struct dentry *d = BPF_CORE_READ(f, f_path.dentry);
	struct vfsmount *vmnt = BPF_CORE_READ(f, f_path.mnt);
	struct mount *mnt = container_of(vmnt, struct mount, mnt);
	__u32 off = 0;

	for (int i = 0; i < PATH_MAX_COMPONENTS + 4; i++) {
		struct dentry *parent = BPF_CORE_READ(d, d_parent);
		struct dentry *mnt_root = BPF_CORE_READ(mnt, mnt.mnt_root);
		if (d == mnt_root || d == parent) {
			struct mount *up = BPF_CORE_READ(mnt, mnt_parent);
			if (up == mnt || !up) {
				v->path_complete = 1;
				break;
			}
			d = BPF_CORE_READ(mnt, mnt_mountpoint);
			mnt = up;
			continue;
		}
		if (off >= STACKS_STR_LEN)
			break;
		const unsigned char *name = BPF_CORE_READ(d, d_name.name);
		/* Reads may run past path into the frames area, which is written later. */
		long n = bpf_probe_read_kernel_str(&v->path[off & (STACKS_STR_LEN - 1)], NAME_READ,
						   name);
		if (n <= 0)
			break;
		off += n;
		d = parent;
	}
	v->path_len = off < STACKS_STR_LEN ? off : STACKS_STR_LEN;
}

/* Descriptor `fd` of `task`'s fd table: its inode, type and path into `v` (left empty when it
 * names no file). Returns the file, or NULL. */
static __always_inline struct file *file_info(struct stacks_file *v, struct task_struct *task,
					      int fd)
{
	v->inode = 0;
	v->file_type = STACKS_FILE_NONE;
	v->path_len = 0;
	v->path_complete = 0;
	v->path[0] = 0;
	struct fdtable *fdt = BPF_CORE_READ(task, files, fdt);
	if (!fdt || fd < 0)
		return NULL;
	unsigned int max = BPF_CORE_READ(fdt, max_fds);
	if ((unsigned int)fd >= max)
		return NULL;
	struct file **fds = BPF_CORE_READ(fdt, fd);
	struct file *f = NULL;
	bpf_probe_read_kernel(&f, sizeof(f), &fds[fd]);
	if (!f)
		return NULL;
	v->inode = BPF_CORE_READ(f, f_inode, i_ino);
	__u32 mode = BPF_CORE_READ(f, f_inode, i_mode);
	v->file_type = (mode & S_IFMT) >> S_IFMT_SHIFT;
	file_path(v, f);
	return f;
}

SEC("tp_btf/sys_exit")
int BPF_PROG(vfs_exit, struct pt_regs *regs, long ret)
{
	if (vfs_call_of(BPF_CORE_READ(regs, SYSCALL_NR_FIELD)) < 0)
		return 0;
	struct task_struct *task = bpf_get_current_task_btf();
	struct vfs_call *c = bpf_task_storage_get(&vfs_store, task, 0, 0);
	if (!c || !c->ts)
		return 0;
	__u64 now = bpf_ktime_get_boot_ns();
	struct stacks_event *e = scratch_for(SCRATCH_TASK);
	if (!e) {
		c->ts = 0;
		return 0;
	}
	fill_header(e, STACKS_EV_VFS, (struct task_struct *)bpf_get_current_task());
	struct stacks_vfs *v = &e->info.vfs;
	e->hdr.ts = c->ts;
	v->latency_ns = now - c->ts;
	v->bytes = ret > 0 ? ret : 0;
	v->fd = c->fd;
	v->error = ret < 0 ? (__s32)-ret : 0;
	v->syscall = c->call;
	c->ts = 0;
	file_info(&v->file, (struct task_struct *)bpf_get_current_task(), c->fd);
	read_span(&e->hdr.span);
	capture_stacks_d(ctx, e, vfs_stacks);
	submit_room(e);
	return 0;
}

/* ---- TCP and UDP -------------------------------------------------------------------- */

/* The family, protocol and addresses of `sk` into `a`; false (nothing written) for a socket
 * that is not TCP or UDP over IPv4 or IPv6. */
static __always_inline bool sock_addrs(struct sock *sk, __u32 *family, __u32 *protocol,
				       struct stacks_net_addrs *a)
{
	__u16 fam = BPF_CORE_READ(sk, __sk_common.skc_family);
	if (fam != AF_INET && fam != AF_INET6)
		return false;
	__u16 proto = BPF_CORE_READ(sk, sk_protocol);
	if (proto != IPPROTO_TCP && proto != IPPROTO_UDP)
		return false;
	*family = fam;
	*protocol = proto;
	__builtin_memset(a, 0, sizeof(*a));
	a->local_port = BPF_CORE_READ(sk, __sk_common.skc_num);
	a->remote_port = bpf_ntohs(BPF_CORE_READ(sk, __sk_common.skc_dport));
	if (fam == AF_INET) {
		__u32 l = BPF_CORE_READ(sk, __sk_common.skc_rcv_saddr);
		__u32 r = BPF_CORE_READ(sk, __sk_common.skc_daddr);
		__builtin_memcpy(a->local, &l, 4);
		__builtin_memcpy(a->remote, &r, 4);
	} else {
		BPF_CORE_READ_INTO(&a->local, sk, __sk_common.skc_v6_rcv_saddr.in6_u.u6_addr8);
		BPF_CORE_READ_INTO(&a->remote, sk, __sk_common.skc_v6_daddr.in6_u.u6_addr8);
	}
	return true;
}

static __always_inline void net_event(void *ctx, struct sock *sk, int ret,
				      enum stacks_net_direction dir)
{
	/* Nothing moved, or a non-blocking socket had nothing to do: not traffic. */
	if (ret == 0 || ret == -EAGAIN || !current_is_target())
		return;
	struct stacks_event *e = scratch_for(SCRATCH_TASK);
	if (!e)
		return;
	struct stacks_net *n = &e->info.net;
	__u32 family, protocol;
	if (!sock_addrs(sk, &family, &protocol, &n->addrs))
		return;
	fill_header(e, STACKS_EV_NET, (struct task_struct *)bpf_get_current_task());
	n->bytes = ret > 0 ? ret : 0;
	n->error = ret < 0 ? -ret : 0;
	n->family = family;
	n->protocol = protocol;
	n->direction = dir;
	read_span(&e->hdr.span);
	capture_stacks_d(ctx, e, net_stacks);
	submit_room(e);
}

SEC("tp_btf/sock_send_length")
int BPF_PROG(on_sock_send, struct sock *sk, int ret, int flags)
{
	net_event(ctx, sk, ret, STACKS_NET_SEND);
	return 0;
}

SEC("tp_btf/sock_recv_length")
int BPF_PROG(on_sock_recv, struct sock *sk, int ret, int flags)
{
	net_event(ctx, sk, ret, STACKS_NET_RECV);
	return 0;
}

/* ---- Thread states ------------------------------------------------------------------ */

#include "state.bpf.h"
#include "probe.bpf.h"
