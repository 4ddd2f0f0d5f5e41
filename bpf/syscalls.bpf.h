/* syscalls.bpf.h — system calls and the files and sockets they name, read by several kinds (vfs,
 * net, state): this architecture's numbers of the calls `vfs` traces, a descriptor's file and
 * path, a socket's addresses. Included by common.bpf.h. */

/* System call numbers of the calls `vfs` traces, for this architecture. The syscalls:*
 * tracepoints need tracefs to attach; the raw sys_enter/sys_exit tracepoints attach by name
 * through BTF (tp_btf) and see every call, so the number picks ours. */
#if defined(__TARGET_ARCH_arm64)
#define NR_read 63
#define NR_write 64
#define NR_readv 65
#define NR_writev 66
#define NR_pread64 67
#define NR_pwrite64 68
#define NR_preadv 69
#define NR_pwritev 70
#define NR_preadv2 286
#define NR_pwritev2 287
#define NR_mmap 222
#define SYSCALL_ARG0_FIELD regs[0]
#define SYSCALL_ARG2_FIELD regs[2]
#define SYSCALL_ARG3_FIELD regs[3]
#define SYSCALL_NR_FIELD syscallno
#else
#define NR_read 0
#define NR_write 1
#define NR_pread64 17
#define NR_pwrite64 18
#define NR_readv 19
#define NR_writev 20
#define NR_preadv 295
#define NR_pwritev 296
#define NR_preadv2 327
#define NR_pwritev2 328
#define NR_mmap 9
#define SYSCALL_ARG0_FIELD di
#define SYSCALL_ARG2_FIELD dx
#define SYSCALL_ARG3_FIELD r10
#define SYSCALL_NR_FIELD orig_ax
#endif

/* The traced call a system call number stands for, or -1. */
static __always_inline int vfs_call_of(long nr)
{
	switch (nr) {
	case NR_read: return STACKS_VFS_READ;
	case NR_write: return STACKS_VFS_WRITE;
	case NR_pread64: return STACKS_VFS_PREAD64;
	case NR_pwrite64: return STACKS_VFS_PWRITE64;
	case NR_readv: return STACKS_VFS_READV;
	case NR_writev: return STACKS_VFS_WRITEV;
	case NR_preadv: return STACKS_VFS_PREADV;
	case NR_pwritev: return STACKS_VFS_PWRITEV;
	case NR_preadv2: return STACKS_VFS_PREADV2;
	case NR_pwritev2: return STACKS_VFS_PWRITEV2;
	default: return -1;
	}
}

/* Path walks: names read up to the root (path_complete when it was reached). */
#define PATH_MAX_COMPONENTS 12
#define NAME_READ 64

/* The path of dentry `d` under mount `vmnt` (kernel addresses) into v->path, as file_path. */
static __always_inline void dentry_path(struct stacks_file *v, struct dentry *d,
					struct vfsmount *vmnt)
{
	struct mount *mnt = container_of(vmnt, struct mount, mnt);
	__u32 off = 0;

	for (int i = 0; i < PATH_MAX_COMPONENTS + 4; i++) {
		struct dentry *parent = BPF_CORE_READ(d, d_parent);
		struct dentry *mnt_root = BPF_CORE_READ(mnt, mnt.mnt_root);
		if (d == mnt_root || d == parent) {
			struct mount *up = BPF_CORE_READ(mnt, mnt_parent);
			if (up == mnt || !up) {
				v->path_complete = 1;
				break;
			}
			d = BPF_CORE_READ(mnt, mnt_mountpoint);
			mnt = up;
			continue;
		}
		if (off >= STACKS_STR_LEN)
			break;
		const unsigned char *name = BPF_CORE_READ(d, d_name.name);
		/* Reads may run past path into the frames area, which is written later. */
		long n = bpf_probe_read_kernel_str(&v->path[off & (STACKS_STR_LEN - 1)], NAME_READ,
						   name);
		if (n <= 0)
			break;
		off += n;
		d = parent;
	}
	v->path_len = off < STACKS_STR_LEN ? off : STACKS_STR_LEN;
}

/* The file's path into v->path (see struct stacks_file). */
static __always_inline void file_path(struct stacks_file *v, struct file *f)
{
	dentry_path(v, BPF_CORE_READ(f, f_path.dentry), BPF_CORE_READ(f, f_path.mnt));
}

/* The file of descriptor `fd` in `task`'s fd table (a BTF pointer: plain loads, one helper
 * call for the table's slot, whose index the verifier does not let a BTF pointer take), or
 * NULL. */
static __always_inline struct file *fd_file(struct task_struct *task, int fd)
{
	struct files_struct *files = task->files;
	if (!files || fd < 0)
		return NULL;
	struct fdtable *fdt = files->fdt;
	if (!fdt || (unsigned int)fd >= fdt->max_fds)
		return NULL;
	struct file **fds = NULL;
	struct file *f = NULL;
	bpf_probe_read_kernel(&fds, sizeof(fds), &fdt->fd);
	if (!fds || bpf_probe_read_kernel(&f, sizeof(f), &fds[fd]))
		return NULL;
	return f;
}

