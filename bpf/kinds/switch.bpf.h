/* kinds/switch.bpf.h — the `switch` event: off-CPU intervals: per-thread state in task storage,
 * an interval from switch-out to switch-in measured with the scheduler's own accounting, short
 * ones folded per thread, state and span. The kernel stack is taken at the switch-out (from the
 * cache of unwinds); the user stack of a thread that returns to user mode through rseq only if
 * its interval is kept (MIN or longer), at that return, in the thread (its user registers and
 * stack stay as they are until then). Included by stacks.bpf.c after common.bpf.h. */
#pragma once
#include "offtask.bpf.h"

/* Tunables, set by user space before load. */
const volatile __u32 switch_stacks = 0; /* STACKS_WANT_* */
/* The kernel has the rseq_update tracepoint and on_user_return is attached to it: the user
 * stack of a kept interval can wait for the thread's return to user mode. */
const volatile bool switch_user_return = false;
/* switch_min_ns (MIN): control.bpf.h, changed while recording. */

/* ---- Off-CPU intervals -------------------------------------------------------------- */

/* Per-thread scheduler state: the pending switch-out record and the folded short intervals. */
struct switch_state {
	__u64 out_ts;                         /* 0: not switched out by us */
	__u64 fold_start;                     /* switch-out time of the first folded interval */
	__u64 fold_ns[STACKS_STATE_COUNT];
	__u32 fold_n[STACKS_STATE_COUNT];
	__u32 waker;
	/* The open interval's switch-out was not among the 1 in N taken (switch_one_in): no
	 * stacks, no header; kept, it makes no row (folded, it counts as any other). */
	__u32 untaken;
	__u64 out_runtime;                    /* the thread's CPU time at switch-out (ns) */
	__u64 out_switches;                   /* its context switches at switch-out */
	__u64 in_ts;                          /* anchor: the last switch-in seen (0: none yet) */
	__u64 in_runtime;                     /* the thread's CPU time and switches then */
	__u64 in_switches;
	/* CPU time charged beyond the wall time of the intervals measured so far (see off_since),
	 * taken off the next ones so the thread's total stays exact. */
	__u64 debt;
	struct stacks_span fold_span;         /* the span of the folded intervals */
	/* The thread left the CPU in a system call, so its user stack is taken later, in its own
	 * context, if the interval is kept: `ev` has no user stack yet. */
	__u32 user_later;
	/* `ev` is a closed interval waiting for that user stack: sent at the thread's return from
	 * the system call (or its next switch-out or exit, still in the call). */
	__u32 user_pending;
	/* `wake`: the waker of the open interval when the wakeup came sooner than MIN after the
	 * switch-out (no stacks taken then): its record, header and info only, sent if the
	 * interval is kept after all (a wait for a CPU made it long). */
	__u32 wake_noted;
	/* Where ctx was in the thread's stack at the switch-out (kstack_ctx_at; 0: not known). */
	__u32 kernel_at;
	/* The kernel stack is left for the switch-in (kstack.bpf.h): `ev` has none yet. */
	__u32 kernel_later;
	__u32 pad2;
	/* The user stack pointer when `ev`'s user stack was left for later: the thread has not
	 * returned to user mode while it still reads so. */
	__u64 later_sp;
	__u8 wake_note[STACKS_EVENT_HEADER_SIZE];
	struct stacks_event ev;
};

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct switch_state);
} switch_store SEC(".maps");

/* Per CPU: the tid of the thread it switched in last when that thread's kept interval waits for
 * its user stack (0: none). Such a thread returns to user mode on this CPU, or leaves it again
 * first (on_switch then takes the stack): the program at the return to user mode looks no
 * further than this for every other thread, where a task-storage lookup at every return
 * cost ~200 ns. A switch the tracepoint did not report leaves it naming a thread no longer
 * here: that thread's stack is then not taken at its return (its next switch-out finds its
 * user stack pointer moved, and sends the row without it). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} switch_pending_here SEC(".maps");

static __always_inline void user_pending_is(struct switch_state *s, __u32 on)
{
	s->user_pending = on;
}

/* Emit the folded short off-CPU intervals of a thread and reset them. */
static __always_inline void flush_folded(struct switch_state *s, struct task_struct *task)
{
	struct stacks_event *e = scratch_for(SCRATCH_TASK);
	if (!e)
		return;
	for (int i = 0; i < STACKS_STATE_COUNT; i++) {
		if (!s->fold_n[i])
			continue;
		fill_hdr(&e->hdr, STACKS_EV_SWITCH_FOLDED, task, s->fold_start);
		e->hdr.span = s->fold_span;
		e->hdr.count = s->fold_n[i];
		e->info.folded.off_ns = s->fold_ns[i];
		e->info.folded.state = i;
		e->info.folded.pad = 0;
		submit(e);
		s->fold_ns[i] = 0;
		s->fold_n[i] = 0;
	}
	s->fold_start = 0;
}

