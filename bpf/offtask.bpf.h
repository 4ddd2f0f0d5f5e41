/* offtask.bpf.h — the user stack of another thread, off CPU, read from its memory in a
 * sleepable iterator (bpf_copy_from_user_task): the `state` passes' stacks and the `switch`
 * intervals still open at the end of a recording. Included by kinds/switch.bpf.h. */
#pragma once

/* User frames a walk follows at most (the first is the saved instruction pointer). */
#define TASK_USER_FRAMES 32

/* The walk windows' slots, one per iterator. */
#define TASK_WINDOW_STATE 0
#define TASK_WINDOW_SWITCH 1

/* A window of another thread's user stack, read once for the frames in it: each read of
 * another task's memory (bpf_copy_from_user_task: access_process_vm) costs about as much for
 * 512 bytes as for one frame's 16, and a caller's frame is mostly within a few hundred bytes of
 * its callee's. One per iterator that walks (each runs one pass at a time). */
#define TASK_WINDOW 512

struct task_window {
	__u64 w[TASK_WINDOW / 8];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, struct task_window);
} task_windows SEC(".maps");

/* Walk the user stack of `task` (off CPU) by frame pointers from its saved registers into
 * e's frames after the kernel's `k`, as address-only frames (struct bpf_stack_build_id,
 * status 2). Sets ustack_len; returns the frames. Frame records are read from a window of the
 * stack read at the first frame outside the last one (its 512 bytes, or the record's 16 alone
 * where the 512 run into an unmapped page), `window` the caller's. Only in sleepable programs. */
static __always_inline __u32 task_fp_walk(struct stacks_event *e, struct task_struct *task,
					  struct pt_regs *regs, __u32 k, __u32 window)
{
	struct task_window *win = bpf_map_lookup_elem(&task_windows, &window);
	__u64 ip = PT_REGS_IP(regs); /* plain loads: a BTF pointer */
	__u64 fp = PT_REGS_FP(regs);
	__u64 base = 0, len = 0;
	__u32 n = 0;
	if (!win)
		return 0;
	for (int i = 0; i < TASK_USER_FRAMES; i++) {
		if (!ip)
			break;
		__u32 slot = k + (__u32)i * (STACKS_UFRAME_SIZE / 8);
		barrier_var(slot); /* keep the bound below for the verifier */
		slot &= 511;
		e->frames[slot] = BPF_STACK_BUILD_ID_IP;
		e->frames[slot + 1] = 0;
		e->frames[slot + 2] = 0;
		e->frames[slot + 3] = ip;
		n++;
		if (!fp || (fp & 7))
			break;
		if (fp < base || fp + 16 > base + len) {
			if (!bpf_copy_from_user_task(win, sizeof(*win), (void *)fp, task, 0))
				len = sizeof(*win);
			else if (!bpf_copy_from_user_task(win, 16, (void *)fp, task, 0))
				len = 16;
			else
				break;
			base = fp;
		}
		__u32 at = (__u32)((fp - base) / 8);
		__u64 next = win->w[at & (TASK_WINDOW / 8 - 1)];
		ip = win->w[(at + 1) & (TASK_WINDOW / 8 - 1)];
		if (next <= fp) /* stacks grow down: callers' frames are above */
			break;
		fp = next;
	}
	e->hdr.ustack_len = n;
	return n;
}

/* The user stack of `task`, off CPU or still in the system call it left the CPU in, into `e`
 * after its kernel frames, by frame pointers from its saved user registers, then its Python
 * frames; left as it is (-EAGAIN) when the task is not in a system call, unless `unmoved` (the
 * caller knows it has not run since it left the CPU). Only in sleepable programs. */
static __always_inline void end_user_stack(struct stacks_event *e, struct task_struct *task,
					   bool unmoved)
{
	struct pt_regs *r = (struct pt_regs *)bpf_task_pt_regs(task);
	if (!r || !(regs_in_syscall(r) || (unmoved && (r->cs & 3) == 3)))
		return;
	__u32 k = e->hdr.kstack_len > 0 ? (__u32)e->hdr.kstack_len : 0;
	if (k > STACKS_MAX_DEPTH)
		k = STACKS_MAX_DEPTH;
	task_fp_walk(e, task, r, k, TASK_WINDOW_SWITCH);
	capture_python_of(e, task, task);
}