/* `v` names no file (yet): no inode, type, path, dentry or mount. */
static __always_inline void file_none(struct stacks_file *v)
{
	v->inode = 0;
	v->file_type = STACKS_FILE_NONE;
	v->path_len = 0;
	v->path_complete = 0;
	v->dentry = 0;
	v->mnt = 0;
}

/* File `f`: its inode, type, dentry and mount into `v`, no path. */
static __always_inline void file_fill(struct stacks_file *v, struct file *f)
{
	/* Read-only BTF view of the file: plain loads, not a helper call per field. */
	struct file *file = bpf_core_cast(f, struct file);
	struct inode *ino = file->f_inode;
	if (ino) {
		v->inode = ino->i_ino;
		v->file_type = (ino->i_mode & S_IFMT) >> S_IFMT_SHIFT;
	}
	v->dentry = (__u64)file->f_path.dentry;
	v->mnt = (__u64)file->f_path.mnt;
}

/* Descriptor `fd` of `task`'s fd table: its inode, type, dentry and mount into `v`, no path
 * (all left empty when it names no file). Returns the file, or NULL. */
static __always_inline struct file *file_of(struct stacks_file *v, struct task_struct *task,
					    int fd)
{
	file_none(v);
	v->path[0] = 0;
	struct file *f = fd_file(task, fd);
	if (!f)
		return NULL;
	file_fill(v, f);
	return f;
}

/* Descriptor `fd` of `task`'s fd table: its inode, type and path into `v` (left empty when it
 * names no file). Returns the file, or NULL. */
static __always_inline struct file *file_info(struct stacks_file *v, struct task_struct *task,
					      int fd)
{
	struct file *f = file_of(v, task, fd);
	if (f)
		file_path(v, f);
	return f;
}

/* Paths already sent (their walk is the most costly part of a record: ~20 helper calls), by
 * `vfs` records and `state` rows: (dentry, mnt) -> inode and path generation. A record of a
 * file found here with the same inode, in the current generation, is sent without its path
 * (STACKS_PATH_SAME); user space keeps the paths it was sent, and starts a new generation
 * (path_gen, written by it) when it lets them go. */
struct path_key {
	__u64 dentry;
	__u64 mnt;
};

struct path_seen_val {
	__u64 inode;
	__u32 gen;
	__u32 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 8192);
	__type(key, struct path_key);
	__type(value, struct path_seen_val);
} path_seen SEC(".maps");

volatile __u32 path_gen = 0;

/* The file of `fd` into `v` (as file_info), its path walked only when not sent before
 * (`*walked`: record it with file_path_sent once the record is sent). Returns the file, or
 * NULL. */
static __always_inline struct file *file_info_once(struct stacks_file *v, struct task_struct *task,
						   int fd, bool *walked)
{
	*walked = false;
	struct file *f = file_of(v, task, fd);
	if (!f)
		return NULL;
	struct path_key k = { .dentry = v->dentry, .mnt = v->mnt };
	struct path_seen_val *seen = bpf_map_lookup_elem(&path_seen, &k);
	if (seen && seen->inode == v->inode && seen->gen == path_gen) {
		v->path_complete = STACKS_PATH_SAME;
		return f;
	}
	file_path(v, f);
	*walked = true;
	return f;
}

/* The path of `v` was sent: later records of the file need not walk it. */
static __always_inline void file_path_sent(struct stacks_file *v)
{
	struct path_key k = { .dentry = v->dentry, .mnt = v->mnt };
	struct path_seen_val val = { .inode = v->inode, .gen = path_gen };
	bpf_map_update_elem(&path_seen, &k, &val, BPF_ANY);
}

/* The family, protocol and addresses of `sk` into `a`; false (nothing written) for a socket
 * that is not TCP or UDP over IPv4 or IPv6. */
static __always_inline bool sock_addrs(struct sock *sk, __u32 *family, __u32 *protocol,
				       struct stacks_net_addrs *a)
{
	__u16 fam = sk->__sk_common.skc_family;
	if (fam != AF_INET && fam != AF_INET6)
		return false;
	__u16 proto = sk->sk_protocol;
	if (proto != IPPROTO_TCP && proto != IPPROTO_UDP)
		return false;
	*family = fam;
	*protocol = proto;
	__builtin_memset(a, 0, sizeof(*a));
	a->local_port = sk->__sk_common.skc_num;
	a->remote_port = bpf_ntohs(sk->__sk_common.skc_dport);
	if (fam == AF_INET) {
		__u32 l = sk->__sk_common.skc_rcv_saddr;
		__u32 r = sk->__sk_common.skc_daddr;
		__builtin_memcpy(a->local, &l, 4);
		__builtin_memcpy(a->remote, &r, 4);
	} else {
		BPF_CORE_READ_INTO(&a->local, sk, __sk_common.skc_v6_rcv_saddr.in6_u.u6_addr8);
		BPF_CORE_READ_INTO(&a->remote, sk, __sk_common.skc_v6_daddr.in6_u.u6_addr8);
	}
	return true;
}
