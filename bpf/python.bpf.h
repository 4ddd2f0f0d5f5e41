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

/* Set by user space once it has put a process in py_procs: until then no event looks there
 * (a lookup in a map an event has not touched for a while costs cache and TLB misses, as
 * span_procs_any says). */
volatile __u32 py_procs_any = 0;

/* Read `size` bytes of user memory at `src`: the current thread's (`task` NULL), or, in a
 * sleepable program, another task's. */
static __always_inline long py_read(void *dst, __u32 size, __u64 src, struct task_struct *task)
{
	if (task)
		return bpf_copy_from_user_task(dst, size, (void *)src, task, 0);
	return bpf_probe_read_user(dst, size, (void *)src);
}

/* A thread's PyThreadState found in its interpreter's list (by thread id), checked at each use
 * by its native thread id: a cache, so the list is walked once per thread. `tstate` 0: the
 * thread had none at `when` (bpf_ktime_get_ns), looked for again after PY_NO_TSTATE_NS (a
 * thread's state is made before it runs Python, and named with its thread id as it starts). */
struct py_tstate_seen {
	__u64 tstate;
	__u64 when;
};

#define PY_NO_TSTATE_NS 20000000ULL

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, struct py_tstate_seen);
} py_tstates SEC(".maps");

/* 3.11, 3.12: the PyThreadState under the pthread key autoTSSkey, pthread_getspecific done by
 * hand on glibc's struct pthread at thread pointer `tp`, checked against the state's native
 * thread id; 0 with `why` set when none. */
