/* kinds/lifecycle.bpf.h — exec, fork and exit of the traced processes, always recorded: targets
 * follow forks and names matched at exec (with --cgroup, the cgroups decide); the exit of a
 * process with `d` stacks carries its exit snapshot. Included by stacks.bpf.c after
 * common.bpf.h. */
#pragma once
#include "rss.bpf.h"
#include "switch.bpf.h"

/* ---- Process lifecycle -------------------------------------------------------------- */

/* An exit hands over what the off-CPU and RSS kinds still hold for the task (off_cpu_exit,
 * rss_thread_exit, rss_exit: this file is included after theirs). */

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

	if (cgroup_count) {
		if (!in_target_cgroups(p))
			return 0;
	} else if (!trace_all && !bpf_map_lookup_elem(&targets, &tgid)) {
		char comm[STACKS_COMM_LEN] = {};
		BPF_CORE_READ_STR_INTO(&comm, p, comm);
		if (!bpf_map_lookup_elem(&target_comms, comm))
			return 0;
		bpf_map_update_elem(&targets, &tgid, &one, BPF_ANY);
	}
	/* A new image: where its thread context is (if anywhere) is for user space to find, and
	 * its memory map to read. */
	bpf_map_delete_elem(&span_procs, &tgid);
	bpf_map_delete_elem(&maps_read, &tgid);
	bpf_map_delete_elem(&exit_snapshot, &tgid);
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
	__u32 ptgid = parent->tgid;
	__u32 ctgid = child->tgid;
	__u8 one = 1;

	if (ptgid == ctgid)
		return 0; /* a new thread, not a process */
	if (cgroup_count) {
		if (!in_target_cgroups(parent))
			return 0;
	} else if (!trace_all) {
		if (!bpf_map_lookup_elem(&targets, &ptgid))
			return 0;
		if (!follow_forks)
			return 0;
		bpf_map_update_elem(&targets, &ctgid, &one, BPF_ANY);
	}
	/* The child runs the parent's image: its thread context is where the parent's is. */
	struct stacks_span_proc *sp = span_procs_any ? bpf_map_lookup_elem(&span_procs, &ptgid) : NULL;
	if (sp)
		bpf_map_update_elem(&span_procs, &ctgid, sp, BPF_ANY);
	struct stacks_event *e = lifecycle(STACKS_EV_FORK, parent);
	if (!e)
		return 0;
	e->info.fork.child_pid = ctgid;
	submit_now(e);
	return 0;
}

/* ---- Exit snapshots ------------------------------------------------------------------ */

/* The task VMA iterator (open-coded, for tracing programs; 6.7+, and this program needs 6.16). */
extern int bpf_iter_task_vma_new(struct bpf_iter_task_vma *it, struct task_struct *task,
				 __u64 addr) __weak __ksym;
extern struct vm_area_struct *bpf_iter_task_vma_next(struct bpf_iter_task_vma *it) __weak __ksym;
extern void bpf_iter_task_vma_destroy(struct bpf_iter_task_vma *it) __weak __ksym;

#define VM_EXEC_BIT 0x4
#define VMA_PAGE_SHIFT 12

/* A mapping of an exit snapshot as its path walk writes it: with room for the walk's reads past
 * the path (into the next mapping, which is written later). */
struct exit_map_slot {
	struct stacks_exit_map m;
	__u8 spill[NAME_READ];
};

/* The path of the file of slot `s` (its walk's dentry and mount are set). A global function:
 * the verifier checks it once, not at every mapping of the snapshot's loop. */
__noinline int exit_map_path(struct exit_map_slot *s)
{
	if (!s)
		return 0;
	dentry_path(&s->m.file, (struct dentry *)s->m.file.dentry,
		    (struct vfsmount *)s->m.file.mnt);
	return 0;
}