/* Send the closed interval that waits for its user stack, taken now when `in_context` (the
 * program runs in the thread itself, which has not returned to user mode since it left the
 * CPU): by CFI (`d`) or frame pointers; otherwise without it (its user stack error says so). */
static __always_inline void send_pending(void *ctx, struct switch_state *s, bool in_context)
{
	if (!s->user_pending)
		return;
	user_pending_is(s, 0);
	/* A user stack pointer moved since the switch-out: the thread ran in user mode since
	 * (a return the tracepoint did not report), so this stack is not that interval's. */
	if (in_context) {
		struct pt_regs *r = (struct pt_regs *)bpf_task_pt_regs(bpf_get_current_task_btf());
		in_context = r && r->sp == s->later_sp;
	}
	struct stacks_event *e = in_context ? scratch_for(SCRATCH_TASK) : NULL;
	if (!e || bpf_probe_read_kernel(e, sizeof(*e), &s->ev)) {
		submit(&s->ev);
		return;
	}
	__u32 k = e->hdr.kstack_len > 0 ? (__u32)e->hdr.kstack_len : 0;
	if (switch_stacks & STACKS_WANT_DWARF) {
		capture_dwarf(ctx, e, k);
		submit_room(e);
	} else {
		capture_user(ctx, e, k);
		submit(e);
	}
}

/* A thread exits (in its own context): emit what it still holds. */
static __always_inline void off_cpu_exit(void *ctx, struct task_struct *p)
{
	struct switch_state *s = bpf_task_storage_get(&switch_store, p, 0, 0);
	if (!s)
		return;
	send_pending(ctx, s, true);
	if (s->fold_start)
		flush_folded(s, p);
}

static __always_inline enum stacks_state switch_state_of(bool preempt, unsigned int prev_state)
{
	if (preempt || prev_state == 0)
		return STACKS_STATE_RUNNABLE;
	if ((prev_state & (TASK_UNINTERRUPTIBLE | TASK_NOLOAD)) == (TASK_UNINTERRUPTIBLE | TASK_NOLOAD))
		return STACKS_STATE_IDLE;
	if (prev_state & TASK_UNINTERRUPTIBLE)
		return STACKS_STATE_UNINTERRUPTIBLE;
	if (prev_state & TASK_INTERRUPTIBLE)
		return STACKS_STATE_SLEEPING;
	if (prev_state & (TASK_STOPPED_BITS | TASK_TRACED_BITS))
		return STACKS_STATE_STOPPED;
	return STACKS_STATE_OTHER;
}

/* A thread's context switches so far (voluntary + involuntary, as the kernel counts them). */
static __always_inline __u64 switches_of(struct task_struct *t)
{
	return t->nvcsw + t->nivcsw;
}

/* The folded intervals are of span `span` (NULL: none) from here: those of another span so far
 * are emitted first, so each folded row is of one span and per-span totals stay exact. */
static __always_inline void fold_span_is(struct switch_state *s, struct task_struct *task,
					 struct stacks_span *span)
{
	__u64 id = span ? span->span_id : 0;
	if (s->fold_start && s->fold_span.span_id != id)
		flush_folded(s, task);
	if (s->fold_start)
		return;
	if (span) {
		s->fold_span = *span;
	} else {
		s->fold_span.span_id = 0;
		s->fold_span.attrs_len = 0;
	}
}

/* Where an open interval is closed (close_interval): what can be taken of its user stack there. */
enum switch_close {
	/* At its switch-in, in on_switch for the thread coming back: later, in the thread. */
	CLOSE_SWITCH_IN,
	/* At its next switch-out, its switch-in unseen: it may have run in user mode since:
	 * none. */
	CLOSE_UNSEEN,
	/* At the end of the recording, in the sleepable task iterator (flush_tasks): the thread
	 * is off CPU, or in the system call it left the CPU in; read from its memory. */
	CLOSE_END,
};