static __always_inline __u64 py_tstate_key(struct stacks_py_proc *py, __u64 tp,
					   struct task_struct *task, __u32 tid, __u32 *why)
{
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

/* The state of one look for a thread's state, for its bpf_loop callback: the whole look is
 * the callback's (the verifier checks it once, not at each program and path that reads Python
 * frames: `state:d`'s program is at its limit). */
struct py_find {
	struct stacks_py_proc *py;
	__u64 tp;                 /* the thread pointer (the pthread key's look) */
	__u64 tstate;             /* the next thread state to look at; 0: the list ended */
	__u64 found;
	__u64 now;
	__u32 tid;
	__u32 why;
};

/* Step `i` of the look: the cached state while it still names the thread, else the list's
 * head, then one thread state of the list a step; 1 when done (found, or `why` set). */
static __always_inline int py_find_step(__u32 i, struct py_find *f, struct task_struct *task)
{
	struct stacks_py_proc *py = f->py;
	__u64 ntid = 0, next = 0;
	if (i == 0 && py->tss_key) {
		f->found = py_tstate_key(py, f->tp, task, f->tid, &f->why);
		return 1;
	}
	if (i == 0) {
		struct py_tstate_seen *seen = bpf_map_lookup_elem(&py_tstates, &f->tid);
		if (seen) {
			__u64 ts = seen->tstate;
			if (!ts && f->now - seen->when < PY_NO_TSTATE_NS) {
				f->why = STACKS_PY_NO_TSTATE;
				return 1;
			}
			if (ts && !py_read(&ntid, sizeof(ntid), ts + py->native_tid, task) &&
			    ntid == f->tid) {
				f->found = ts;
				return 1;
			}
		}
		__u64 interp = 0;
		if (py_read(&interp, sizeof(interp), py->interp_head, task) ||
		    (interp && py_read(&f->tstate, sizeof(f->tstate), interp + py->threads_head, task))) {
			f->why = STACKS_PY_READ;
			return 1;
		}
	}
	__u64 ts = f->tstate;
	if (ts && (py_read(&ntid, sizeof(ntid), ts + py->native_tid, task) ||
		   py_read(&next, sizeof(next), ts + py->tstate_next, task))) {
		f->why = STACKS_PY_READ;
		return 1;
	}
	if (ts && ntid != f->tid) {
		f->tstate = next;
		return 0;
	}
	/* Found, or the list ended without the thread: kept either way. */
	struct py_tstate_seen v = { .tstate = ts, .when = f->now };
	bpf_map_update_elem(&py_tstates, &f->tid, &v, BPF_ANY);
	f->found = ts;
	if (!ts)
		f->why = STACKS_PY_NO_TSTATE;
	return 1;
}

static int py_find_current(__u32 i, void *ctx)
{
	return py_find_step(i, (struct py_find *)ctx, NULL);
}

/* Reading another task's memory (sleepable programs): the task is the walk's, kept in the
 * py_walk that holds this look. */
struct py_find_of {
	struct py_find f;
	struct task_struct *task;
};

static int py_find_task(__u32 i, void *ctx)
{
	struct py_find_of *o = ctx;
	return py_find_step(i, &o->f, o->task);
}

/* The look for thread `tid`'s state as global functions, reading the current thread's memory
 * or (sleepable programs only) task `task`'s, with thread pointer `tp` (the pthread key's
 * look): the verifier checks each once, on its own, instead of once per way into it in every
 * program (`state:d` went past its million instructions). The state, or 0 with `*why` set. */
__noinline __u64 py_tstate_current(struct stacks_py_proc *py, __u64 tp, __u32 tid, __u32 *why)
{
	if (!py || !why)
		return 0;
	struct py_find f = { .py = py, .tp = tp, .tid = tid, .now = bpf_ktime_get_ns() };
	bpf_loop(STACKS_PY_MAX_THREADS + 1, py_find_current, &f, 0);
	*why = f.why;
	return f.why ? 0 : f.found;
}

__noinline __u64 py_tstate_task(struct stacks_py_proc *py, struct task_struct *task __arg_trusted,
				__u64 tp, __u32 tid, __u32 *why)
{
	if (!py || !why || !task)
		return 0;
	struct py_find_of o = {
		.f = { .py = py, .tp = tp, .tid = tid, .now = bpf_ktime_get_ns() },
		.task = task,
	};
	bpf_loop(STACKS_PY_MAX_THREADS + 1, py_find_task, &o, 0);
	*why = o.f.why;
	return o.f.why ? 0 : o.f.found;
}

/* The PyThreadState of thread `t` (thread `tid`, whose memory `task` reads, NULL: the current
 * thread's), or 0 with `why` set: 3.13+ from its interpreter's list of thread states (the
 * cached one while it still names the thread, else found by walking the list), 3.11 and 3.12
 * under the pthread key (py_tstate_key). */
static __always_inline __u64 py_tstate(struct stacks_py_proc *py, struct task_struct *t,
				       struct task_struct *task, __u32 tid, __u32 *why)
{
#if defined(__TARGET_ARCH_x86)
	__u64 tp = py->tss_key ? BPF_CORE_READ(t, thread.fsbase) : 0;
#else
	__u64 tp = 0; /* other architectures: not read yet */
#endif
	__u32 w = 0;
	__u64 tstate = task ? py_tstate_task(py, task, tp, tid, &w)
			    : py_tstate_current(py, tp, tid, &w);
	*why = w;
	return tstate;
}

/* The state of one frame walk, for its bpf_loop callback. Frames go at byte `base` of the
 * record, 32 bytes each, after `*count` of them (the record's ustack_len, whose native frames
 * come first, or, after a `d` stack's copy, its registers' py_frames): a count in map memory,
 * which the verifier does not track; one in here would differ at each step and keep the
 * callback's states from converging. */
struct py_walk {
	struct stacks_event *e;
	struct stacks_py_proc *py;
	struct task_struct *task; /* whose memory is read; NULL: the current thread's */
	__u32 *count;
	__u64 base;
	__u64 frame;              /* the next _PyInterpreterFrame; 0: done */
	__u32 why;                /* enum stacks_py_fail; 0: none */
	__u32 have_last;          /* a Python frame of this walk is the last frame */
	__u64 switches;           /* the task's context switches when its walk began */
};

/* Python frames walked apart, to go after a `d` stack's copy once it is made (`state:d`,
 * whose copy's many outcomes would each be walked again by the verifier): the sleepable
 * iterator runs one pass at a time, so one buffer. */
struct py_buf {
	__u32 n;
	__u32 pad;
	struct stacks_pyframe f[STACKS_PY_MAX_FRAMES + 2]; /* the frames, a marker, the task */
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct py_buf);
} py_state_buf SEC(".maps");

