/* kinds/state.bpf.h — the `state` event: HZ times a second user space runs the sleepable task
 * iterator below, which writes one record per live thread of the targets: running, runnable or
 * why it sleeps, the system call it is in and for how long, and, off CPU, its kernel stack
 * (bpf_get_task_stack) and user stack (a frame-pointer walk from its saved user registers with
 * bpf_copy_from_user_task; in a CPython process, then its Python frames, python.bpf.h), not
 * captured again for a thread that has not run since its last row
 * (STACKS_SAME_STACKS); for a call on a file descriptor, the file or socket behind it (read from
 * the thread's fd table at the pass, with the helpers of syscalls.bpf.h). Included by
 * stacks.bpf.c after common.bpf.h. */
#pragma once
#include "switch.bpf.h"

const volatile __u32 state_stacks = 0;  /* STACKS_WANT_* */
/* state_period_ns (1e9 / HZ, what one row stands for): control.bpf.h, changed while
 * recording. */

#define STATE_PF_KTHREAD 0x00200000 /* PF_KTHREAD: a kernel thread */


/* Per target thread, in one task storage (one lookup per thread a pass visits): when it last
 * left the CPU and its context switch count then (without `switch`, whose own switch-out
 * record serves otherwise), and what the passes last sent of its stacks. A thread off CPU in a
 * system call left the CPU in that call (it has not run since), so the time since is how long
 * it has waited in it so far: no program runs at every call's entry or return for it (one
 * there costs every call of the host ~290 ns beside pgbench, docs/cost.md). Whether it is in
 * a call, which, and its file descriptor argument are read at the pass from the registers it
 * entered with (they stay as they were until it returns: regs_in_syscall). */
struct state_task {
	__u64 out_ts;       /* its last switch-out (boot ns), by state_switch */
	__u64 out_switches; /* nvcsw + nivcsw then */
	/* 1 + its context switch count (nvcsw + nivcsw) when a pass last sent its stacks (0:
	 * never). A thread whose count has not moved since has not run: its stacks are the ones
	 * sent, and are not captured again (STACKS_SAME_STACKS). */
	__u64 sent;
};

/* The system calls whose first argument is the file descriptor they wait on (read and write
 * families, syncs, sockets, directory reads, locks, ioctl, polling an epoll descriptor), for
 * this architecture: their rows name the file or socket. The vfs calls' NR_* are
 * stacks.bpf.c's. */
#if defined(__TARGET_ARCH_arm64)
#define NR_epoll_pwait 22
#define NR_ioctl 29
#define NR_flock 32
#define NR_ftruncate 46
#define NR_fallocate 47
#define NR_getdents64 61
#define NR_sendfile 71
#define NR_splice 76
#define NR_fsync 82
#define NR_fdatasync 83
#define NR_sync_file_range 84
#define NR_accept 202
#define NR_connect 203
#define NR_sendto 206
#define NR_recvfrom 207
#define NR_sendmsg 211
#define NR_recvmsg 212
#define NR_accept4 242
#define NR_recvmmsg 243
#define NR_sendmmsg 269
#define NR_copy_file_range 285
#define NR_epoll_pwait2 441
#define NR_epoll_wait (-2) /* none on arm64 */
#else
#define NR_ioctl 16
#define NR_sendfile 40
#define NR_connect 42
#define NR_accept 43
#define NR_sendto 44
#define NR_recvfrom 45
#define NR_sendmsg 46
#define NR_recvmsg 47
#define NR_flock 73
#define NR_fsync 74
#define NR_fdatasync 75
#define NR_ftruncate 77
#define NR_getdents64 217
#define NR_epoll_wait 232
#define NR_splice 275
#define NR_sync_file_range 277
#define NR_epoll_pwait 281
#define NR_fallocate 285
#define NR_accept4 288
#define NR_recvmmsg 299
#define NR_sendmmsg 307
#define NR_copy_file_range 326
#define NR_epoll_pwait2 441
#endif

