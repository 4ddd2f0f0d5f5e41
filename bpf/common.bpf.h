/* common.bpf.h — what every event kind of stacks.bpf.c shares: the tunables and maps of every
 * recording (targets, the ring buffers, drop counters, scratch records), filling a record's
 * header, reading the `tracing` span, capturing stacks (frame pointers, or copied for CFI
 * unwinding: dwarf.bpf.h) and sending records; the system calls, files and sockets several kinds
 * read (syscalls.bpf.h). Each kind's programs are in kinds/<kind>.bpf.h. */
#pragma once
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>
#include <asm-generic/errno-base.h>
#include "stacks.h"

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
/* --cgroup: only tasks in these cgroups or their descendants are traced (none: the other
 * targets). */
const volatile __u32 cgroup_count = 0;
const volatile struct stacks_cgroup_target target_cgroups[STACKS_MAX_CGROUPS] = {};
const volatile bool read_spans = true;      /* read the `tracing` span of each event (span_procs) */
const volatile __u32 ustack_window = 16384; /* bytes of user stack copied for `d` stacks */
/* Per ring buffer (enum stacks_ring; one more slot, so an index masked with 3 is in bounds):
 * past this much waiting data, no stack copies. */
const volatile __u64 ring_half[4] = {8 << 20, 8 << 20, 8 << 20, 8 << 20};
/* Wake the reader only once this much data waits (it also polls on a short timer), so a busy
 * event source does not cost a reader wakeup per event. 0: wake on every event. */
const volatile __u64 wakeup_bytes[4] = {};
/* The ring of each record kind (enum stacks_event_kind -> enum stacks_ring). */
const volatile enum stacks_ring kind_ring[STACKS_EV_ROOM] = {};

/* One ring buffer per class of kinds (enum stacks_ring); sized by user space (a page when no
 * kind of its class is recorded). */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 16 << 20);
} events_samples SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 16 << 20);
} events_io SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 16 << 20);
} events_probes SEC(".maps");

/* The ring of records of `kind`. */
static __always_inline __u32 ring_of(__u32 kind)
{
	__u32 ring = kind_ring[kind & (STACKS_EV_ROOM - 1)];
	return ring < STACKS_RING_COUNT ? ring : STACKS_RING_SAMPLES;
}

/* Bytes waiting in ring `ring`. */
static __always_inline __u64 ring_waiting(__u32 ring)
{
	if (ring == STACKS_RING_IO)
		return bpf_ringbuf_query(&events_io, BPF_RB_AVAIL_DATA);
	if (ring == STACKS_RING_PROBES)
		return bpf_ringbuf_query(&events_probes, BPF_RB_AVAIL_DATA);
	return bpf_ringbuf_query(&events_samples, BPF_RB_AVAIL_DATA);
}

/* bpf_ringbuf_output into ring `ring`. */
static __always_inline long ring_output(__u32 ring, void *data, __u64 size, __u64 flags)
{
	if (ring == STACKS_RING_IO)
		return bpf_ringbuf_output(&events_io, data, size, flags);
	if (ring == STACKS_RING_PROBES)
		return bpf_ringbuf_output(&events_probes, data, size, flags);
	return bpf_ringbuf_output(&events_samples, data, size, flags);
}

/* bpf_ringbuf_reserve of `size` bytes (a constant) in ring `ring`, or NULL when it is full. */
static __always_inline void *ring_reserve(__u32 ring, __u64 size)
{
	if (ring == STACKS_RING_IO)
		return bpf_ringbuf_reserve(&events_io, size, 0);
	if (ring == STACKS_RING_PROBES)
		return bpf_ringbuf_reserve(&events_probes, size, 0);
	return bpf_ringbuf_reserve(&events_samples, size, 0);
}

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
/* Puts `enum stacks_stack_len` in the BTF, so that user space reads the sentinels from it. */
const volatile enum stacks_stack_len stack_len_sentinel = STACKS_NOT_REQUESTED;
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
/* The wakeup program's, by the context it runs in (kinds/switch.bpf.h). */
#define SCRATCH_WAKE_TASK 2
#define SCRATCH_WAKE_SOFTIRQ 3
#define SCRATCH_WAKE_HARDIRQ 4
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 5);
	__type(key, __u32);
	__type(value, struct stacks_event_room);
} scratch SEC(".maps");
_Static_assert(sizeof(struct stacks_event_room) < 32768, "a per-CPU value is at most 32 KiB");