/* The exit snapshot of the current task's process (struct stacks_exit) into exit record `r`,
 * after its header: its executable mappings of files and the vdso, and its main stack, in
 * address order; their count in r->e.info.exit.maps. Runs at sched_process_exit, which the
 * kernel fires before it takes the memory map down (6.16+).
 *
 * The count lives in the record, not in a register: read back from map memory at each
 * mapping, it is a value the verifier does not track, so the loop's states converge after a
 * pass or two instead of once per count (a register counter made the verifier go through the
 * body 128 times, ~0.5 s of loading). */
static __always_inline void exit_snapshot_of(struct stacks_event_room *r)
{
	volatile __u32 *count = &r->e.info.exit.maps;
	*count = 0;
	struct task_struct *task = bpf_get_current_task_btf();
	struct mm_struct *mm = task->mm;
	if (!mm)
		return;
	__u64 stack = mm->start_stack;
	__u64 vdso = 0;
#if defined(__TARGET_ARCH_x86)
	vdso = (__u64)mm->context.vdso;
#endif
	struct vm_area_struct *vma;
	bpf_for_each(task_vma, vma, task, 0) {
		__u64 start = vma->vm_start, end = vma->vm_end;
		struct file *f = vma->vm_file;
		__u32 what;
		if (!(vma->vm_flags & VM_EXEC_BIT)) {
			if (stack < start || stack >= end)
				continue;
			what = STACKS_MAP_STACK;
		} else if (f) {
			what = STACKS_MAP_FILE;
		} else if (start == vdso) {
			what = STACKS_MAP_VDSO;
		} else {
			continue; /* anonymous code (JIT): no file to unwind with */
		}
		__u32 n = *count;
		if (n >= STACKS_EXIT_MAPS_MAX)
			break;
		struct exit_map_slot *s =
			(void *)((__u8 *)r->e.frames + n * sizeof(struct stacks_exit_map));
		s->m.start = start;
		s->m.end = end;
		s->m.offset = (__u64)vma->vm_pgoff << VMA_PAGE_SHIFT;
		s->m.what = what;
		s->m.dev = 0;
		struct stacks_file *v = &s->m.file;
		file_none(v);
		if (what == STACKS_MAP_FILE) {
			struct inode *ino = f->f_inode;
			if (ino) {
				v->inode = ino->i_ino;
				s->m.dev = ino->i_sb->s_dev;
			}
			v->dentry = (__u64)f->f_path.dentry;
			v->mnt = (__u64)f->f_path.mnt;
			exit_map_path(s);
		}
		*count = n + 1;
	}
}
_Static_assert(STACKS_EVENT_HEADER_SIZE + STACKS_EXIT_MAPS_MAX * sizeof(struct stacks_exit_map) +
			       NAME_READ <=
		       sizeof(struct stacks_event_room),
	       "an exit snapshot fits a scratch record, with room for its last path walk");

/* Send exit record `e` (a scratch record) with its process's exit snapshot. */
static __always_inline void submit_exit_snapshot(struct stacks_event *e)
{
	exit_snapshot_of((struct stacks_event_room *)e);
	__u32 n = e->info.exit.maps;
	if (n > STACKS_EXIT_MAPS_MAX)
		n = STACKS_EXIT_MAPS_MAX;
	e->info.exit.maps = n;
	__u64 size = STACKS_EVENT_HEADER_SIZE + (__u64)n * sizeof(struct stacks_exit_map);
	if (ring_output(ring_of(STACKS_EV_EXIT), e, size, BPF_RB_FORCE_WAKEUP))
		count_drop(STACKS_DROP_RINGBUF + STACKS_EV_EXIT);
}

/* The exit of task `p` (its process's, when `group_dead`): with `snapshot`, the exit record
 * of a process marked in exit_snapshot carries its exit snapshot. */