static __always_inline bool state_fd_call(long nr)
{
	if (vfs_call_of(nr) >= 0)
		return true;
	switch (nr) {
	case NR_ioctl: case NR_sendfile: case NR_connect: case NR_accept: case NR_sendto:
	case NR_recvfrom: case NR_sendmsg: case NR_recvmsg: case NR_flock: case NR_fsync:
	case NR_fdatasync: case NR_ftruncate: case NR_getdents64: case NR_epoll_wait:
	case NR_splice: case NR_sync_file_range: case NR_epoll_pwait: case NR_fallocate:
	case NR_accept4: case NR_recvmmsg: case NR_sendmmsg: case NR_copy_file_range:
	case NR_epoll_pwait2:
		return true;
	default:
		return false;
	}
}

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct state_task);
} state_tasks SEC(".maps");

/* The record under construction. The iterator runs one pass at a time (one driver thread), but
 * it sleeps and may be preempted by other programs on its CPU: its own slot, not scratch's. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct stacks_event_room); /* room for a `d` stack's copy */
} state_scratch SEC(".maps");

/* The pass in progress: its iterator session and start time (every row of a pass has it). */
__u64 state_session = 0;
__u64 state_pass_ts = 0;

/* Without `switch`: when each target thread leaves the CPU (a task-storage write at every
 * switch-out of a target thread, where a program at every system call's entry cost every call
 * of the host). Loaded only when `switch`, whose on_switch records the same, is off. */
SEC("tp_btf/sched_switch")
int BPF_PROG(state_switch, bool preempt, struct task_struct *prev, struct task_struct *next,
	     unsigned int prev_state)
{
	if ((prev->flags & STATE_PF_KTHREAD) || !is_target(prev, prev->tgid, prev->pid))
		return 0;
	struct state_task *c = bpf_task_storage_get(&state_tasks, prev, 0,
						    BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!c)
		return 0;
	c->out_ts = bpf_ktime_get_boot_ns();
	c->out_switches = switches_of(prev);
	return 0;
}

/* When `task` (off CPU) last left the CPU (0: not seen since the recording started): from
 * `switch`'s open interval `sw` or state_switch's `c` (either may be null), when the thread's
 * switch count is still the one it had then (a switch the tracepoint did not report would
 * otherwise make its wait look longer). */
static __always_inline __u64 state_off_since(struct switch_state *sw, struct state_task *c,
					     struct task_struct *task)
{
	__u64 switches = switches_of(task);
	if (sw && sw->out_ts && sw->out_switches == switches)
		return sw->out_ts;
	if (c && c->out_ts && c->out_switches == switches)
		return c->out_ts;
	return 0;
}

/* The system call `task` (off CPU) is in (STACKS_NO_SYSCALL: none) and its file descriptor
 * argument (-1: none), from its saved user registers (plain loads: `regs` is a BTF pointer): a
 * call in progress left -ENOSYS as the return value and its number in orig_ax
 * (regs_in_syscall). The entry saved the caller's registers: the first argument is still
 * there. */
static __always_inline __s32 state_syscall_of(struct pt_regs *regs, __s32 *fd)
{
	*fd = -1;
	if (!regs_in_syscall(regs))
		return STACKS_NO_SYSCALL;
	long nr = regs->orig_ax;
	if (state_fd_call(nr))
		*fd = (__s32)regs->SYSCALL_ARG0_FIELD;
	return (__s32)nr;
}

/* Walk the user stack of `task` (off CPU) by frame pointers from its saved registers into
 * e's frames after the kernel's `k`, as plain addresses (a `d` stack). Sets ustack_len;
 * returns the frames. One read per frame record: the window of task_fp_walk on top of the
 * stack copy that follows would take the program past the verifier's limits, and a `d` row
 * copies the stack anyway. */