/* Whether `task` is in one of the --cgroup cgroups or below one: the cgroup at that one's
 * depth among its cgroup's ancestors is that one. */
static __always_inline bool in_target_cgroups(struct task_struct *task)
{
	struct cgroup *cg = BPF_CORE_READ(task, cgroups, dfl_cgrp);
	if (!cg)
		return false;
	int level = BPF_CORE_READ(cg, level);
	for (__u32 i = 0; i < STACKS_MAX_CGROUPS; i++) {
		if (i >= cgroup_count)
			break;
		__u32 at = target_cgroups[i].level;
		if (at > (__u32)level || at > 255)
			continue;
		struct cgroup *up = NULL;
		bpf_probe_read_kernel(&up, sizeof(up), &cg->ancestors[at]);
		if (up && BPF_CORE_READ(up, kn, id) == target_cgroups[i].id)
			return true;
	}
	return false;
}

/* Whether thread `tid` of process `tgid` (the task `task`) is traced. */
static __always_inline bool is_target(struct task_struct *task, __u32 tgid, __u32 tid)
{
	if (cgroup_count)
		return tid != 0 && in_target_cgroups(task);
	if (trace_all)
		return tid != 0 || include_idle;
	return bpf_map_lookup_elem(&targets, &tgid) != NULL;
}

static __always_inline bool current_is_target(void)
{
	__u64 id = bpf_get_current_pid_tgid();
	return is_target(bpf_get_current_task_btf(), id >> 32, (__u32)id);
}

static __always_inline void count_drops(__u32 cause, __u64 events)
{
	__u64 *n = bpf_map_lookup_elem(&drops, &cause);
	if (n)
		__sync_fetch_and_add(n, events);
}

static __always_inline void count_drop(__u32 cause)
{
	count_drops(cause, 1);
}

/* A record that did not fit in its ring: as many events lost as it stands for (a folded row
 * of short off-CPU intervals counts each, a row sampled 1 in N counts N). */
static __always_inline void count_unsent(struct stacks_event *e)
{
	count_drops(STACKS_DROP_RINGBUF + (e->hdr.kind & (STACKS_EV_ROOM - 1)),
		    e->hdr.count ? e->hdr.count : 1);
}

/* Set while a record is made with the user stack of a process whose memory map the recorder
 * has not read yet (maps_read): the next record sent wakes the reader at once, so that it reads
 * the map while the process lives (a short-lived process may be gone by its next poll). A hint
 * shared by every CPU: a wakeup too many or too few costs nothing. */
volatile __u32 wake_for_maps = 0;

/* When each ring last asked for a forced wakeup (boot ns; enum stacks_ring, masked with 3). A
 * forced wakeup queues an irq_work, a self-IPI: on a VM a write to the APIC's MSR and an exit
 * to the hypervisor, µs each. While the reader lags, every record past wakeup_bytes (or after
 * a new process's stack) would ask again, and one is all it takes: the reader drains what
 * waits once woken. Profiled under load (`-a -e state:uk`), that IPI was 30% of
 * sample_states' time. A hint shared by every CPU, as wake_for_maps. */
volatile __u64 woken_ns[4] = {};
/* At most one forced wakeup per ring in this time. */
#define STACKS_WAKE_GAP_NS 1000000ULL