/* A kept interval: sent, or its user stack left to take (switch_out_stacks) taken as `where`
 * allows — at the end from the task's memory, else later in the thread (user_pending). */
static __always_inline void take_later_stacks(struct switch_state *s, struct task_struct *task,
					      enum switch_close where)
{
	if (!s->user_later) {
		submit(&s->ev);
		return;
	}
	s->user_later = 0;
	if (where == CLOSE_END) {
		/* Not switched since it left the CPU, nor on one now: its user registers are as
		 * they were then, in a system call or not. */
		end_user_stack(&s->ev, task,
			       !task->on_cpu && switches_of(task) == s->out_switches);
		submit(&s->ev);
		return;
	}
	user_pending_is(s, 1);
}

/* A kept interval's kernel stack left for its switch-in (kstack.bpf.h), taken now if the thread
 * has not run since its switch-out: at its switch-in, or off CPU at the end of the recording;
 * otherwise none (-EAGAIN). With every use re-checked, the stack unwound at the switch-out is
 * compared with the entry the switch-in would have served instead. */
static __always_inline void kernel_stack_at_close(struct switch_state *s, struct task_struct *task,
						  enum switch_close where)
{
	__u32 at = s->kernel_at;
	bool later = s->kernel_later;
	s->kernel_later = 0;
	if (!at || (!later && kstack_recheck != 1))
		return;
	bool unmoved = where != CLOSE_UNSEEN && switches_of(task) == s->out_switches &&
		       (where == CLOSE_SWITCH_IN || !task->on_cpu);
	if (!later) {
		if (unmoved && s->ev.hdr.kstack_len > 0)
			kstack_check_at_switch_in(&s->ev, task, at, (__u32)s->ev.hdr.kstack_len);
		return;
	}
	long bytes = unmoved ? kstack_at_switch_in(&s->ev, task, at) : -EAGAIN;
	if (bytes < 0) {
		s->ev.hdr.kstack_len = (__s32)bytes;
	} else {
		__u32 k = (__u32)bytes / 8;
		s->ev.hdr.kstack_len = (__s32)(k > STACKS_MAX_DEPTH ? STACKS_MAX_DEPTH : k);
	}
}

/* Close the open interval of `task` (state `s`) after `off` ns off CPU, ending at `end`:
 * emitted with its switch-out stacks (those left to take taken as `where` allows), or folded
 * when shorter than the minimum. */
static __always_inline void close_interval(struct switch_state *s, struct task_struct *task,
					   __u64 off, __u64 end, enum switch_close where)
{
	__u32 st = s->ev.info.off_cpu.state;
	if (st >= STACKS_STATE_COUNT)
		st = STACKS_STATE_OTHER;
	if (off >= switch_min_ns && s->untaken) {
		/* Kept, but not among the 1 in N taken: the rows of those taken stand for it. */
		s->user_later = 0;
	} else if (off >= switch_min_ns) {
		if (s->wake_noted) {
			__u32 ring = ring_of(STACKS_EV_WAKE);
			if (ring_output(ring, s->wake_note, STACKS_EVENT_HEADER_SIZE, wakeup_flags(ring)))
				count_drop(STACKS_DROP_RINGBUF + STACKS_EV_WAKE);
		}
		s->ev.info.off_cpu.off_ns = off;
		s->ev.info.off_cpu.waker = s->waker;
		kernel_stack_at_close(s, task, where);
		take_later_stacks(s, task, where);
	} else {
		s->user_later = 0;
		fold_span_is(s, task, s->ev.hdr.span.span_id ? &s->ev.hdr.span : NULL);
		if (!s->fold_start)
			s->fold_start = s->out_ts;
		s->fold_ns[st] += off;
		s->fold_n[st] += 1;
		if (end - s->fold_start >= NS_PER_SEC)
			flush_folded(s, task);
	}
	s->out_ts = 0;
	s->waker = 0;
	s->wake_noted = 0;
}

/* Off-CPU time of switches the tracepoint did not report: added to the thread's folded row of
 * state other (no stack), so per-thread totals stay exact. */
static __always_inline void fold_untraced(struct switch_state *s, struct task_struct *task,
					  __u64 since, __u64 off, __u64 now)
{
	fold_span_is(s, task, NULL); /* the span it was in at those switches is not known */
	if (!s->fold_start)
		s->fold_start = since;
	s->fold_ns[STACKS_STATE_OTHER] += off;
	s->fold_n[STACKS_STATE_OTHER] += 1;
	count_drop(STACKS_DROP_END_INFERRED);
	if (now - s->fold_start >= NS_PER_SEC)
		flush_folded(s, task);
}