static __always_inline __u32 state_fp_walk_plain(struct stacks_event *e, struct task_struct *task,
						 struct pt_regs *regs, __u32 k)
{
	__u64 ip = PT_REGS_IP(regs); /* plain loads: a BTF pointer */
	__u64 fp = PT_REGS_FP(regs);
	__u32 n = 0;
	for (int i = 0; i < TASK_USER_FRAMES; i++) {
		if (!ip)
			break;
		__u32 at = k + (__u32)i;
		barrier_var(at); /* keep the bound below for the verifier */
		e->frames[at & 255] = ip;
		n++;
		if (!fp)
			break;
		__u64 frame[2];
		if (bpf_copy_from_user_task(frame, sizeof(frame), (void *)fp, task, 0))
			break;
		if (frame[0] <= fp) /* stacks grow down: callers' frames are above */
			break;
		fp = frame[0];
		ip = frame[1];
	}
	e->hdr.ustack_len = n;
	return n;
}

/* The kernel stack's frames in `e` (where the user stack goes). */
static __always_inline __u32 state_kframes(struct stacks_event *e)
{
	__u32 k = e->hdr.kstack_len > 0 ? e->hdr.kstack_len : 0;
	return k > STACKS_MAX_DEPTH ? STACKS_MAX_DEPTH : k;
}

/* `state:d`: the user stack of an off-CPU thread for the recorder to unwind by CFI, as
 * capture_dwarf takes the current thread's (dwarf.bpf.h), but of another thread: its
 * frame-pointer walk as plain addresses, its saved user registers, and a copy of its stack
 * from sp read with bpf_copy_from_user_task (this iterator may sleep: pages are faulted in). */
static __always_inline void state_dwarf_stack(struct stacks_event *e, struct task_struct *task,
					      struct pt_regs *regs)
{
	if ((regs->cs & 3) != 3) {
		e->hdr.ustack_len = -EFAULT;
		return;
	}
	__u32 k = state_kframes(e);
	__u32 n = state_fp_walk_plain(e, task, regs, k);
	struct py_buf *py = py_walk_apart(e, task);
	__u8 *end = put_uregs(e, (k + n) & 255, regs);
	/* Reads of another task's memory: this iterator may sleep, so pages are faulted in. */
#define READ_TASK(dst, size, src) bpf_copy_from_user_task(dst, size, src, task, 0)
	COPY_STACK(e, end, regs->sp, READ_TASK);
#undef READ_TASK
	if (py)
		py_put_after_copy(e, (k + n) & 255, py);
}

/* A state row was handed over (`sent`), or not: a path walked for it need not be walked again
 * (file_info_once). */
static __always_inline void state_sent(struct stacks_event *e, bool sent, bool walked)
{
	if (sent && walked)
		file_path_sent(&e->info.state.file);
}

