/* kinds/lifecycle.bpf.h — exec, fork and exit of the traced processes, always recorded: targets
 * follow forks and names matched at exec (with --cgroup, the cgroups decide). Included by stacks.bpf.c after common.bpf.h. */

/* ---- Process lifecycle -------------------------------------------------------------- */

/* An exit hands over what the off-CPU and RSS kinds still hold for the task (off_cpu_exit,
 * rss_exit: this file is included after theirs). */

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

	if (cgroup_count ? !in_target_cgroups(p)
			 : !trace_all && !bpf_map_lookup_elem(&targets, &tgid))
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
	bpf_map_delete_elem(&maps_read, &tgid);
	return 0;
}

/* A process maps something new (every mmap without MAP_FIXED passes here, in the mapping
 * process; a library's segments are placed in such a reservation): its user frames are
 * resolved here again until user space has read its map anew (see maps_read). Loaded only
 * with user stacks by frame pointers. */
SEC("tp_btf/vm_unmapped_area")
int BPF_PROG(on_new_mapping, unsigned long addr, struct vm_unmapped_area_info *info)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	if (bpf_map_lookup_elem(&maps_read, &tgid))
		bpf_map_delete_elem(&maps_read, &tgid);
	return 0;
}