/* Whether `t` returns to user mode through rseq: registered with the kernel (glibc 2.35 and
 * later register every thread), so every switch-out sets its notify-resume work and its next
 * return to user mode runs the rseq_update tracepoint, in the thread. A kernel whose
 * task_struct has no `rseq` pointer (its rseq code laid out anew): never. */
static __always_inline bool returns_through_rseq(struct task_struct *t)
{
	if (!switch_user_return || !bpf_core_field_exists(t->rseq))
		return false;
	return BPF_CORE_READ(t, rseq) != NULL;
}

/* The stacks of a switch-out. The kernel stack now (from the cache of unwinds: the kernel's
 * unwind of a thread off CPU would leave out everything in .sched.text, `mutex_lock` and
 * `io_schedule` with the scheduler). A thread's user registers and user stack stay as they
 * are until it returns to user mode, whether it left the CPU in a system call, a page fault or
 * preempted: the user stack of a thread that returns through rseq is taken only if the
 * interval is kept (most are short and folded), at that return (take_later_stacks,
 * on_user_return); it reads -EAGAIN until then, and stays so if never taken. A `d` stack of a
 * thread without rseq that left the CPU in a system call waits likewise for the call's return
 * (on_sys_exit, loaded only with `d`). The others are taken now, as is every user stack with
 * MIN 0 (all intervals are kept) but `d`'s copy, which goes by frame pointers then, and when
 * the ring is crowded. */
static __always_inline void switch_out_stacks(void *ctx, struct switch_state *s,
					      struct task_struct *prev)
{
	s->user_later = 0;
	s->kernel_at = 0;
	s->kernel_later = 0;
	if (!switch_stacks)
		return;
	bool user = switch_stacks & (STACKS_WANT_USER | STACKS_WANT_DWARF);
	bool dwarf = switch_stacks & STACKS_WANT_DWARF;
	bool kernel = switch_stacks & STACKS_WANT_KERNEL;
	bool later = user && !(prev->flags & PF_KTHREAD) && prev->mm && (switch_min_ns || dwarf) &&
		     !(dwarf && ringbuf_crowded(STACKS_EV_SWITCH));
	struct pt_regs *r = later ? (struct pt_regs *)bpf_task_pt_regs(prev) : NULL;
	if (!r)
		later = false;
	else if (!returns_through_rseq(prev))
		later = dwarf && regs_in_syscall(r);
	/* The kernel stack waits for the switch-in when the user stack does or is not wanted (a
	 * user stack taken now goes after the kernel's frames), and only a kept interval takes it. */
	bool fresh = false;
	if (kernel && (later || !user) && (switch_min_ns || kstack_recheck == 1) &&
	    kstack_late_on()) {
		s->kernel_at = kstack_ctx_at(ctx, prev);
		s->kernel_later = s->kernel_at && switch_min_ns &&
				  kstack_leave_for_switch_in(prev, s->kernel_at, &fresh);
	}
	__u32 want = switch_stacks & (STACKS_WANT_KERNEL | STACKS_WANT_USER);
	if (s->kernel_later)
		want &= ~STACKS_WANT_KERNEL;
	if (later)
		want &= ~STACKS_WANT_USER;
	if (fresh && (want & STACKS_WANT_KERNEL)) {
		/* A re-check: unwound whatever the cache holds, and compared with it. */
		long n = kstack_capture(ctx, &s->ev, STACKS_EV_SWITCH, true);
		__u32 k = 0;
		if (n < 0) {
			s->ev.hdr.kstack_len = (__s32)n;
		} else {
			k = (__u32)n / 8;
			if (k > STACKS_MAX_DEPTH)
				k = STACKS_MAX_DEPTH;
			s->ev.hdr.kstack_len = (__s32)k;
		}
		if (want & STACKS_WANT_USER)
			capture_user(ctx, &s->ev, k);
	} else {
		capture_stacks(ctx, &s->ev, want);
	}
	if (s->kernel_later)
		s->ev.hdr.kstack_len = -EAGAIN;
	if (!later)
		return;
	s->ev.hdr.ustack_len = -EAGAIN;
	s->user_later = 1;
	s->later_sp = r->sp;
}

/* In the thread itself, before its return to user mode: a kept interval of it waiting for its
 * user stack takes it now. A per-CPU load and a compare for every other thread. */
