/* stacks.h — the one header shared by the BPF programs and stacks-record: the structs and
 * constants that cross the kernel/user boundary. Keep in sync with stacks-record/src/event.rs,
 * which checks the sizes at compile time. */
#ifndef STACKS_H
#define STACKS_H

#define STACKS_MAX_DEPTH 127
#define STACKS_COMM_LEN 16

/* Stack length value meaning "this stack was not requested" (real errors are -errno). */
#define STACKS_NOT_REQUESTED (-100000)

/* Which stacks an event wants (bit mask, per event kind). */
#define STACKS_WANT_USER 1
#define STACKS_WANT_KERNEL 2

enum stacks_event_kind {
	/* A CPU sample from the cpu-clock perf event. value = sampling period, ns. */
	STACKS_EV_PROFILE = 1,
	/* A traced process called exec (internal: user space drops its address caches). */
	STACKS_EV_EXEC = 2,
	/* A traced process's leader exited (internal bookkeeping). */
	STACKS_EV_EXIT = 3,
};

struct stacks_event {
	__u64 ts;          /* bpf_ktime_get_boot_ns() */
	__u64 value;       /* kind-specific weight */
	__u32 kind;        /* enum stacks_event_kind */
	__u32 pid;         /* tgid */
	__u32 tid;         /* thread id */
	__u32 cpu;
	__s32 kstack_len;  /* frames, -errno, or STACKS_NOT_REQUESTED */
	__s32 ustack_len;
	char comm[STACKS_COMM_LEN];   /* process name (thread group leader's comm) */
	char thread[STACKS_COMM_LEN]; /* thread name */
	__u64 kstack[STACKS_MAX_DEPTH];
	__u64 ustack[STACKS_MAX_DEPTH];
};

#endif /* STACKS_H */
