/* dwarf.bpf.h — `d` user stacks (docs/unwinding.md): the user registers and a copy of the
 * top of the user stack, with the frame-pointer walk, put after a scratch record's frames for
 * stacks-record to unwind with the files' CFI; and sending such a record. Included by
 * common.bpf.h after its capture and submit helpers. */

#define PAGE 4096
#define PF_KTHREAD 0x00200000
#define ENOSYS 38

/* Whether the user registers `r` were saved by a system call that has not returned: the entry
 * code stores -ENOSYS as the return value until the call returns, and the call number in
 * orig_ax (an interrupt stores -1 or its vector there, a fault its error code, and leaves the
 * user's rax in ax). */
static __always_inline bool regs_in_syscall(struct pt_regs *r)
{
	return (long)r->ax == -ENOSYS && (long)r->orig_ax >= 0 && (r->cs & 3) == 3;
}

/* Put the user registers `r` at frame slot `at` of `e` (right after its frames); the stack copy
 * goes right after them (the address returned). */
static __always_inline __u8 *put_uregs(struct stacks_event *e, __u32 at, struct pt_regs *r)
{
	struct stacks_uregs *ur = (struct stacks_uregs *)&e->frames[at & 255];
	ur->ip = r->ip;
	ur->sp = r->sp;
	ur->bp = r->bp;
	ur->py_frames = 0;
	ur->copied = 0;
	e->hdr.uwindow = sizeof(*ur);
	return (__u8 *)(ur + 1);
}

/* Copy up to ustack_window bytes of user stack from `sp` to `dst` (which put_uregs returned
 * for `e`) with READ(dst, size, src): to the end of sp's page, then whole pages (a constant
 * size), stopping at the first that cannot be read (the stack's end). Sets the registers'
 * `copied` and the record's `uwindow`. */
#define COPY_STACK(e, dst, sp, READ)                                                        \
	do {                                                                                \
		__u32 want_ = ustack_window;                                                \
		if (want_ > STACKS_UWINDOW_MAX)                                             \
			want_ = STACKS_UWINDOW_MAX;                                         \
		__u32 first_ = PAGE - ((sp) & (PAGE - 1));                                  \
		if (first_ > want_)                                                         \
			first_ = want_;                                                     \
		__u32 copied_ = 0;                                                          \
		if (first_ && !READ((dst), first_ & (PAGE * 2 - 1), (void *)(sp))) {       \
			copied_ = first_;                                                   \
			for (int i_ = 0; i_ < STACKS_UWINDOW_MAX / PAGE; i_++) {            \
				if (copied_ + PAGE > want_ ||                               \
				    copied_ > STACKS_UWINDOW_MAX - PAGE)                    \
					break;                                              \
				if (READ((dst) + copied_, PAGE, (void *)((sp) + copied_)))  \
					break;                                              \
				copied_ += PAGE;                                            \
			}                                                                   \
		}                                                                           \
		((struct stacks_uregs *)(dst)-1)->copied = copied_;                         \
		(e)->hdr.uwindow = sizeof(struct stacks_uregs) + copied_;                   \
	} while (0)

/* The user part of a `d` stack, after `k` kernel frames: the frame-pointer walk as plain
 * addresses, then the user registers and up to ustack_window bytes of the stack from sp (to
 * the end of sp's page, then whole pages), copied page by page (a read is all-or-nothing and never faults a page in, so the copy ends
 * at the stack's end or its first page not in memory). `e` is a scratch record (room). */