static __always_inline void take_pending_here(void *ctx)
{
	__u32 zero = 0;
	__u32 *here = bpf_map_lookup_elem(&switch_pending_here, &zero);
	if (!here || !*here)
		return;
	struct task_struct *cur = bpf_get_current_task_btf();
	if (*here != (__u32)cur->pid)
		return;
	*here = 0;
	struct switch_state *s = bpf_task_storage_get(&switch_store, cur, 0, 0);
	if (s && s->user_pending)
		send_pending(ctx, s, true);
}

/* The return to user mode of a thread that left the CPU (rseq_update: from the notify-resume
 * work every switch-out sets for a thread with rseq, or from a signal's delivery, before its
 * frame is built). Runs about once a switch-in of a user thread, at no system call (a program
 * at sys_exit makes every call of the host take the kernel's slower path): loaded only when
 * `switch` takes user stacks. */
SEC("tp_btf/rseq_update")
int BPF_PROG(on_user_return, struct task_struct *t)
{
	take_pending_here(ctx);
	return 0;
}

/* Every system call's return: the same for a `d` stack of a thread without rseq, blocked in
 * the call. Loaded only with `d` (its copy cannot be taken at every switch-out): every
 * system call of every process passes here, and the kernel's slower path with it. */
SEC("tp_btf/sys_exit")
int BPF_PROG(on_sys_exit, struct pt_regs *regs, long ret)
{
	take_pending_here(ctx);
	return 0;
}

/* Off CPU since the anchor: the time since then that the thread did not run. The scheduler
 * charges the incoming thread from its run-queue clock update, a few microseconds before this
 * program reads the time at the switch (its own run and stack capture among them), so a thread
 * switched out and straight back in can have run longer than the wall time says: that excess
 * is a debt, paid by the next intervals, so the sum over a thread's intervals stays its wall
 * time less its CPU time (clamping each at zero instead would add every excess to it). A debt
 * up to DEBT_WHOLE_NS is paid at once; a larger one (the hypervisor stalled the CPU between
 * that clock update and this program: milliseconds charged as CPU time that the interval
 * before already counted) by at most DEBT_WHOLE_NS or a sixteenth of each interval, whichever
 * is more, so no interval is cut by more than that for another's sake: in CI a 20 ms sleep
 * right after a 4.8 ms stall read 15.3 ms when paid at once. */
#define DEBT_WHOLE_NS 100000ULL
static __always_inline __u64 off_since(struct switch_state *s, __u64 since, __u64 since_runtime,
				       __u64 now, __u64 runtime)
{
	__u64 ran = runtime - since_runtime;
	__u64 wall = now - since;
	if (wall < ran) {
		s->debt += ran - wall;
		return 0;
	}
	__u64 off = wall - ran;
	__u64 most = off >> 4;
	if (most < DEBT_WHOLE_NS)
		most = DEBT_WHOLE_NS;
	__u64 pay = s->debt < most ? s->debt : most;
	if (pay > off)
		pay = off;
	s->debt -= pay;
	return off - pay;
}

/* The length of an off-CPU interval is taken from the scheduler's own accounting: the wall
 * time since the thread's previous switch-in less the CPU time it was charged since then
 * (se.sum_exec_runtime, final at every switch). Summed over a thread's intervals this is
 * exactly its wall time less its CPU time, wherever in the switch the scheduler starts and
 * stops charging it (this program's own run time at a switch is charged to the incoming
 * thread), and it stays exact across switches the tracepoint did not report: on 6.18 under
 * CPU contention a switch now and then runs no program attached to sched_switch (none of two
 * independent programs ran, the kernel counted no recursion miss, yet the threads switched:
 * their context-switch counts and CPU time moved). */
