/* python.bpf.h — Python frames of CPython processes (py_procs): at an event of a thread with a
 * user stack, the thread's own interpreter frame chain (its PyThreadState from the pthread key
 * CPython keeps it under, whether or not it holds the GIL), appended to the record after the
 * native user frames (struct stacks_pyframe). User space reads the code objects and
 * interleaves the frames with the native ones. Included by common.bpf.h. */

_Static_assert(sizeof(struct stacks_pyframe) == STACKS_UFRAME_SIZE,
	       "a Python frame takes a user frame's room");

/* CPython processes to read (tgid -> where and how), filled by user space. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, struct stacks_py_proc);
} py_procs SEC(".maps");

/* `idx` (checked by the caller to leave a user frame's room below 512) masked so the verifier
 * sees it in e->frames (635 words: every record, the task storage's and the scratch ones), behind
 * a barrier the compiler cannot see through (it would drop the mask). */
static __always_inline __u64 py_bound(__u64 idx)
{
	asm volatile("" : "+r"(idx));
	return idx & 511;
}

/* The last index of e->frames a Python frame (4 words) may start at. */
#define PY_LAST_IDX (512 - STACKS_UFRAME_SIZE / 8)

/* Read `size` bytes of user memory at `src`: the current thread's (`task` NULL), or, in a
 * sleepable program, another task's. */
static __always_inline long py_read(void *dst, __u32 size, __u64 src, struct task_struct *task)
{
	if (task)
		return bpf_copy_from_user_task(dst, size, (void *)src, task, 0);
	return bpf_probe_read_user(dst, size, (void *)src);
}

/* The PyThreadState of thread `t` (whose memory `task` reads, NULL: the current thread's), or 0
 * with `why` set: pthread_getspecific(autoTSSkey) done by hand on glibc's struct pthread (at
 * the thread pointer), checked against the state's native thread id. */
static __always_inline __u64 py_tstate(struct stacks_py_proc *py, struct task_struct *t,
				       struct task_struct *task, __u32 tid, __u32 *why)
{
#if defined(__TARGET_ARCH_x86)
	__u64 tp = BPF_CORE_READ(t, thread.fsbase);
#else
	__u64 tp = 0; /* other architectures: not read yet */
#endif
	__u32 key[2] = {}; /* Py_tss_t: _is_initialized, _key */
	__u64 at = 0, tstate = 0, ntid = 0;
	if (!tp || py_read(key, sizeof(key), py->tss_key, task)) {
		*why = STACKS_PY_READ;
		return 0;
	}
	if (!key[0]) {
		*why = STACKS_PY_NO_TSTATE;
		return 0;
	}
	if (key[1] < 32) {
		at = tp + py->specific_1st + key[1] * 16 + 8;
	} else if (key[1] < 1024) {
		__u64 block = 0;
		if (py_read(&block, sizeof(block), tp + py->specific + (key[1] / 32) * 8, task)) {
			*why = STACKS_PY_READ;
			return 0;
		}
		if (!block) {
			*why = STACKS_PY_NO_TSTATE;
			return 0;
		}
		at = block + (key[1] % 32) * 16 + 8;
	} else {
		*why = STACKS_PY_OTHER_TSTATE;
		return 0;
	}
	if (py_read(&tstate, sizeof(tstate), at, task)) {
		*why = STACKS_PY_READ;
		return 0;
	}
	if (!tstate) {
		*why = STACKS_PY_NO_TSTATE;
		return 0;
	}
	if (py_read(&ntid, sizeof(ntid), tstate + py->native_tid, task)) {
		*why = STACKS_PY_READ;
		return 0;
	}
	if (ntid != tid) {
		*why = STACKS_PY_OTHER_TSTATE;
		return 0;
	}
	return tstate;
}

/* The state of one frame walk, for its bpf_loop callback. The record's user frames so far are
 * counted in e->hdr.ustack_len itself (map memory, which the verifier does not track): a count
 * in here would differ at each step and keep the callback's states from converging. */
struct py_walk {
	struct stacks_event *e;
	struct stacks_py_proc *py;
	struct task_struct *task; /* whose memory is read; NULL: the current thread's */
	__u64 frame;              /* the next _PyInterpreterFrame; 0: done */
	__u32 why;                /* enum stacks_py_fail; 0: none */
	__u32 have_last;          /* a Python frame of this walk is the last user frame */
};

/* The index in e->frames of user frame `slot` (after the kernel stack's frames), or -1 when it
 * has no room (one frame's room is kept for a marker unless `marker`). */
static __always_inline __s64 py_slot(struct stacks_event *e, __u32 slot, bool marker)
{
	__s32 kl = e->hdr.kstack_len;
	__u64 k = kl > 0 ? (__u64)kl : 0;
	if (k > STACKS_MAX_DEPTH)
		k = STACKS_MAX_DEPTH;
	__u64 idx = k + (__u64)slot * (STACKS_UFRAME_SIZE / 8);
	if (slot >= STACKS_MAX_DEPTH - (marker ? 0 : 1) || idx > PY_LAST_IDX)
		return -1;
	return (__s64)idx;
}