/* Bytes of the record a walk may write in: a plain record's (a `switch` record in task
 * storage has no more), a scratch record's with the room of a `d` stack, or a py_buf. */
#define PY_LIMIT_EVENT sizeof(struct stacks_event)
#define PY_LIMIT_ROOM sizeof(struct stacks_event_room)
#define PY_LIMIT_BUF sizeof(struct py_buf)

/* Frame `slot` of walk `w` in a record of `limit` bytes, or NULL when it has no room (one
 * frame's room is kept for a marker unless `marker`). The offset is checked behind a barrier
 * the compiler cannot see through, so the verifier sees the check on the register it adds. */
static __always_inline struct stacks_pyframe *py_at(struct py_walk *w, __u32 slot, __u64 limit,
						    bool marker)
{
	if (slot >= STACKS_MAX_DEPTH - (marker ? 0 : 1))
		return NULL;
	__u64 off = w->base + (__u64)slot * STACKS_UFRAME_SIZE;
	asm volatile("" : "+r"(off));
	if (off > limit - STACKS_UFRAME_SIZE)
		return NULL;
	return (struct stacks_pyframe *)((__u8 *)w->e + off);
}

/* The marker of a failure or truncation after the frames, when there is room. */
static __always_inline void py_mark(struct py_walk *w, __u64 limit)
{
	__u32 n = *w->count;
	struct stacks_pyframe *f = py_at(w, n, limit, true);
	if (!f)
		return;
	f->status = STACKS_UFRAME_PYTHON_FAIL;
	f->flags = w->why;
	f->code = 0;
	f->qualname = 0;
	f->prev_instr = 0;
	*w->count = n + 1;
}