static __always_inline __u64 wakeup_flags(__u32 ring)
{
	__u64 at = wakeup_bytes[ring & 3];
	if (!wake_for_maps) {
		if (!at)
			return 0;
		if (ring_waiting(ring) < at)
			return BPF_RB_NO_WAKEUP;
	}
	__u64 now = bpf_ktime_get_boot_ns();
	if (now - woken_ns[ring & 3] < STACKS_WAKE_GAP_NS)
		return BPF_RB_NO_WAKEUP;
	woken_ns[ring & 3] = now;
	wake_for_maps = 0;
	return BPF_RB_FORCE_WAKEUP;
}

/* The cgroup v2 id of `task` (its cgroup's kernfs node id, the directory's inode number). */
static __always_inline __u64 task_cgroup(struct task_struct *task)
{
	struct cgroup *cg = task->cgroups->dfl_cgrp;
	return cg ? cg->kn->id : 0;
}

/* Reset header `h` of a record for task `task` (a BTF pointer: a program's argument or
 * bpf_get_current_task_btf()) at time `ts`: ids and names, no stacks; the caller fills the
 * info member of its kind. */
static __always_inline void fill_hdr_on(struct stacks_header *h, enum stacks_event_kind kind,
					struct task_struct *task, __u64 ts, __u32 cpu)
{
	h->ts = ts;
	h->kind = kind;
	/* Plain loads through the task's BTF pointer (each helper call costs ~60-100 ns here):
	 * the kernel keeps comm NUL padded, so a copy of all of it is the string. */
	h->pid = task->tgid;
	h->tid = task->pid;
	h->cpu = cpu;
	h->kstack_len = STACKS_NOT_REQUESTED;
	h->ustack_len = STACKS_NOT_REQUESTED;
	h->count = 1;
	h->uwindow = 0;
	__builtin_memcpy(h->thread, task->comm, STACKS_COMM_LEN);
	__builtin_memcpy(h->comm, task->group_leader->comm, STACKS_COMM_LEN);
	h->cgroup = task_cgroup(task);
	h->span.span_id = 0;
	h->span.attrs_len = 0;
}

/* fill_hdr_on on the CPU the program runs on. */
static __always_inline void fill_hdr(struct stacks_header *h, enum stacks_event_kind kind,
				     struct task_struct *task, __u64 ts)
{
	fill_hdr_on(h, kind, task, ts, bpf_get_smp_processor_id());
}