SEC("tp_btf/sched_switch")
int BPF_PROG(on_switch, bool preempt, struct task_struct *prev, struct task_struct *next,
	     unsigned int prev_state)
{
	__u64 now = bpf_ktime_get_boot_ns();

	/* The thread coming back on CPU: close its interval. */
	struct switch_state *s = bpf_task_storage_get(&switch_store, next, 0, 0);
	if (s) {
		__u64 runtime = next->se.sum_exec_runtime;
		__u64 switches = switches_of(next);
		if (s->in_ts) {
			__u64 off = off_since(s, s->in_ts, s->in_runtime, now, runtime);
			if (s->out_ts) {
				if (switches != s->out_switches)
					count_drop(STACKS_DROP_END_INFERRED);
				close_interval(s, next, off, now, CLOSE_SWITCH_IN);
			} else if (switches != s->in_switches) {
				/* It left the CPU since, unseen. */
				fold_untraced(s, next, s->in_ts, off, now);
			}
		} else if (s->out_ts) {
			close_interval(s, next, off_since(s, s->out_ts, s->out_runtime, now, runtime), now,
				       CLOSE_SWITCH_IN);
		}
		s->in_ts = now;
		s->in_runtime = runtime;
		s->in_switches = switches;
	}
	__u32 zero = 0;
	__u32 *here = bpf_map_lookup_elem(&switch_pending_here, &zero);
	if (here)
		*here = s && s->user_pending ? (__u32)next->pid : 0;

	/* The thread leaving: remember when, why, and its stacks. */
	__u32 tgid = prev->tgid;
	__u32 tid = prev->pid;
	if (!is_target(prev, tgid, tid))
		return 0;
	s = bpf_task_storage_get(&switch_store, prev, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!s) {
		count_drop(STACKS_DROP_SWITCH_STORAGE);
		return 0;
	}
	__u64 runtime = prev->se.sum_exec_runtime;
	__u64 switches = switches_of(prev);
	if (s->out_ts || (s->in_ts && switches - s->in_switches > 1)) {
		/* Switches since the anchor besides this one were not seen: what it did not run
		 * since then was off CPU. An open interval (its switch-in unseen) is closed with
		 * it; otherwise it is folded. From here on, this switch-out is the anchor. */
		__u64 since = s->in_ts ? s->in_ts : s->out_ts;
		__u64 since_runtime = s->in_ts ? s->in_runtime : s->out_runtime;
		__u64 off = off_since(s, since, since_runtime, now, runtime);
		if (s->out_ts) {
			close_interval(s, prev, off, s->out_ts + off, CLOSE_UNSEEN);
			/* It may have left that system call since: no user stack taken now. */
			send_pending(ctx, s, false);
			count_drop(STACKS_DROP_END_INFERRED);
		} else {
			fold_untraced(s, prev, since, off, now);
		}
		s->in_ts = now;
		s->in_runtime = runtime;
		s->in_switches = switches;
	}
	/* Leaving the CPU again before its return to user mode, with an interval pending: its user
	 * stack is as it was; take it now. */
	send_pending(ctx, s, true);
	/* 1 switch-out in N is taken (N read once: it may change meanwhile); the others keep
	 * only what folding needs, their state and span. */
	__u32 one_in = (__u32)switch_one_in;
	s->untaken = one_in > 1 && bpf_get_prandom_u32() % one_in;
	s->ev.info.off_cpu.state = switch_state_of(preempt, prev_state);
	if (s->untaken) {
		s->user_later = 0;
		s->kernel_at = 0;
		s->kernel_later = 0;
		read_span(&s->ev.hdr.span);
	} else {
		/* The thread leaving runs here: its CPU is this one (a plain load, not a helper
		 * call). */
		fill_hdr_on(&s->ev.hdr, STACKS_EV_SWITCH, prev, now, prev->thread_info.cpu);
		s->ev.hdr.count = one_in > 1 ? one_in : 1;
		read_span(&s->ev.hdr.span);
		switch_out_stacks(ctx, s, prev);
	}
	s->out_ts = now;
	s->out_runtime = runtime;
	s->out_switches = switches;
	s->waker = 0;
	s->wake_noted = 0;
	return 0;
}

/* ---- Wakers --------------------------------------------------------------------------- */

/* `wake`: whether wakeup records are made, and the stacks they take (STACKS_WANT_*; user
 * stacks only when the waker is a task, not an interrupt). */
const volatile __u32 wake_on = 0;
const volatile __u32 wake_stacks = 0;
/* `wake:STACKS:N`: a wakeup makes a record 1 time in N, at random; its record's count says N
 * (the wakeups it stands for); 0 is 1. In the .bss (zero at load: written once loaded, and
 * while recording by --control). */
volatile __u64 wake_one_in = 0;

/* Timer callbacks (hrtimer and timer-wheel expiry), device interrupt handlers and softirqs
 * running on each CPU: the context of a wakeup. The CPU's preempt count would say
 * it directly, but the kernel resolves a BPF reference to that per-CPU variable through
 * kallsyms, which lists no per-CPU variables unless built with KALLSYMS_ALL; and a program's
 * own stack address cannot tell an interrupt stack from a task's (6.18 runs tracing programs
 * on a private per-CPU stack). Interrupts these tracepoints do not cover (IPIs, irq_work) are
 * taken for the task they interrupted. */