/* One step of the walk: the frame at w->frame appended; 1 to stop. */
static __always_inline int py_step(struct py_walk *w, struct task_struct *task, __u64 limit)
{
	struct stacks_py_proc *py = w->py;
	__u64 frame = w->frame;
	if (w->why || !frame)
		return 1;
	__u32 n = *w->count;
	struct stacks_pyframe *f = py_at(w, n, limit, false);
	if (!f) {
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
	if (owner >= STACKS_PY_OWNED_BY_CSTACK) {
		/* 3.12+: the shim of a C-level eval call; the frame inner to it began the call. */
		struct stacks_pyframe *last = n ? py_at(w, n - 1, limit, true) : NULL;
		if (w->have_last && last)
			last->flags |= STACKS_PYFRAME_ENTRY;
		return 0;
	}
	if (py_read(&code, sizeof(code), frame + py->code, task) ||
	    py_read(&instr, sizeof(instr), frame + py->prev_instr, task) ||
	    (py->is_entry && py_read(&entry, sizeof(entry), frame + py->is_entry, task)) ||
	    py_read(&qualname, sizeof(qualname), (code & ~7ULL) + py->qualname, task)) {
		w->why = STACKS_PY_READ;
		return 1;
	}
	f->status = STACKS_UFRAME_PYTHON;
	f->flags = entry ? STACKS_PYFRAME_ENTRY : 0;
	f->code = code & ~7ULL;
	f->qualname = qualname;
	f->prev_instr = instr;
	*w->count = n + 1;
	w->have_last = 1;
	return 0;
}

/* bpf_loop callbacks: reading the current thread's memory, or (sleepable programs only)
 * another task's; into a plain record, or after a `d` stack's copy. */
static int py_step_current(__u32 i, void *ctx)
{
	return py_step((struct py_walk *)ctx, NULL, PY_LIMIT_EVENT);
}

static int py_step_task(__u32 i, void *ctx)
{
	struct py_walk *w = ctx;
	return py_step(w, w->task, PY_LIMIT_EVENT);
}

static int py_step_current_room(__u32 i, void *ctx)
{
	return py_step((struct py_walk *)ctx, NULL, PY_LIMIT_ROOM);
}

static int py_step_task_buf(__u32 i, void *ctx)
{
	struct py_walk *w = ctx;
	return py_step(w, w->task, PY_LIMIT_BUF);
}

/* What py_running_task_of read: the task, its name object. `switches`: the thread's context
 * switches when its frames were walked. */
struct py_task_seen {
	__u64 switches;
	__u64 task;
	__u64 name;
};

/* The asyncio task thread state `tstate` of another thread `task` runs and the task's name
 * object (3.14+, when the layout of asyncio's debug offsets is known), read from its memory
 * (sleepable programs) into `s`: 0 when read, else 1. Also 1 when the thread has run since its
 * frames were walked (it is on a CPU, or its switch count moved): its task may have changed
 * and would label frames of another. A global function, checked once on its own: the `state`
 * iterator's programs are near the verifier's limit. */
__noinline int py_running_task_of(struct stacks_py_proc *py, struct task_struct *task __arg_trusted,
				  __u64 tstate, struct py_task_seen *s)
{
	if (!py || !task || !s || !py->running_task || !tstate)
		return 1;
	__u64 t = 0, name = 0;
	if (bpf_copy_from_user_task(&t, sizeof(t), (void *)(tstate + py->running_task), task, 0) ||
	    !t || bpf_copy_from_user_task(&name, sizeof(name), (void *)(t + py->task_name), task, 0))
		return 1;
	if (task->on_cpu || task->nvcsw + task->nivcsw != s->switches)
		return 1;
	s->task = t;
	s->name = name;
	return 0;
}

/* Task `t` with name object `name` as a frame flagged STACKS_PYFRAME_TASK. */
static __always_inline void py_task_frame(struct stacks_pyframe *f, __u64 t, __u64 name)
{
	f->status = STACKS_UFRAME_PYTHON;
	f->flags = STACKS_PYFRAME_TASK;
	f->code = t;
	f->qualname = name;
	f->prev_instr = 0;
}

/* After the frames of walk `w` (limit `limit`), the asyncio task its thread state `tstate`
 * runs (3.14+, when the layout of asyncio's debug offsets is known), as a frame flagged
 * STACKS_PYFRAME_TASK: user space names it and the tasks awaiting it. The current thread's
 * memory is read, or the walk's task's (py_running_task_of). */
static __always_inline void py_task(struct py_walk *w, __u64 tstate, __u64 limit)
{
	struct stacks_py_proc *py = w->py;
	__u64 tn[2] = {};
	if (w->task) {
		struct py_task_seen seen = { .switches = w->switches };
		if (py_running_task_of(py, w->task, tstate, &seen))
			return;
		tn[0] = seen.task;
		tn[1] = seen.name;
	} else if (!py->running_task || !tstate ||
		   py_read(&tn[0], sizeof(tn[0]), tstate + py->running_task, NULL) || !tn[0] ||
		   py_read(&tn[1], sizeof(tn[1]), tn[0] + py->task_name, NULL)) {
		return;
	}
	__u32 n = *w->count;
	struct stacks_pyframe *f = py_at(w, n, limit, false);
	if (!f)
		return;
	py_task_frame(f, tn[0], tn[1]);
	*w->count = n + 1;
}

/* Where a walk writes (its limit): a plain record, after a `d` stack's copy in a scratch
 * record, a py_buf. */
enum py_where { PY_EVENT, PY_ROOM, PY_BUF };

/* Thread `t`'s (thread `tid` of process `tgid`) Python frames (innermost first), or the marker
 * saying why there are none or not all, into walk `w` (its record, place and count set): for
 * processes in py_procs. `task`: NULL when `t` is the current thread, else `t` itself, read
 * from a sleepable program (PY_EVENT or PY_BUF only). */
static __always_inline __u64 py_walk_into(struct py_walk *w, __u32 tgid, __u32 tid,
					  struct task_struct *t, struct task_struct *task,
					  enum py_where where)
{
	struct stacks_py_proc *py = py_procs_any ? bpf_map_lookup_elem(&py_procs, &tgid) : NULL;
	if (!py)
		return 0;
	w->py = py;
	w->task = task;
	if (task)
		w->switches = task->nvcsw + task->nivcsw;
	__u64 tstate = py_tstate(py, t, task, tid, &w->why);
	if (tstate) {
		__u64 base = tstate;
		if (py->cframe != STACKS_PY_NO_CFRAME &&
		    (py_read(&base, sizeof(base), tstate + py->cframe, task) || !base))
			w->why = STACKS_PY_READ;
		else if (py_read(&w->frame, sizeof(w->frame), base + py->current_frame, task))
			w->why = STACKS_PY_READ;
	}
	if (!w->why && w->frame) {
		if (task)
			bpf_loop(STACKS_PY_MAX_FRAMES, where == PY_BUF ? py_step_task_buf : py_step_task,
				 w, 0);
		else
			bpf_loop(STACKS_PY_MAX_FRAMES,
				 where == PY_ROOM ? py_step_current_room : py_step_current, w, 0);
	}
	if (!w->why && w->frame)
		w->why = STACKS_PY_TRUNCATED;
	if (w->why)
		py_mark(w, where == PY_BUF ? PY_LIMIT_BUF
			    : where == PY_ROOM ? PY_LIMIT_ROOM : PY_LIMIT_EVENT);
	return tstate;
}

/* Append thread `t`'s Python frames to `e`'s user stack of build-id or address frames (see
 * py_walk_into); its thread state, or 0. */
static __always_inline __u64 py_capture_of(struct stacks_event *e, struct task_struct *t,
					   struct task_struct *task, struct py_walk *w)
{
	if (e->hdr.uwindow || e->hdr.ustack_len < 0)
		return 0;
	if (e->hdr.ustack_len > STACKS_MAX_DEPTH)
		e->hdr.ustack_len = STACKS_MAX_DEPTH;
	__s32 kl = e->hdr.kstack_len;
	__u64 k = kl > 0 ? (__u64)kl : 0;
	if (k > STACKS_MAX_DEPTH)
		k = STACKS_MAX_DEPTH;
	w->e = e;
	w->count = (__u32 *)&e->hdr.ustack_len;
	w->base = offsetof(struct stacks_event, frames) + k * 8;
	return py_walk_into(w, e->hdr.pid, e->hdr.tid, t, task, PY_EVENT);
}

/* Another task's Python frames (the `state` iterator's; py_capture_of), and the asyncio task
 * it runs (py_task). */
static __always_inline void capture_python_of(struct stacks_event *e, struct task_struct *t,
					      struct task_struct *task)
{
	struct py_walk w = {};
	__u64 tstate = py_capture_of(e, t, task, &w);
	if (tstate)
		py_task(&w, tstate, PY_LIMIT_EVENT);
}

/* The current thread's Python frames (py_capture_of), and the asyncio task it runs (py_task). */
static __always_inline void capture_python(struct stacks_event *e)
{
	struct py_walk w = {};
	__u64 tstate = py_capture_of(e, bpf_get_current_task_btf(), NULL, &w);
	if (tstate)
		py_task(&w, tstate, PY_LIMIT_EVENT);
}

/* After a `d` stack's registers (at frame slot `at` of scratch record `e`) and stack copy:
 * the current thread's Python frames (the registers' py_frames of them, counted in uwindow;
 * see py_walk_into). */
static __always_inline void capture_python_room(struct stacks_event *e, __u32 at)
{
	at &= 255;
	struct stacks_uregs *ur = (struct stacks_uregs *)&e->frames[at];
	__u64 copied = ur->copied;
	if (copied > STACKS_UWINDOW_MAX)
		return;
	ur->py_frames = 0;
	struct py_walk w = {
		.e = e,
		.count = &ur->py_frames,
		.base = offsetof(struct stacks_event, frames) + (__u64)at * 8 +
			sizeof(struct stacks_uregs) + copied,
	};
	__u64 tstate =
		py_walk_into(&w, e->hdr.pid, e->hdr.tid, bpf_get_current_task_btf(), NULL, PY_ROOM);
	if (tstate)
		py_task(&w, tstate, PY_LIMIT_ROOM);
	e->hdr.uwindow += ur->py_frames * STACKS_UFRAME_SIZE;
}

/* Another task's (thread `tid` of process `pid`) Python frames and the asyncio task it runs,
 * walked into the one py_buf before its `d` stack is copied (py_put_after_copy puts them after
 * the copy): the frames written. A global function, checked once on its own: `state:d`'s
 * program, with its copy's many outcomes, is at the verifier's limit. */
__noinline int py_walk_apart_of(struct task_struct *task __arg_trusted, __u32 pid, __u32 tid)
{
	__u32 zero = 0;
	struct py_buf *b = bpf_map_lookup_elem(&py_state_buf, &zero);
	if (!b || !task)
		return 0;
	b->n = 0;
	struct py_walk w = {
		.e = (struct stacks_event *)b,
		.count = &b->n,
		.base = offsetof(struct py_buf, f),
	};
	__u64 tstate = py_walk_into(&w, pid, tid, task, task, PY_BUF);
	struct py_task_seen seen = { .switches = w.switches };
	__u32 n = b->n;
	if (tstate && n < STACKS_PY_MAX_FRAMES + 2 &&
	    !py_running_task_of(w.py, task, tstate, &seen)) {
		py_task_frame(&b->f[n], seen.task, seen.name);
		b->n = n + 1;
	}
	return b->n;
}

/* The frames py_walk_apart_of walked for record `e`'s thread `task`: the buffer, or NULL when
 * it runs no Python. */
static __always_inline struct py_buf *py_walk_apart(struct stacks_event *e, struct task_struct *task)
{
	__u32 zero = 0;
	if (!py_walk_apart_of(task, e->hdr.pid, e->hdr.tid))
		return NULL;
	return bpf_map_lookup_elem(&py_state_buf, &zero);
}

/* The frames `b` walked apart, after the `d` stack's registers (at frame slot `at` of scratch
 * record `e`) and stack copy. */
static __always_inline void py_put_after_copy(struct stacks_event *e, __u32 at, struct py_buf *b)
{
	at &= 255;
	struct stacks_uregs *ur = (struct stacks_uregs *)&e->frames[at];
	ur->py_frames = 0;
	__u64 copied = ur->copied;
	__u32 n = b->n;
	if (copied > STACKS_UWINDOW_MAX || n > STACKS_PY_MAX_FRAMES + 2)
		return;
	__u64 off = offsetof(struct stacks_event, frames) + (__u64)at * 8 +
		    sizeof(struct stacks_uregs) + copied;
	__u32 bytes = n * STACKS_UFRAME_SIZE;
	asm volatile("" : "+r"(off));
	asm volatile("" : "+r"(bytes));
	if (off > PY_LIMIT_ROOM - sizeof(b->f) || !bytes || bytes > sizeof(b->f))
		return;
	if (bpf_probe_read_kernel((__u8 *)e + off, bytes, b->f))
		return;
	ur->py_frames = n;
	e->hdr.uwindow += bytes;
}