SEC("iter.s/task")
int sample_states(struct bpf_iter__task *ctx)
{
	struct task_struct *task = ctx->task;
	if (!task)
		return 0;
	__u64 session = ctx->meta->session_id;
	if (session != state_session) {
		state_session = session;
		state_pass_ts = bpf_ktime_get_boot_ns();
	}
	__u32 tgid = task->tgid;
	__u32 tid = task->pid;
	if (!is_target(task, tgid, tid))
		return 0;
	if (task->flags & STATE_PF_KTHREAD)
		return 0;
	/* The recorder's sampling thread runs this pass: it is on CPU only because it samples,
	 * and would show as a thread running all the time. */
	if (task->pid == bpf_get_current_task_btf()->pid)
		return 0;
	__u32 zero = 0;
	struct stacks_event *e = bpf_map_lookup_elem(&state_scratch, &zero);
	if (!e)
		return 0;
	fill_hdr(&e->hdr, STACKS_EV_STATE, task, state_pass_ts);
	e->hdr.cpu = task->thread_info.cpu;
	struct stacks_state_sample *s = &e->info.state;
	s->period_ns = state_period_ns;
	s->syscall_ns = 0;
	s->off_since = 0;
	s->syscall = STACKS_NO_SYSCALL;
	s->fd = -1;
	s->family = 0;
	s->protocol = 0;
	s->file.inode = 0;
	if (task->on_cpu) {
		/* Its saved registers and stacks are stale while it runs: no stacks. */
		s->state = STACKS_STATE_RUNNING;
		submit(e);
		return 0;
	}
	s->state = switch_state_of(false, task->__state);
	/* With `switch`: the interval it is in, so that the `wake` row that ends it links here. */
	struct switch_state *sw = bpf_task_storage_get(&switch_store, task, 0, 0);
	if (sw)
		s->off_since = sw->out_ts;
	struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(task);
	/* Created for `sent` when stacks are asked for. */
	struct state_task *c = bpf_task_storage_get(&state_tasks, task, 0,
						    state_stacks ? BPF_LOCAL_STORAGE_GET_F_CREATE : 0);
	__s32 fd;
	s->syscall = state_syscall_of(regs, &fd);
	__u64 since = state_off_since(sw, c, task);
	if (s->syscall != STACKS_NO_SYSCALL && since && since < state_pass_ts)
		s->syscall_ns = state_pass_ts - since;
	/* Its file's path walked now, to be marked sent with the record. */
	bool walked = false;
	if (fd >= 0) {
		s->fd = fd;
		struct file *f = file_info_once(&s->file, task, fd, &walked);
		if (f && s->file.file_type == STACKS_FILE_SOCKET) {
			struct socket *sock = bpf_core_cast(f, struct file)->private_data;
			struct sock *sk = sock ? bpf_core_cast(sock, struct socket)->sk : NULL;
			__u32 family, protocol;
			if (sk && sock_addrs(sk, &family, &protocol, &s->addrs)) {
				s->family = family;
				s->protocol = protocol;
			}
		}
	}
	if (!state_stacks) {
		state_sent(e, submit(e), walked);
		return 0;
	}
	__u64 switches = task->nvcsw + task->nivcsw + 1;
	if (c && c->sent == switches) {
		if (state_stacks & STACKS_WANT_KERNEL)
			e->hdr.kstack_len = STACKS_SAME_STACKS;
		if (state_stacks & STACKS_WANT_USER)
			e->hdr.ustack_len = STACKS_SAME_STACKS;
		state_sent(e, submit(e), walked);
		return 0;
	}
	if (state_stacks & STACKS_WANT_KERNEL) {
		long n = bpf_get_task_stack(task, e->frames, STACK_BYTES, 0);
		__u32 k = n < 0 ? 0 : (__u32)n / 8;
		e->hdr.kstack_len = n < 0 ? (__s32)n : (__s32)(k > STACKS_MAX_DEPTH ? STACKS_MAX_DEPTH : k);
	}
	if ((state_stacks & STACKS_WANT_DWARF) && !ringbuf_crowded(STACKS_EV_STATE))
		state_dwarf_stack(e, task, regs);
	else if (state_stacks & STACKS_WANT_USER) {
		task_fp_walk(e, task, regs, state_kframes(e), TASK_WINDOW_STATE);
		capture_python_of(e, task, task);
	}
	/* It ran while they were read (woken meanwhile: it is on a CPU, or has switched since):
	 * what was read of its stacks may be torn (its user stack moved on, its Python frames and
	 * asyncio task half changed; CI saw rows in a task's code without the task), so none is
	 * sent (-EAGAIN) and the next pass takes them again. */
	if (task->on_cpu || task->nvcsw + task->nivcsw + 1 != switches) {
		if (state_stacks & STACKS_WANT_KERNEL)
			e->hdr.kstack_len = -EAGAIN;
		if (state_stacks & STACKS_WANT_USER)
			e->hdr.ustack_len = -EAGAIN;
		e->hdr.uwindow = 0;
		state_sent(e, submit(e), walked);
		return 0;
	}
	/* Only stacks user space has: a record lost to a full ring buffer is sent again. */
	bool sent = submit_room(e);
	if (sent && c)
		c->sent = switches;
	state_sent(e, sent, walked);
	return 0;
}