/* fill_hdr for record `e`, timed now. */
static __always_inline void fill_header(struct stacks_event *e, enum stacks_event_kind kind, struct task_struct *task)
{
	fill_hdr(&e->hdr, kind, task, bpf_ktime_get_boot_ns());
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

/* Set by user space once it has put a process in span_procs (its entries are added by user
 * space, and at a fork only where the parent has one): until then no event looks there. A
 * lookup in a map an event has not touched for a while costs about 1 µs of cache and TLB
 * misses on this VM (CPU samples at 99 Hz: 5.9 -> 4.8 µs per run without it). */
volatile __u32 span_procs_any = 0;

/* The span the current task is in, into `out` (span_id 0 when none, or not known): read
 * through the thread pointer from the thread-context record the process published. The
 * process's first read of an initialized canary checks it; on a mismatch its spans are never
 * read. */
static __always_inline void read_span(struct stacks_span *out)
{
	out->span_id = 0;
	out->attrs_len = 0;
	if (!read_spans)
		return;
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	struct stacks_span_proc *sp = span_procs_any ? bpf_map_lookup_elem(&span_procs, &tgid) : NULL;
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
		/* Zero: the TLS block is not initialized yet. The dynamic loader points the thread
		 * pointer at it (TLS_INIT_TP) before it copies the initial images in, so an event in
		 * between (a CPU sample during relocation) reads zeros: check at a later event. A
		 * canary still zero after STACKS_SPAN_UNSET_MAX reads is a wrong offset. */
		if (!canary && ++sp->unset_reads <= STACKS_SPAN_UNSET_MAX)
			return;
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

#include "python.bpf.h"

/* Processes whose memory map user space has read (tgid -> 1): their user frames are sent as
 * plain addresses, which user space normalizes with that map, instead of being resolved to
 * build id + file offset here (the kernel's per-frame VMA lookup and build-id read cost
 * several µs a stack). User space adds a process before it reads its map; a new mapping in
 * it (on_new_mapping) or its exec takes it out, until user space has read the map again. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __u32);
	__type(value, __u8);
} maps_read SEC(".maps");

/* Processes whose user stack was resolved here, not being in maps_read (tgid -> 1): user space
 * reads their map at its next poll. A record with such a stack may never reach it (a switch
 * interval shorter than its MIN is folded, its stacks dropped), and every stack of the process
 * would be resolved here at several µs each (6-8 µs a switch in a pipe ping-pong). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, __u8);
} maps_wanted SEC(".maps");

/* Processes that had a `d` stack while the recorder had not read their memory map (tgid -> 1),
 * until it has (it takes them out then): their exit record carries the exit snapshot of their
 * mappings (struct stacks_exit, kinds/lifecycle.bpf.h), for the recorder to unwind their
 * stacks after /proc/PID/maps is gone. Exec takes a process out (a new image). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 65536);
	__type(key, __u32);
	__type(value, __u8);
	__uint(map_flags, BPF_F_NO_PREALLOC); /* few entries at a time: no 4 MB up front */
} exit_snapshot SEC(".maps");

/* How far above the stack pointer a frame pointer may point: a frame-pointer walk through
 * code built without them follows whatever the register held (heap structures, often chained
 * to 127 "frames"); a real chain stays on the thread's stack, above sp, rising. */
#define UWALK_STACK_LIMIT (64ULL << 20)
#define FRAMES_WORDS (STACKS_FRAMES_SIZE / 8)
#define PF_KTHREAD_BIT 0x00200000
#define PF_IO_WORKER_BIT 0x00000010 /* an io_uring io-wq or SQPOLL thread */
_Static_assert(STACKS_UFRAME_SIZE == 32, "a user frame is 4 words");

/* The top of the user stack is read in one copy into the end of the record's frames area, and
 * the frame-pointer chain followed inside it; frames past it are read one by one. A read per
 * frame is a helper call with its checks (~115 ns a frame in a CPU sample at 999 Hz, most of the
 * sample's stack time); one read of 2 KiB costs about as much as two. The frames written grow
 * towards the copy: once the next one would reach it, the rest is read frame by frame. */
#define UWIN_BYTES 2048
#define UWIN_WORD (FRAMES_WORDS - UWIN_BYTES / 8)

/* A walk of the current thread's user stack by frame pointers (capture_user_ips). */
struct uwalk {
	struct stacks_event *e;
	__u64 ip, fp, sp;
	__u64 win; /* bytes of the stack from sp copied at UWIN_WORD; 0: none, or overwritten */
	__u64 caller; /* the leaf's return address, when fp does not lead to it (leaf_caller) */
	__u32 k;   /* the kernel frames before the user ones */
	__u32 n;   /* user frames written */
};

/* One step of the walk (a bpf_loop callback): frame w->ip written, the next one read; 1 to
 * stop. */
static int uwalk_step(__u32 i, void *ctx)
{
	struct uwalk *w = ctx;
	struct stacks_event *e = w->e;
	__u32 at = w->k + i * 4;
	if (!e || at + 3 >= FRAMES_WORDS)
		return 1;
	if (at + 4 > UWIN_WORD)
		w->win = 0; /* this frame overwrites the copy */
	barrier_var(at); /* index with the register just checked */
	if (at > FRAMES_WORDS - 4)
		return 1;
	__u64 *f = &e->frames[at];
	f[0] = BPF_STACK_BUILD_ID_IP;
	f[1] = 0;
	f[2] = 0;
	f[3] = w->ip;
	w->n++;
	if (w->caller) {
		/* The leaf's caller, found on top of the stack; fp still leads to the next one. */
		w->ip = w->caller;
		w->caller = 0;
		return 0;
	}
	__u64 fp = w->fp, sp = w->sp;
	if (fp < sp || fp - sp > UWALK_STACK_LIMIT || (fp & 7))
		return 1;
	__u64 frame[2];
	__u64 off = fp - sp;
	if (off + 16 <= w->win) {
		off &= UWIN_BYTES - 1;
		barrier_var(off);
		if (off > UWIN_BYTES - 16)
			return 1;
		__u64 *c = &e->frames[UWIN_WORD + off / 8];
		frame[0] = c[0];
		frame[1] = c[1];
	} else if (bpf_probe_read_user(frame, sizeof(frame), (void *)fp)) {
		return 1;
	}
	w->ip = frame[1];
	/* A saved fp that does not rise ends the chain after this return address. */
	w->fp = frame[0] > fp ? frame[0] : 0;
	return w->ip ? 0 : 1;
}

/* The user word at sp + 8 * `i`, from the copy of the stack's top when it holds it; 0 when
 * unreadable. */
static __always_inline __u64 uwalk_word(struct uwalk *w, __u32 i)
{
	__u64 v = 0;
	if (i > 1)
		return 0;
	if (w->win >= 16)
		return w->e->frames[UWIN_WORD + i];
	if (bpf_probe_read_user(&v, sizeof(v), (void *)(w->sp + 8 * i)))
		return 0;
	return v;
}

/* The leaf's return address when the frame pointer does not lead to it, else 0. At a
 * function's first instruction (`push rbp`, or `endbr64` before it), between that push and
 * `mov rbp, rsp`, and at `ret`, rbp still holds the caller's frame: a walk from it gives the
 * caller's caller, and the caller is missing from the stack (in a loop calling small
 * functions, a few percent of the samples moved from the loop's function to its caller). The
 * return address is then the word on top of the stack, or the next one between push and mov
 * (the word on top being the rbp just pushed). x86-64 only; elsewhere the walk is as it was. */
static __always_inline __u64 leaf_caller(struct uwalk *w)
{
#if defined(__TARGET_ARCH_x86)
	__u8 c[8];
	if (bpf_probe_read_user(c, sizeof(c), (void *)w->ip))
		return 0;
	__u32 at = 0;
	if (c[0] == 0x55 || c[0] == 0xc3 || c[0] == 0xc2 ||
	    (c[0] == 0xf3 && c[1] == 0xc3) || /* rep ret */
	    (c[0] == 0xf3 && c[1] == 0x0f && c[2] == 0x1e && c[3] == 0xfa && c[4] == 0x55))
		at = 0;
	else if (c[0] == 0x48 && ((c[1] == 0x89 && c[2] == 0xe5) || (c[1] == 0x8b && c[2] == 0xec)))
		at = 1;
	else
		return 0;
	/* Between push and mov the word on top is the rbp just pushed: check it is. */
	if (at == 1 && uwalk_word(w, 0) != w->fp)
		return 0;
	__u64 ra = uwalk_word(w, at);
	/* A return address is code, not a stack address nor a small value. */
	if (ra < 4096 || (ra > w->sp - UWALK_STACK_LIMIT && ra < w->sp + UWALK_STACK_LIMIT))
		return 0;
	return ra;
#else
	return 0;
#endif
}

/* The current thread's user stack by frame pointers from its saved user registers, as plain
 * addresses laid out as build-id frames of status BPF_STACK_BUILD_ID_IP after the kernel's `k`
 * frames. The walk stops at a frame pointer that is not on the stack above sp, or does not
 * rise (where the kernel's walk would go on through garbage to 127 frames). Returns the
 * frames, or -errno.
 * A global function, its steps a bpf_loop callback: the verifier checks them once, on their
 * own, instead of once per way into them in every program (each of the kernel stack's
 * outcomes, each of a file path walk's: `-e vfs:uk` went past its million instructions). */
__noinline long capture_user_ips(struct stacks_event *e, __u32 k)
{
	if (!e)
		return -EFAULT;
	struct task_struct *task = bpf_get_current_task_btf();
	if (task->flags & PF_KTHREAD_BIT)
		return -EFAULT;
	struct pt_regs *r = (struct pt_regs *)bpf_task_pt_regs(task);
	if (!r || (r->cs & 3) != 3)
		return -EFAULT;
	struct uwalk w = {
		.e = e,
		.ip = r->ip,
		.fp = r->bp,
		.sp = r->sp,
		.k = k > STACKS_MAX_DEPTH ? STACKS_MAX_DEPTH : k,
	};
	/* Frames are found in the copy at their offset from sp in words: sp must be a word's. */
	if (!(w.sp & 7) &&
	    !bpf_probe_read_user(&e->frames[UWIN_WORD], UWIN_BYTES, (void *)w.sp))
		w.win = UWIN_BYTES;
	w.caller = leaf_caller(&w);
	bpf_loop(STACKS_MAX_DEPTH, uwalk_step, &w, 0);
	return w.n;
}

#include "kstack.bpf.h"

/* Capture the current task's wanted stacks into the record: kernel addresses first, then the
 * user frames (build id + file offset) right after them, then, in a CPython process, the
 * thread's Python frames (python.bpf.h); lengths are frames or -errno. */
/* The current task's user stack (by frame pointers, then its Python frames) into the record
 * after its `k` kernel frames. */
static __always_inline void capture_user(void *ctx, struct stacks_event *e, __u32 k)
{
	if (k > STACKS_MAX_DEPTH)
		k = STACKS_MAX_DEPTH;
	barrier_var(k); /* the mask below stays, for the verifier */
	k &= 127;
	__u32 tgid = e->hdr.pid;
	long n;
	if (bpf_map_lookup_elem(&maps_read, &tgid)) {
		n = capture_user_ips(e, k);
	} else {
		__u8 one = 1;
		wake_for_maps = 1;
		bpf_map_update_elem(&maps_wanted, &tgid, &one, BPF_ANY);
		n = bpf_get_stack(ctx, &e->frames[k], USTACK_BYTES,
				  BPF_F_USER_STACK | BPF_F_USER_BUILD_ID);
		if (n > 0)
			n = (long)((__u64)n / STACKS_UFRAME_SIZE);
	}
	if (n < 0) {
		e->hdr.ustack_len = (__s32)n;
	} else {
		__u32 u = (__u32)n;
		if (u > STACKS_MAX_DEPTH)
			u = STACKS_MAX_DEPTH;
		e->hdr.ustack_len = (__s32)u;
		capture_python(e);
	}
}

static __always_inline void capture_stacks(void *ctx, struct stacks_event *e, __u32 want)
{
	__u32 k = 0;

	if (want & STACKS_WANT_KERNEL) {
		long n = capture_kernel_ips(ctx, e, e->hdr.kind);
		if (n < 0) {
			e->hdr.kstack_len = (__s32)n;
		} else {
			k = (__u32)n / 8;
			if (k > STACKS_MAX_DEPTH)
				k = STACKS_MAX_DEPTH;
			e->hdr.kstack_len = (__s32)k;
		}
	}
	if (want & STACKS_WANT_USER)
		capture_user(ctx, e, k);
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
	if (ring_output(ring_of(e->hdr.kind), e, size, wake_flags)) {
		count_unsent(e);
		return false;
	}
	return true;
}

/* Hand a record to user space; the reader wakes once enough data waits. False when the ring
 * buffer was full. */
static __always_inline bool submit(struct stacks_event *e)
{
	return submit_with(e, wakeup_flags(ring_of(e->hdr.kind)));
}

#include "dwarf.bpf.h"
#include "syscalls.bpf.h"
#include "aggregate.bpf.h"