struct wake_nesting {
	__u8 hrtimer;
	__u8 wheel;
	__u8 hardirq;
	__u8 softirq;
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct wake_nesting);
} wake_nesting SEC(".maps");

#define NEST_HRTIMER 0
#define NEST_WHEEL 1
#define NEST_HARDIRQ 2
#define NEST_SOFTIRQ 3

/* Flags, not counts: none of these nests in itself on one CPU, and an exit the recording did
 * not see (an entry before the exit program was attached, a skipped run) leaves a flag set
 * only until that context's next exit, where a count would stay wrong for good. */
static __always_inline void nest(int what, __u8 on)
{
	__u32 zero = 0;
	struct wake_nesting *n = bpf_map_lookup_elem(&wake_nesting, &zero);
	if (!n)
		return;
	if (what == NEST_HRTIMER)
		n->hrtimer = on;
	else if (what == NEST_WHEEL)
		n->wheel = on;
	else if (what == NEST_HARDIRQ)
		n->hardirq = on;
	else
		n->softirq = on;
}

SEC("tp_btf/hrtimer_expire_entry")
int BPF_PROG(wake_hrtimer_entry) { nest(NEST_HRTIMER, 1); return 0; }
SEC("tp_btf/hrtimer_expire_exit")
int BPF_PROG(wake_hrtimer_exit) { nest(NEST_HRTIMER, 0); return 0; }
SEC("tp_btf/timer_expire_entry")
int BPF_PROG(wake_timer_entry) { nest(NEST_WHEEL, 1); return 0; }
SEC("tp_btf/timer_expire_exit")
int BPF_PROG(wake_timer_exit) { nest(NEST_WHEEL, 0); return 0; }
SEC("tp_btf/irq_handler_entry")
int BPF_PROG(wake_irq_entry) { nest(NEST_HARDIRQ, 1); return 0; }
SEC("tp_btf/irq_handler_exit")
int BPF_PROG(wake_irq_exit) { nest(NEST_HARDIRQ, 0); return 0; }
SEC("tp_btf/softirq_entry")
int BPF_PROG(wake_softirq_entry) { nest(NEST_SOFTIRQ, 1); return 0; }
SEC("tp_btf/softirq_exit")
int BPF_PROG(wake_softirq_exit) { nest(NEST_SOFTIRQ, 0); return 0; }

/* What the program runs in: a task, or an interrupt, softirq or timer callback (whose
 * `current` is only the task it happened to interrupt). */
static __always_inline enum stacks_wake_context wake_context(void)
{
	__u32 zero = 0;
	struct wake_nesting *n = bpf_map_lookup_elem(&wake_nesting, &zero);
	if (!n)
		return STACKS_WAKE_TASK;
	if (n->hrtimer || n->wheel)
		return STACKS_WAKE_TIMER;
	if (n->hardirq)
		return STACKS_WAKE_HARDIRQ;
	if (n->softirq)
		return STACKS_WAKE_SOFTIRQ;
	return STACKS_WAKE_TASK;
}

/* Per-CPU record slots of the wake program, one per context it can run in: an interrupt may
 * come while the task-context one is building its record. */
static __always_inline __u32 wake_slot(enum stacks_wake_context c)
{
	return c == STACKS_WAKE_TASK ? SCRATCH_WAKE_TASK
	     : c == STACKS_WAKE_HARDIRQ ? SCRATCH_WAKE_HARDIRQ : SCRATCH_WAKE_SOFTIRQ;
}

/* A waker that is not a task goes by its context's name, never by the task it interrupted. */
static __always_inline void name_context(struct stacks_event *e, enum stacks_wake_context c)
{
	const char *name = c == STACKS_WAKE_TIMER ? "[timer]"
			 : c == STACKS_WAKE_HARDIRQ ? "[irq]" : "[softirq]";
	__builtin_memset(e->hdr.comm, 0, STACKS_COMM_LEN);
	__builtin_memset(e->hdr.thread, 0, STACKS_COMM_LEN);
	for (int i = 0; i < 9; i++) {
		if (!name[i])
			break;
		e->hdr.comm[i] = name[i];
		e->hdr.thread[i] = name[i];
	}
	e->hdr.pid = 0;
	e->hdr.tid = 0;
	e->hdr.cgroup = 0;
}

