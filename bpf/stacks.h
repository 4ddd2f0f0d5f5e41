/* stacks.h — the one header shared by the BPF programs and stacks-record: the structs and
 * constants that cross the kernel/user boundary. Keep in sync with stacks-record/src/event.rs,
 * which checks the sizes at compile time. */
#ifndef STACKS_H
#define STACKS_H

#define STACKS_MAX_DEPTH 127
#define STACKS_COMM_LEN 16
#define STACKS_STR_LEN 128

/* Stack length value meaning "this stack was not requested" (real errors are -errno). */
#define STACKS_NOT_REQUESTED (-100000)

/* Which stacks an event wants (bit mask, per event kind). */
#define STACKS_WANT_USER 1
#define STACKS_WANT_KERNEL 2

enum stacks_event_kind {
	/* A CPU sample from the cpu-clock perf event. value = sampling period, ns. */
	STACKS_EV_PROFILE = 1,
	/* A traced process called exec. str = the file executed. */
	STACKS_EV_EXEC = 2,
	/* A traced process exited (its last thread). arg0 = exit code (wait(2) encoding). */
	STACKS_EV_EXIT = 3,
	/* A traced process forked. arg0 = the child's pid. */
	STACKS_EV_FORK = 4,
	/* An off-CPU interval: ts = switch-out, value = duration = ns off CPU, arg0 = state,
	 * arg1 = waker tid (0: none seen), stacks captured at switch-out. */
	STACKS_EV_SWITCH = 5,
	/* Off-CPU intervals shorter than the minimum, folded: ts = first one's switch-out,
	 * value = their total ns, count = how many, arg0 = state; no stacks. */
	STACKS_EV_SWITCH_FOLDED = 6,
	/* RSS growth: value = bytes grown since the previous row of this process, count = growth
	 * events covered, arg0 = counter (MM_FILEPAGES 0, MM_ANONPAGES 1, MM_SWAPENTS 2,
	 * MM_SHMEMPAGES 3), aux = resident bytes (file + anon + shmem). */
	STACKS_EV_RSS = 7,
	/* A block request completed: value = bytes, duration = issue → completion ns,
	 * arg0 = REQ_OP_*, aux = device (kernel dev_t); ids and stacks of the submitter. */
	STACKS_EV_BLOCK = 8,
	/* A read/write system call returned: value = bytes (0 on error), duration = ns in the call,
	 * arg0 = fd, arg1 = errno, flags = syscall (enum stacks_vfs_call) | file type << 8,
	 * aux = inode number, str = the file's name (dentry). */
	STACKS_EV_VFS = 9,
	/* A TCP/UDP send or receive: value = bytes (0 on error), arg1 = errno,
	 * flags = family | protocol << 8 | direction (0 send, 1 recv) << 16, net = addresses. */
	STACKS_EV_NET = 10,
};

/* Switch states (arg0 of switch events). */
enum stacks_state {
	STACKS_STATE_RUNNABLE = 0,
	STACKS_STATE_SLEEPING = 1,
	STACKS_STATE_UNINTERRUPTIBLE = 2,
	STACKS_STATE_IDLE = 3,
	STACKS_STATE_STOPPED = 4,
	STACKS_STATE_OTHER = 5,
	STACKS_STATE_COUNT = 6,
};

/* The file system calls traced by `vfs` (low byte of flags). */
enum stacks_vfs_call {
	STACKS_VFS_READ = 0,
	STACKS_VFS_WRITE = 1,
	STACKS_VFS_PREAD64 = 2,
	STACKS_VFS_PWRITE64 = 3,
	STACKS_VFS_READV = 4,
	STACKS_VFS_WRITEV = 5,
	STACKS_VFS_PREADV = 6,
	STACKS_VFS_PWRITEV = 7,
	STACKS_VFS_PREADV2 = 8,
	STACKS_VFS_PWRITEV2 = 9,
};

struct stacks_net_addrs {
	__u8 local[16];  /* IPv4 in the first 4 bytes, network order */
	__u8 remote[16];
	__u16 local_port; /* host order */
	__u16 remote_port;
};

/* One user frame as the kernel normalized it (struct bpf_stack_build_id): status 1 = build id
 * and file offset valid, 2 = only the address (ip) is known, 0 = empty. */
#define STACKS_UFRAME_SIZE 32

/* One record. Sent with bpf_ringbuf_output with only the frames used: the kernel stack's
 * kstack_len addresses (8 bytes each), then the user stack's ustack_len frames
 * (STACKS_UFRAME_SIZE bytes each, build id + file offset resolved by the kernel at capture
 * time, so a process that has exited by the time user space reads the record still
 * symbolizes), in `frames`. */
struct stacks_event {
	__u64 ts;          /* bpf_ktime_get_boot_ns() */
	__u64 value;       /* kind-specific weight */
	__u64 duration;    /* ns, kind-specific, 0 when not applicable */
	__u64 aux;         /* kind-specific */
	__u32 kind;        /* enum stacks_event_kind */
	__u32 pid;         /* tgid */
	__u32 tid;         /* thread id */
	__u32 cpu;
	__s32 kstack_len;  /* frames, -errno, or STACKS_NOT_REQUESTED */
	__s32 ustack_len;
	__s32 arg0;        /* kind-specific */
	__s32 arg1;        /* kind-specific */
	__u32 count;       /* events this record stands for (1 unless folded/sampled) */
	__u32 flags;       /* kind-specific */
	char comm[STACKS_COMM_LEN];   /* process name (thread group leader's comm) */
	char thread[STACKS_COMM_LEN]; /* thread name */
	union {
		char str[STACKS_STR_LEN];
		struct stacks_net_addrs net;
	} u;
	__u64 frames[STACKS_MAX_DEPTH + STACKS_MAX_DEPTH * STACKS_UFRAME_SIZE / 8];
};

/* Size of a record carrying no frames. */
#define STACKS_FRAMES_SIZE (STACKS_MAX_DEPTH * 8 + STACKS_MAX_DEPTH * STACKS_UFRAME_SIZE)
#define STACKS_EVENT_HEADER_SIZE (sizeof(struct stacks_event) - STACKS_FRAMES_SIZE)

#endif /* STACKS_H */