static __always_inline void capture_dwarf(void *ctx, struct stacks_event *e, __u32 k)
{
	struct task_struct *task = bpf_get_current_task_btf();
	if ((task->flags & PF_KTHREAD) || !task->mm) {
		e->hdr.ustack_len = -EFAULT; /* no user side */
		return;
	}
	struct pt_regs *r = (struct pt_regs *)bpf_task_pt_regs(task);
	if (!r || (r->cs & 3) != 3) {
		e->hdr.ustack_len = -EFAULT;
		return;
	}
	__u32 tgid = e->hdr.pid;
	if (!bpf_map_lookup_elem(&maps_read, &tgid)) {
		wake_for_maps = 1; /* unwinding needs its map: read it while the process lives */
		/* ... or from its exit record, if it exits first (until the recorder has read it). */
		if (!bpf_map_lookup_elem(&exit_snapshot, &tgid)) {
			__u8 one = 1;
			bpf_map_update_elem(&exit_snapshot, &tgid, &one, BPF_ANY);
		}
	}
	k &= 127; /* ≤ STACKS_MAX_DEPTH, in a form the verifier sees */
	long n = bpf_get_stack(ctx, &e->frames[k], STACK_BYTES, BPF_F_USER_STACK);
	__u32 u = 0;
	if (n < 0) {
		e->hdr.ustack_len = (__s32)n;
	} else {
		u = (__u32)n / 8;
		if (u > STACKS_MAX_DEPTH)
			u = STACKS_MAX_DEPTH;
		e->hdr.ustack_len = (__s32)u;
	}
	_Static_assert(STACKS_MAX_DEPTH == 127, "frame counts are masked with 127");
	__u32 at = (k & 127) + (u & 127);
	__u8 *end = put_uregs(e, at, r);
	/* Reads of the current task's memory: all-or-nothing, never faulting a page in. */
#define READ_OWN(dst, size, src) bpf_probe_read_user(dst, size, src)
	COPY_STACK(e, end, r->sp, READ_OWN);
#undef READ_OWN
	capture_python_room(e, at);
}

/* Whether the ring buffer of `kind` is too full for a stack copy: past half of it, `d` stacks
 * are taken by frame pointers (counted), so a burst of events degrades stacks before it loses
 * events. */
static __always_inline bool ringbuf_crowded(__u32 kind)
{
	__u32 ring = ring_of(kind);
	if (ring_waiting(ring) <= ring_half[ring & 3])
		return false;
	count_drop(STACKS_DROP_DWARF_FP);
	return true;
}

/* capture_stacks for the kinds that support `d` (their records are scratch records). */
static __always_inline void capture_stacks_d(void *ctx, struct stacks_event *e, __u32 want)
{
	if (!(want & STACKS_WANT_DWARF)) {
		capture_stacks(ctx, e, want);
		return;
	}
	if (ringbuf_crowded(e->hdr.kind)) {
		capture_stacks(ctx, e, want & (STACKS_WANT_USER | STACKS_WANT_KERNEL));
		return;
	}
	capture_stacks(ctx, e, want & STACKS_WANT_KERNEL);
	__u32 k = e->hdr.kstack_len > 0 ? (__u32)e->hdr.kstack_len : 0;
	capture_dwarf(ctx, e, k);
}

/* submit for a scratch record, which may carry a `d` stack (8-byte user frames, then the
 * registers and stack copy). */
static __always_inline bool submit_room(struct stacks_event *e)
{
	if (!e->hdr.uwindow)
		return submit(e);
	__u64 size = STACKS_EVENT_HEADER_SIZE;
	if (e->hdr.kstack_len > 0 && e->hdr.kstack_len <= STACKS_MAX_DEPTH)
		size += (__u64)e->hdr.kstack_len * 8;
	if (e->hdr.ustack_len > 0 && e->hdr.ustack_len <= STACKS_MAX_DEPTH)
		size += (__u64)e->hdr.ustack_len * 8;
	size += e->hdr.uwindow;
	if (size > sizeof(struct stacks_event_room))
		size = sizeof(struct stacks_event_room);
	__u32 ring = ring_of(e->hdr.kind);
	if (ring_output(ring, e, size, wakeup_flags(ring))) {
		count_unsent(e);
		return false;
	}
	return true;
}

/* Hand a record to user space and wake the reader now (process lifecycle: the reader learns
 * of new processes before their samples). */
static __always_inline void submit_now(struct stacks_event *e)
{
	submit_with(e, BPF_RB_FORCE_WAKEUP);
}