/* The waker's part of a wake record: header (the waker, or its context's name) and info. */
static __always_inline void fill_wake(struct stacks_event *e, struct task_struct *cur,
				      struct task_struct *p, enum stacks_wake_context c,
				      __u64 now, __u64 waited, __u32 one_in)
{
	fill_hdr(&e->hdr, STACKS_EV_WAKE, cur, now);
	e->hdr.count = one_in;
	e->info.wake.waited_ns = waited;
	e->info.wake.wakee_tid = p->pid;
	e->info.wake.wakee_pid = p->tgid;
	e->info.wake.context = c;
	e->info.wake.pad = 0;
	if (c == STACKS_WAKE_TASK)
		read_span(&e->hdr.span);
	else
		name_context(e, c);
}

/* A traced thread off CPU is being woken, in its waker's context (sched_waking, unlike
 * sched_wakeup, never runs on the wakee's CPU for it): note the waker's tid for the interval,
 * and with `wake`, send a record of the waker: who, in which context, and its stacks now when
 * the interval is already long enough to be kept; otherwise the record without stacks waits
 * in the thread's state until its interval is closed, sent only if it is kept (the wait for a
 * CPU after the wakeup made it long). One task-storage lookup for threads not traced or not
 * waiting. */
SEC("tp_btf/sched_waking")
int BPF_PROG(on_wakeup, struct task_struct *p)
{
	struct switch_state *s = bpf_task_storage_get(&switch_store, p, 0, 0);
	if (!s || !s->out_ts)
		return 0;
	enum stacks_wake_context c = wake_context();
	struct task_struct *cur = bpf_get_current_task_btf();
	s->waker = c == STACKS_WAKE_TASK ? (__u32)cur->pid : 0;
	/* An interval whose switch-out was not taken makes no row: nor does its wakeup. */
	if (!wake_on || s->untaken)
		return 0;
	/* 1 in N at random, before anything is read or taken for the record (the switch row's
	 * waker above is every wakeup's); N is read once, as it may change meanwhile. */
	__u32 one_in = (__u32)wake_one_in;
	if (one_in > 1 && bpf_get_prandom_u32() % one_in)
		return 0;
	if (one_in < 1)
		one_in = 1;
	/* The interval's row stands for N of its own (switch's 1 in N): so does its wakeup's. */
	one_in *= s->ev.hdr.count > 1 ? s->ev.hdr.count : 1;
	__u64 now = bpf_ktime_get_boot_ns();
	__u64 waited = now > s->out_ts ? now - s->out_ts : 0;
	if (waited < switch_min_ns) {
		fill_wake((struct stacks_event *)s->wake_note, cur, p, c, now, waited, one_in);
		s->wake_noted = 1;
		return 0;
	}
	struct stacks_event *e = scratch_for(wake_slot(c));
	if (!e)
		return 0;
	fill_wake(e, cur, p, c, now, waited, one_in);
	/* A user stack only of a task in user space's behalf: not of an interrupt, nor of a
	 * kernel thread (which has none). */
	bool user = c == STACKS_WAKE_TASK && !(cur->flags & PF_KTHREAD);
	capture_stacks(ctx, e, wake_stacks & (user ? (STACKS_WANT_KERNEL | STACKS_WANT_USER)
						   : STACKS_WANT_KERNEL));
	submit(e);
	return 0;
}

/* At the end of a recording (run once by user space, the tracepoints detached): every
 * thread still off CPU gets its interval so far (a thread blocked for good shows where), and
 * every thread's folded intervals are emitted. */
SEC("iter.s/task")
int flush_tasks(struct bpf_iter__task *ctx)
{
	struct task_struct *task = ctx->task;
	if (!task)
		return 0;
	struct switch_state *s = bpf_task_storage_get(&switch_store, task, 0, 0);
	if (!s)
		return 0;
	if (s->out_ts) {
		__u64 now = bpf_ktime_get_boot_ns();
		close_interval(s, task, now > s->out_ts ? now - s->out_ts : 0, now, CLOSE_END);
	}
	/* An interval still waiting for its user stack: read from its memory if the thread is
	 * still in that system call; a `d` stack goes by frame pointers. */
	if (s->user_pending) {
		user_pending_is(s, 0);
		end_user_stack(&s->ev, task, false);
		submit(&s->ev);
	}
	if (s->fold_start)
		flush_folded(s, task);
	return 0;
}
