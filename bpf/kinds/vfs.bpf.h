/* kinds/vfs.bpf.h — the `vfs` event: read/write-family system calls from entry to exit, with the
 * file; summed in the kernel while the IO ring buffer is backed up (aggregate.bpf.h). Included
 * by stacks.bpf.c after common.bpf.h. */
#pragma once

/* Tunables, set by user space before load. */
const volatile __u32 vfs_stacks = 0; /* STACKS_WANT_* */

/* ---- File reads and writes ---------------------------------------------------------- */

/* Per-thread system call in progress (vfs). */
struct vfs_call {
	__u64 ts;
	__s32 fd;
	__u32 call;
};

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct vfs_call);
} vfs_store SEC(".maps");

SEC("tp_btf/sys_enter")
int BPF_PROG(vfs_enter, struct pt_regs *regs, long id)
{
	int call = vfs_call_of(id);
	if (call < 0)
		return 0;
	struct task_struct *task = bpf_get_current_task_btf();
	/* A thread with this storage is a target (it is created only for one, and a process
	 * stays a target while it lives): its later calls skip the target lookup, a hash lookup.
	 * Not with cgroup targets, which a thread may leave. */
	struct vfs_call *c = cgroup_count ? NULL : bpf_task_storage_get(&vfs_store, task, 0, 0);
	if (!c) {
		if (!current_is_target())
			return 0;
		c = bpf_task_storage_get(&vfs_store, task, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
		if (!c) {
			count_drop(STACKS_DROP_VFS_STORAGE);
			return 0;
		}
	}
	c->ts = bpf_ktime_get_boot_ns();
	c->fd = (__s32)regs->SYSCALL_ARG0_FIELD;
	c->call = call;
	return 0;
}

SEC("tp_btf/sys_exit")
int BPF_PROG(vfs_exit, struct pt_regs *regs, long ret)
{
	if (vfs_call_of(regs->SYSCALL_NR_FIELD) < 0)
		return 0;
	struct task_struct *task = bpf_get_current_task_btf();
	struct vfs_call *c = bpf_task_storage_get(&vfs_store, task, 0, 0);
	if (!c || !c->ts)
		return 0;
	__u64 now = bpf_ktime_get_boot_ns();
	if (agg_now()) {
		struct stacks_agg_key k = {};
		__u64 id = bpf_get_current_pid_tgid();
		struct file *f = fd_file(task, c->fd);
		k.kind = STACKS_EV_VFS;
		k.pid = id >> 32;
		k.tid = (__u32)id;
		k.op = c->call;
		k.error = ret < 0 ? (__s32)-ret : 0;
		k.fd = c->fd;
		k.inode = f ? BPF_CORE_READ(f, f_inode, i_ino) : 0;
		k.latency_log2 = log2_u64(now - c->ts);
		if (agg_add(ctx, &k, vfs_stacks, ret > 0 ? ret : 0, now - c->ts, c->ts, c->fd)) {
			c->ts = 0;
			return 0;
		}
	}
	struct stacks_event *e = scratch_for(SCRATCH_TASK);
	if (!e) {
		c->ts = 0;
		return 0;
	}
	fill_hdr(&e->hdr, STACKS_EV_VFS, task, c->ts); /* a call's record is timed at its entry */
	struct stacks_vfs *v = &e->info.vfs;
	v->latency_ns = now - c->ts;
	v->bytes = ret > 0 ? ret : 0;
	v->fd = c->fd;
	v->error = ret < 0 ? (__s32)-ret : 0;
	v->syscall = c->call;
	c->ts = 0;
	bool walked;
	file_info_once(&v->file, task, v->fd, &walked);
	read_span(&e->hdr.span);
	capture_stacks_d(ctx, e, vfs_stacks);
	if (submit_room(e) && walked)
		file_path_sent(&v->file);
	return 0;
}