static __always_inline int process_exit(void *ctx, struct task_struct *p, bool group_dead,
					bool snapshot)
{
	__u32 tgid = BPF_CORE_READ(p, tgid);

	if (cgroup_count ? !in_target_cgroups(p)
			 : !trace_all && !bpf_map_lookup_elem(&targets, &tgid))
		return 0;
	off_cpu_exit(ctx, p);
	rss_thread_exit(p);
	if (!group_dead)
		return 0;
	rss_exit(tgid);
	/* Its `d` stacks may wait for its map: the snapshot goes with the exit record, so the
	 * recorder has it by the time it learns of the exit. */
	if (snapshot) {
		snapshot = bpf_map_lookup_elem(&exit_snapshot, &tgid) != NULL;
		if (snapshot)
			bpf_map_delete_elem(&exit_snapshot, &tgid);
	}
	struct stacks_event *e = lifecycle(STACKS_EV_EXIT, p);
	if (e) {
		e->info.exit.exit_code = BPF_CORE_READ(p, exit_code);
		e->info.exit.maps = 0;
		if (snapshot)
			submit_exit_snapshot(e);
		else
			submit_now(e);
	}
	if (!trace_all)
		bpf_map_delete_elem(&targets, &tgid);
	bpf_map_delete_elem(&span_procs, &tgid);
	bpf_map_delete_elem(&maps_read, &tgid);
	return 0;
}

/* Exactly one of the two exit programs is loaded: on_exit_snapshot when some event takes `d`
 * stacks (only they mark processes in exit_snapshot), on_exit otherwise, which has none of the
 * snapshot's code for the verifier to go through at every start of the recorder. */
SEC("tp_btf/sched_process_exit")
int BPF_PROG(on_exit, struct task_struct *p, bool group_dead)
{
	return process_exit(ctx, p, group_dead, false);
}

SEC("tp_btf/sched_process_exit")
int BPF_PROG(on_exit_snapshot, struct task_struct *p, bool group_dead)
{
	return process_exit(ctx, p, group_dead, true);
}

/* mmap(2)'s prot and flags bits (the same on x86-64 and arm64). */
#define STACKS_PROT_EXEC 0x4
#define STACKS_MAP_ANONYMOUS 0x20

/* Whether the mapping being placed is one no user frame can be in: anonymous memory that
 * cannot run, made by the mmap(2) call the task is in (its arguments are still in the
 * registers it entered with) — allocators' chunks and arenas, which a busy process maps and
 * unmaps all the time. Anything else may hold code: a file mapping (the dynamic loader
 * reserves a library's range with its first segment's protection, often read-only, then maps
 * the other segments into it with MAP_FIXED, which does not pass here), an executable one, a
 * PROT_NONE reservation (glibc's for a library aligned beyond the page size), a process whose
 * readable memory can run (READ_IMPLIES_EXEC), and every other call that gets here (mremap,
 * shmat). */
static __always_inline bool maps_no_code(void)
{
	struct task_struct *task = bpf_get_current_task_btf();
	struct pt_regs *r = (struct pt_regs *)bpf_task_pt_regs(task);
	if (!r || (long)r->SYSCALL_NR_FIELD != NR_mmap)
		return false;
	__u64 prot = r->SYSCALL_ARG2_FIELD, flags = r->SYSCALL_ARG3_FIELD;
	return (flags & STACKS_MAP_ANONYMOUS) && prot && !(prot & STACKS_PROT_EXEC) &&
	       !(task->personality & READ_IMPLIES_EXEC);
}

/* A process maps something new (every mmap without MAP_FIXED passes here, in the mapping
 * process; a library's segments are placed in such a reservation): its user frames are
 * resolved here again until user space has read its map anew (see maps_read) — but for
 * anonymous memory that cannot run (maps_no_code), which no frame can be in: a process that
 * keeps allocating would otherwise have its map read again every 20 ms. Loaded only with
 * user stacks by frame pointers. */
SEC("tp_btf/vm_unmapped_area")
int BPF_PROG(on_new_mapping, unsigned long addr, struct vm_unmapped_area_info *info)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	if (bpf_map_lookup_elem(&maps_read, &tgid) && !maps_no_code())
		bpf_map_delete_elem(&maps_read, &tgid);
	return 0;
}
