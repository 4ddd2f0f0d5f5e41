/* python.bpf.h — Python frames of CPython processes (py_procs): at a CPU sample of the thread
 * holding the GIL, the interpreter's frame chain from the thread state, appended to the record
 * after the native user frames (struct stacks_pyframe). User space reads the code objects
 * and interleaves the frames with the native ones. Included by common.bpf.h. */

_Static_assert(sizeof(struct stacks_pyframe) == STACKS_UFRAME_SIZE,
	       "a Python frame takes a user frame's room");

/* CPython processes to read (tgid -> where and how), filled by user space. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, struct stacks_py_proc);
} py_procs SEC(".maps");

/* `idx` (checked by the caller to leave a user frame's room in e->frames) masked so the
 * verifier sees it in the scratch record (whose room for a `d` stack's copy follows the frames),
 * behind a barrier the compiler cannot see through (it would drop the mask). */
static __always_inline __u64 py_bound(__u64 idx)
{
	asm volatile("" : "+r"(idx));
	return idx & 1023;
}

/* The marker of a failure or truncation at user frame slot `slot` of `e` (k kernel frames
 * before the user frames); false when there is no room. */
static __always_inline bool py_mark(struct stacks_event *e, __u32 k, __u32 slot, __u32 why)
{
	__u64 idx = (__u64)k + (__u64)slot * (STACKS_UFRAME_SIZE / 8);
	if (slot >= STACKS_MAX_DEPTH || idx > STACKS_FRAMES_SIZE / 8 - STACKS_UFRAME_SIZE / 8)
		return false;
	struct stacks_pyframe *f = (struct stacks_pyframe *)&e->frames[py_bound(idx)];
	f->status = STACKS_UFRAME_PYTHON_FAIL;
	f->flags = why;
	f->code = 0;
	f->qualname = 0;
	f->prev_instr = 0;
	return true;
}

/* Append the current thread's Python frames (innermost first) to `e`'s user stack, or the
 * marker saying why there are none: for processes in py_procs, for user stacks of build-id
 * frames (not `d` stacks). */
static __always_inline void capture_python(struct stacks_event *e)
{
	if (e->hdr.uwindow || e->hdr.ustack_len < 0)
		return;
	__u32 tgid = e->hdr.pid;
	struct stacks_py_proc *py = bpf_map_lookup_elem(&py_procs, &tgid);
	if (!py)
		return;
	__u32 k = e->hdr.kstack_len > 0 ? (__u32)e->hdr.kstack_len : 0;
	__u32 u = (__u32)e->hdr.ustack_len;
	if (k > STACKS_MAX_DEPTH)
		k = STACKS_MAX_DEPTH;
	if (u > STACKS_MAX_DEPTH)
		u = STACKS_MAX_DEPTH;
	__u64 tstate = 0, frame = 0, cframe = 0, tid = 0;
	__u32 why = 0;
	if (bpf_probe_read_user(&tstate, sizeof(tstate), (void *)py->tstate_current))
		why = STACKS_PY_READ;
	else if (!tstate)
		why = STACKS_PY_NO_TSTATE;
	else if (bpf_probe_read_user(&tid, sizeof(tid), (void *)(tstate + py->native_tid)))
		why = STACKS_PY_READ;
	else if (tid != e->hdr.tid)
		why = STACKS_PY_NO_GIL;
	else if (bpf_probe_read_user(&cframe, sizeof(cframe), (void *)(tstate + py->cframe)) ||
		 !cframe ||
		 bpf_probe_read_user(&frame, sizeof(frame), (void *)(cframe + py->current_frame)))
		why = STACKS_PY_READ;
	__u32 n = 0;
	for (__u32 i = 0; i < STACKS_PY_MAX_FRAMES && !why && frame; i++) {
		__u32 slot = u + n;
		__u64 idx = (__u64)k + (__u64)slot * (STACKS_UFRAME_SIZE / 8);
		/* One slot is kept for a truncation marker. */
		if (slot >= STACKS_MAX_DEPTH - 1 ||
		    idx > STACKS_FRAMES_SIZE / 8 - STACKS_UFRAME_SIZE / 8) {
			why = STACKS_PY_TRUNCATED;
			break;
		}
		struct stacks_pyframe *f = (struct stacks_pyframe *)&e->frames[py_bound(idx)];
		__u8 entry = 0;
		__u64 code = 0, instr = 0, prev = 0, qualname = 0;
		if (bpf_probe_read_user(&code, sizeof(code), (void *)(frame + py->code)) ||
		    bpf_probe_read_user(&instr, sizeof(instr), (void *)(frame + py->prev_instr)) ||
		    bpf_probe_read_user(&entry, sizeof(entry), (void *)(frame + py->is_entry)) ||
		    bpf_probe_read_user(&prev, sizeof(prev), (void *)(frame + py->previous)) ||
		    bpf_probe_read_user(&qualname, sizeof(qualname), (void *)(code + py->qualname))) {
			why = STACKS_PY_READ;
			break;
		}
		f->status = STACKS_UFRAME_PYTHON;
		f->flags = entry ? STACKS_PYFRAME_ENTRY : 0;
		f->code = code;
		f->qualname = qualname;
		f->prev_instr = instr;
		n++;
		frame = prev;
	}
	if (!why && frame)
		why = STACKS_PY_TRUNCATED;
	if (why && py_mark(e, k, u + n, why))
		n++;
	e->hdr.ustack_len = (__s32)(u + n);
}