/* The marker of a failure or truncation, after the user frames, when there is room. */
static __always_inline void py_mark(struct stacks_event *e, __u32 why)
{
	__s32 ul = e->hdr.ustack_len;
	__u32 u = ul > 0 ? (__u32)ul : 0;
	__s64 idx = py_slot(e, u, true);
	if (idx < 0)
		return;
	struct stacks_pyframe *f = (struct stacks_pyframe *)&e->frames[py_bound((__u64)idx)];
	f->status = STACKS_UFRAME_PYTHON_FAIL;
	f->flags = why;
	f->code = 0;
	f->qualname = 0;
	f->prev_instr = 0;
	e->hdr.ustack_len = (__s32)(u + 1);
}

/* One step of the walk: the frame at w->frame appended to the record; 1 to stop. */
static __always_inline int py_step(struct py_walk *w, struct task_struct *task)
{
	struct stacks_event *e = w->e;
	struct stacks_py_proc *py = w->py;
	__u64 frame = w->frame;
	if (w->why || !frame)
		return 1;
	__s32 ul = e->hdr.ustack_len;
	__u32 u = ul > 0 ? (__u32)ul : 0;
	__s64 idx = py_slot(e, u, false);
	if (idx < 0) {
		w->why = STACKS_PY_TRUNCATED;
		return 1;
	}
	__u8 entry = 0, owner = 0;
	__u64 code = 0, instr = 0, prev = 0, qualname = 0;
	if (py_read(&prev, sizeof(prev), frame + py->previous, task) ||
	    (py->owner && py_read(&owner, sizeof(owner), frame + py->owner, task))) {
		w->why = STACKS_PY_READ;
		return 1;
	}
	w->frame = prev;
	if (owner == STACKS_PY_OWNED_BY_CSTACK) {
		/* 3.12+: the shim of a C-level eval call; the frame inner to it began the call. */
		__s64 last = u ? py_slot(e, u - 1, true) : -1;
		if (w->have_last && last >= 0) {
			struct stacks_pyframe *f =
				(struct stacks_pyframe *)&e->frames[py_bound((__u64)last)];
			f->flags |= STACKS_PYFRAME_ENTRY;
		}
		return 0;
	}
	if (py_read(&code, sizeof(code), frame + py->code, task) ||
	    py_read(&instr, sizeof(instr), frame + py->prev_instr, task) ||
	    (py->is_entry && py_read(&entry, sizeof(entry), frame + py->is_entry, task)) ||
	    py_read(&qualname, sizeof(qualname), code + py->qualname, task)) {
		w->why = STACKS_PY_READ;
		return 1;
	}
	struct stacks_pyframe *f = (struct stacks_pyframe *)&e->frames[py_bound((__u64)idx)];
	f->status = STACKS_UFRAME_PYTHON;
	f->flags = entry ? STACKS_PYFRAME_ENTRY : 0;
	f->code = code;
	f->qualname = qualname;
	f->prev_instr = instr;
	e->hdr.ustack_len = (__s32)(u + 1);
	w->have_last = 1;
	return 0;
}

/* bpf_loop callbacks: reading the current thread's memory, or (sleepable programs only)
 * another task's. */
static int py_step_current(__u32 i, void *ctx)
{
	return py_step((struct py_walk *)ctx, NULL);
}

static int py_step_task(__u32 i, void *ctx)
{
	struct py_walk *w = ctx;
	return py_step(w, w->task);
}

/* Append thread `t`'s Python frames (innermost first) to `e`'s user stack, or the marker saying
 * why there are none or not all: for processes in py_procs, for user stacks of build-id or
 * address frames (not `d` stacks). `task`: NULL when `t` is the current thread, else `t`
 * itself, read from a sleepable program. */
static __always_inline void capture_python_of(struct stacks_event *e, struct task_struct *t,
					      struct task_struct *task)
{
	if (e->hdr.uwindow || e->hdr.ustack_len < 0)
		return;
	__u32 tgid = e->hdr.pid;
	struct stacks_py_proc *py = bpf_map_lookup_elem(&py_procs, &tgid);
	if (!py)
		return;
	if (e->hdr.ustack_len > STACKS_MAX_DEPTH)
		e->hdr.ustack_len = STACKS_MAX_DEPTH;
	struct py_walk w = {.e = e, .py = py, .task = task};
	__u64 tstate = py_tstate(py, t, task, e->hdr.tid, &w.why);
	if (tstate) {
		__u64 base = tstate;
		if (py->cframe != STACKS_PY_NO_CFRAME &&
		    (py_read(&base, sizeof(base), tstate + py->cframe, task) || !base))
			w.why = STACKS_PY_READ;
		else if (py_read(&w.frame, sizeof(w.frame), base + py->current_frame, task))
			w.why = STACKS_PY_READ;
	}
	if (!w.why && w.frame) {
		if (task)
			bpf_loop(STACKS_PY_MAX_FRAMES, py_step_task, &w, 0);
		else
			bpf_loop(STACKS_PY_MAX_FRAMES, py_step_current, &w, 0);
	}
	if (!w.why && w.frame)
		w.why = STACKS_PY_TRUNCATED;
	if (w.why)
		py_mark(e, w.why);
}
/* The current thread's Python frames (capture_python_of). */
static __always_inline void capture_python(struct stacks_event *e)
{
	capture_python_of(e, bpf_get_current_task_btf(), NULL);
}
