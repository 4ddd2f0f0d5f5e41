/* stacks.h — the one header shared by the BPF programs and stacks-record: the structs and
 * constants that cross the kernel/user boundary. stacks-record decodes records through the
 * Rust types libbpf-cargo generates from these (the skeleton's `types` module) and checks its
 * sizes and offsets against them at compile time. */
#ifndef STACKS_H
#define STACKS_H

#define STACKS_MAX_DEPTH 127
#define STACKS_COMM_LEN 16
#define STACKS_STR_LEN 128

/* Stack length values that are no length (real errors are -errno): one enum, which user space
 * reads from the skeleton's types (the global `stack_len_sentinel` puts it in the BTF). */
enum stacks_stack_len {
	/* This stack was not requested. */
	STACKS_NOT_REQUESTED = -100000,
	/* A `state` record's: the same stack as this thread's previous `state` record (the thread
	 * has not run since, so its stacks were not captured again). */
	STACKS_SAME_STACKS = -100001,
	/* A `block` or `uring` record's user stack: its `d` user stack was sent apart, in the
	 * STACKS_EV_UWINDOW (block) or STACKS_EV_URING_USTACK (uring) record with the same request
	 * (sent when the request was submitted). */
	STACKS_USTACK_APART = -100002,
};

/* Which stacks an event wants (bit mask, per event kind). */
#define STACKS_WANT_USER 1
#define STACKS_WANT_KERNEL 2
/* With STACKS_WANT_USER: also copy the user registers and the top of the user stack, for the
 * recorder to unwind with the mapped files' CFI (`d`); the user frames are then the plain
 * addresses of the frame-pointer walk (8 bytes each), kept to continue a DWARF unwind. */
#define STACKS_WANT_DWARF 4

/* Most bytes of a thread's user stack copied for a `d` stack (from its stack pointer up). The
 * per-CPU scratch value that holds a record and its copy must stay under 32 KiB. */
#define STACKS_UWINDOW_MAX (24 * 1024)

/* The user registers of a `d` stack and how much of its stack follows them: the record's
 * last part, right after the user frames (struct stacks_header's uwindow). */
struct stacks_uregs {
	__u64 ip;
	__u64 sp;
	__u64 bp;
	__u32 copied;             /* bytes of the stack from sp, right after this struct */
	__u32 py_frames;          /* Python frames right after the copy (struct stacks_pyframe) */
};

/* What a record reports; its per-kind fields are the same-named member of `union stacks_info`. */
enum stacks_event_kind {
	/* A CPU sample from the cpu-clock perf event (info.profile). */
	STACKS_EV_PROFILE = 1,
	/* A traced process called exec (info.exec). */
	STACKS_EV_EXEC = 2,
	/* A traced process exited, its last thread (info.exit). */
	STACKS_EV_EXIT = 3,
	/* A traced process forked (info.fork). */
	STACKS_EV_FORK = 4,
	/* An off-CPU interval: ts = switch-out, stacks captured at switch-out (info.off_cpu). */
	STACKS_EV_SWITCH = 5,
	/* Off-CPU intervals shorter than the minimum, folded: ts = the first one's switch-out,
	 * header count = how many; no stacks (info.folded). */
	STACKS_EV_SWITCH_FOLDED = 6,
	/* RSS growth of a process: header count = growth events covered (info.rss). */
	STACKS_EV_RSS = 7,
	/* A block request completed; ids and stacks of the submitter (info.block). */
	STACKS_EV_BLOCK = 8,
	/* A read/write system call returned: ts = its entry (info.vfs). */
	STACKS_EV_VFS = 9,
	/* A TCP/UDP send or receive (info.net). */
	STACKS_EV_NET = 10,
	/* A thread's state at a sampling pass of the task iterator: ts = the pass's start
	 * (info.state). */
	STACKS_EV_STATE = 11,
	/* A probe named in -e was hit (info.probe); header count = hits this record stands for
	 * (more than 1 only for records user space made from the counting tables). */
	STACKS_EV_PROBE = 12,
	/* A traced thread entered or left a `tracing` span: tracing-stacks' USDT probe
	 * stacks_tracing:enter / stacks_tracing:exit (info.span_event); the span is the header's
	 * (the thread context points at it at both probes). */
	STACKS_EV_SPAN = 13,
	/* Not a row: the `d` user stack of a block request being submitted (info.uwindow), for
	 * the request's STACKS_EV_BLOCK record, which is sent at its completion. */
	STACKS_EV_UWINDOW = 14,
	/* A sampled allocation, or the free of a sampled pointer: libstacks_alloc.so's USDT
	 * probes stacks:alloc / stacks:free (info.alloc). */
	STACKS_EV_ALLOC = 15,
	/* A traced thread off CPU was woken after waiting at least the `switch` minimum: ts =
	 * the wakeup; the header is the waker's (a task), or names its context (pid 0, comm
	 * `[irq]`, `[softirq]`, `[timer]`), with the waker's stacks (info.wake). */
	STACKS_EV_WAKE = 16,
	/* An io_uring request of a traced submitter completed: ts = its submission; the header
	 * and stacks are the submitter's at submission (info.uring). */
	STACKS_EV_URING = 17,
	/* Not a row: the `d` user stack of an io_uring request's submitter at submission
	 * (info.uwindow), for the request's STACKS_EV_URING record, sent at its completion. */
	STACKS_EV_URING_USTACK = 18,
	/* One more than the last kind (at most STACKS_EV_ROOM). */
	STACKS_EV_COUNT,
};

/* Where a wakeup ran (struct stacks_wake). */
enum stacks_wake_context {
	STACKS_WAKE_TASK = 0,     /* a task: the header's thread */
	STACKS_WAKE_HARDIRQ = 1,  /* an interrupt handler */
	STACKS_WAKE_SOFTIRQ = 2,  /* a softirq (network receive, block completion, RCU…) */
	STACKS_WAKE_TIMER = 3,    /* a timer's callback (hrtimer or timer wheel): a sleep ended */
};

/* Room for record kinds (enum stacks_event_kind): the drop counters keep this many per-kind
 * counters per cause that is counted by kind, and kind_ring has one entry per kind.
 * stacks.bpf.c asserts every kind fits. */
#define STACKS_EV_ROOM 32

/* Why an event was not delivered: the index of the per-CPU `drops` counters, each cause its
 * own count. The causes counted by kind come first, each with STACKS_EV_ROOM counters (cause +
 * enum stacks_event_kind), then the others. */
enum stacks_drop {
	STACKS_DROP_RINGBUF = 0,            /* + kind: the ring buffer was full */
	/* Not a loss: events aggregated in the kernel (+ kind) because their ring buffer was
	 * backed up; they arrive as rows whose count covers them. */
	STACKS_DROP_AGGREGATED = STACKS_EV_ROOM,
	/* The aggregation table was full (+ kind): an event that could be neither sent (its ring
	 * buffer was full) nor aggregated. */
	STACKS_DROP_AGG_FULL = 2 * STACKS_EV_ROOM,
	/* A kind's table of events in flight or per process was full (+ kind): the in-flight
	 * block or io_uring request table, a per-process or per-thread RSS table. A kind counting
	 * this cause declares it in its registry entry (`drops`, stacks-stream's kinds table). */
	STACKS_DROP_MAP_FULL = 3 * STACKS_EV_ROOM,
	STACKS_DROP_SWITCH_STORAGE = 4 * STACKS_EV_ROOM, /* no task storage for a traced thread switching out */
	STACKS_DROP_VFS_STORAGE,            /* no task storage at a system call's entry */
	/* Not a loss: off-CPU time of switches the tracepoint did not report, accounted from the
	 * thread's CPU time and switch count (exact; counted for the summary). */
	STACKS_DROP_END_INFERRED,
	/* Every per-CPU probe record slot was in use (probes nested deeper than
	 * STACKS_PROBE_SLOTS on one CPU). */
	STACKS_DROP_PROBE_BUSY,
	/* Not a loss: hits of a counting probe sent as single rows because the count table was
	 * full or the stack table's slot for its stack held another stack. */
	STACKS_DROP_PROBE_UNCOUNTED,
	/* Not a loss: `d` stacks taken by frame pointers instead (no stack copy) because the ring
	 * buffer was over half full: a burst degrades stacks before it loses events. */
	STACKS_DROP_DWARF_FP,
	/* Not a loss: kernel stacks served from the cache of verified unwinds (kstack.bpf.h). */
	STACKS_DROP_KSTACK_CACHED,
	/* A kernel stack served from that cache that the kernel's unwind, re-checking one use in
	 * kstack_recheck, found different (the key is unwound every time after it). */
	STACKS_DROP_KSTACK_WRONG,
	/* Not a loss: re-checks of served entries that agreed with the kernel's unwind. */
	STACKS_DROP_KSTACK_AGREED,
	/* Not a loss: kernel stacks of kept off-CPU intervals served from that cache at their
	 * switch-in (the switch-out only noted where ctx was). */
	STACKS_DROP_KSTACK_LATE,
	/* Kernel stacks of kept off-CPU intervals whose switch-in found no entry held: unwound
	 * by the kernel there, without the frames in .sched.text. */
	STACKS_DROP_KSTACK_LATE_UNWOUND,
	/* Not a loss: with every use re-checked, switch-ins whose entry agreed with the unwind
	 * at the switch-out. */
	STACKS_DROP_KSTACK_LATE_AGREED,
	/* Not a loss: `block:n` requests kept in the in-flight table because their slot was held
	 * by another request (kinds/block.bpf.h). */
	STACKS_DROP_BLOCK_TABLED,
	/* A block request issued to its device whose completion no program saw: its request
	 * structure started a new request while the old one was still in flight to the recorder
	 * (kinds/block.bpf.h). Under CPU load the kernel ends some requests firing neither
	 * block_rq_complete nor block_io_done (perf's tracepoint events miss the same ones). */
	STACKS_DROP_BLOCK_UNSEEN,
	STACKS_DROP_FIXED_END,              /* past the last cause not counted by kind */
	STACKS_DROP_COUNT = 5 * STACKS_EV_ROOM,
};

/* The ring buffers: a kind's records go to its class's ring (rodata kind_ring, set by user
 * space from its registry), so a flood of IO or probe records never takes the room of CPU,
 * off-CPU and state samples. */
enum stacks_ring {
	STACKS_RING_SAMPLES = 0, /* profile, switch, state, process lifecycle */
	STACKS_RING_IO = 1,      /* vfs, net, block, rss */
	STACKS_RING_PROBES = 2,  /* probes, spans */
	STACKS_RING_COUNT = 3,
};

/* Why a thread was off CPU. */
enum stacks_state {
	STACKS_STATE_RUNNABLE = 0,
	STACKS_STATE_SLEEPING = 1,
	STACKS_STATE_UNINTERRUPTIBLE = 2,
	STACKS_STATE_IDLE = 3,
	STACKS_STATE_STOPPED = 4,
	STACKS_STATE_OTHER = 5,
	STACKS_STATE_COUNT = 6,
	/* On a CPU (only `state` samples: a switch-out is never running). Not counted in
	 * STACKS_STATE_COUNT, which sizes the off-CPU folding. */
	STACKS_STATE_RUNNING = 7,
};

/* The kernel's RSS counters (its MM_* enum; stacks.bpf.c checks the values). */
enum stacks_rss_counter {
	STACKS_RSS_FILE = 0,  /* MM_FILEPAGES */
	STACKS_RSS_ANON = 1,  /* MM_ANONPAGES */
	STACKS_RSS_SWAP = 2,  /* MM_SWAPENTS */
	STACKS_RSS_SHMEM = 3, /* MM_SHMEMPAGES */
};

/* Block request operations (the kernel's REQ_OP_*; stacks.bpf.c checks the values). */
enum stacks_block_op {
	STACKS_BLOCK_READ = 0,    /* REQ_OP_READ */
	STACKS_BLOCK_WRITE = 1,   /* REQ_OP_WRITE */
	STACKS_BLOCK_FLUSH = 2,   /* REQ_OP_FLUSH */
	STACKS_BLOCK_DISCARD = 3, /* REQ_OP_DISCARD */
};

/* How an io_uring request ran (struct stacks_uring). */
enum stacks_uring_how {
	STACKS_URING_INLINE = 0,  /* issued in the submitting call */
	STACKS_URING_ASYNC = 1,   /* handed to an io-wq worker (io_uring_queue_async_work) */
	STACKS_URING_POLL = 2,    /* armed to be issued at readiness (io_uring_poll_arm) */
	STACKS_URING_SQPOLL = 3,  /* submitted by the ring's SQPOLL thread */
};

/* The file system calls traced by `vfs`. */
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

/* The type of a file (its inode mode's S_IFMT bits >> 12); only those named differently are
 * listed. STACKS_FILE_NONE: no file behind the descriptor. */
enum stacks_file_type {
	STACKS_FILE_NONE = 0,
	STACKS_FILE_FIFO = 1,    /* S_IFIFO */
	STACKS_FILE_SOCKET = 12, /* S_IFSOCK */
};

/* Address families and protocols of `net` records (the kernel's AF_* and IPPROTO_*). */
enum stacks_net_family {
	STACKS_NET_INET = 2,   /* AF_INET */
	STACKS_NET_INET6 = 10, /* AF_INET6 */
};

enum stacks_net_protocol {
	STACKS_NET_TCP = 6,  /* IPPROTO_TCP */
	STACKS_NET_UDP = 17, /* IPPROTO_UDP */
};

enum stacks_net_direction {
	STACKS_NET_SEND = 0,
	STACKS_NET_RECV = 1,
};

/* The `tracing` span a thread was in at an event, as tracing-stacks publishes it: the
 * OpenTelemetry thread-context record (OTEP 4947) its TLS pointer `otel_thread_ctx_v1` points
 * at. The first STACKS_SPAN_HEADER bytes are the record's own header; then the first
 * STACKS_SPAN_ATTRS bytes of its attributes (`key u8, len u8, value[len]` each: key 0 the
 * span's name, key 1 its parent's id; docs/spans.md). */
#define STACKS_SPAN_HEADER 28
#define STACKS_SPAN_ATTRS 64
/* The value of tracing-stacks' TLS canary `stacks_tracing_canary`. */
#define STACKS_SPAN_CANARY 0x5354414b53545343ULL

struct stacks_span {
	__u8 trace_id[16];
	__u64 span_id;            /* the record's big-endian bytes as they lie; 0: no span */
	__u8 valid;
	__u8 trace_flags;
	__u16 attrs_len;          /* the record's attribute bytes (of which `attrs` has the first) */
	__u8 attrs[STACKS_SPAN_ATTRS]; /* right after the header, as in the record: one read */
};

/* Where a traced process keeps its thread context (value of the span_procs map, by tgid):
 * offsets from a thread's thread pointer (FS base on x86_64) of the context pointer and the
 * canary. */
struct stacks_span_proc {
	__s64 ctx_off;
	__s64 canary_off;
	__u32 checked;            /* 1: the canary was found where expected */
	__u32 failed;             /* 1: it was not: this process's spans are not read */
	__u32 unset_reads;        /* reads that found it zero (the loader had not set it yet) */
	__u32 _pad;
};
/* Reads finding the canary zero before a process's check fails (a wrong offset into zeros). */
#define STACKS_SPAN_UNSET_MAX 64

/* CPython processes whose Python frames are read (value of py_procs, by tgid), filled by user
 * space for a known interpreter version: how each thread's own PyThreadState is found — by the
 * pthread key CPython keeps it under (3.11, 3.12: _PyRuntime.autoTSSkey, a Py_tss_t: int
 * initialized, unsigned key, and where the C library keeps a thread's pthread-specific values
 * from its thread pointer), or (3.13+, whose layout comes from the _Py_DebugOffsets) in the
 * main interpreter's list of thread states, by native thread id — and the offsets of the
 * fields walked (bytes). */
struct stacks_py_proc {
	__u64 tss_key;            /* address of _PyRuntime.autoTSSkey; 0: the thread list */
	__u16 specific_1st;       /* glibc struct pthread: specific_1stblock ({seq, data} x 32) */
	__u16 specific;           /* glibc struct pthread: specific (second-level blocks) */
	__u16 native_tid;         /* PyThreadState.native_thread_id: checks the state is the thread's */
	__u16 cframe;             /* PyThreadState.cframe; STACKS_PY_NO_CFRAME: none (3.13+) */
	__u16 current_frame;      /* _PyCFrame.current_frame, or PyThreadState.current_frame */
	__u16 code;               /* _PyInterpreterFrame.f_code (f_executable) */
	__u16 previous;           /* _PyInterpreterFrame.previous */
	__u16 prev_instr;         /* _PyInterpreterFrame.prev_instr (instr_ptr) */
	__u16 is_entry;           /* _PyInterpreterFrame.is_entry (3.11); 0: none */
	__u16 owner;              /* _PyInterpreterFrame.owner (3.12+); 0: none */
	__u16 qualname;           /* PyCodeObject.co_qualname: read with each frame, so user space
				   * tells a code object freed and replaced since */
	__u16 pad;
	__u64 interp_head;        /* address of _PyRuntime.interpreters.head (with tss_key 0) */
	__u16 threads_head;       /* PyInterpreterState.threads.head */
	__u16 tstate_next;        /* PyThreadState.next */
	__u16 running_task;       /* the thread state's asyncio_running_task (3.14+); 0: not read */
	__u16 task_name;          /* the asyncio TaskObj's task_name */
};

/* stacks_py_proc.cframe: the current frame is a field of the thread state itself. */
#define STACKS_PY_NO_CFRAME 0xffff
/* _PyInterpreterFrame.owner of the shim frame a C-level eval call pushes (3.12+): 3, which is
 * FRAME_OWNED_BY_CSTACK in 3.12 and 3.13 and FRAME_OWNED_BY_INTERPRETER from 3.14 on (3.14's
 * FRAME_OWNED_BY_CSTACK is 4): owners from 3 up are not Python functions' frames. */
#define STACKS_PY_OWNED_BY_CSTACK 3
/* Most threads of one process whose states a walk of the thread list looks at. */
#define STACKS_PY_MAX_THREADS 256

/* Python frames of an event follow its native user frames in the record, as user frames
 * (STACKS_UFRAME_SIZE bytes each) of these statuses, which no kernel frame has: a frame
 * (struct stacks_pyframe), innermost first, or one marker saying why none or not all were
 * read (enum stacks_py_fail in `flags`). */
#define STACKS_UFRAME_PYTHON 0x7079
#define STACKS_UFRAME_PYTHON_FAIL 0x7066
#define STACKS_PY_MAX_FRAMES 64
#define STACKS_PYFRAME_ENTRY 1    /* flags: the first frame of a C-level eval call */
#define STACKS_PYFRAME_TASK 2     /* flags: not a frame but the asyncio task the thread runs:
				   * `code` is the task, `qualname` its task_name pointer */

enum stacks_py_fail {
	STACKS_PY_NO_TSTATE = 1,  /* the thread has no Python thread state (not a Python thread) */
	STACKS_PY_OTHER_TSTATE = 2, /* the thread state found is not the thread's (another C
				     * library's thread layout) */
	STACKS_PY_READ = 3,       /* interpreter memory could not be read */
	STACKS_PY_TRUNCATED = 4,  /* more frames than STACKS_PY_MAX_FRAMES or room in the record */
};

struct stacks_pyframe {
	__s32 status;             /* STACKS_UFRAME_PYTHON or STACKS_UFRAME_PYTHON_FAIL */
	__u32 flags;              /* STACKS_PYFRAME_* (a frame) or enum stacks_py_fail (a marker) */
	__u64 code;               /* the frame's PyCodeObject */
	__u64 qualname;           /* its co_qualname pointer at the sample */
	__u64 prev_instr;         /* its last instruction started (address) */
};

/* Fields every record has. */
struct stacks_header {
	__u64 ts;                     /* bpf_ktime_get_boot_ns() of the event */
	enum stacks_event_kind kind;
	__u32 pid;                    /* tgid */
	__u32 tid;                    /* thread id */
	__u32 cpu;
	__s32 kstack_len;             /* frames, -errno, or STACKS_NOT_REQUESTED */
	__s32 ustack_len;
	__u32 count;                  /* events this record stands for (1 unless folded) */
	/* Bytes after the frames for a `d` stack: struct stacks_uregs and the stack copy it
	 * announces; 0: none (the user frames are then struct bpf_stack_build_id). */
	__u32 uwindow;
	char comm[STACKS_COMM_LEN];   /* process name (thread group leader's comm) */
	char thread[STACKS_COMM_LEN]; /* thread name */
	__u64 cgroup;                 /* the task's cgroup v2 id (its kernfs node id); 0: none */
	struct stacks_span span;      /* the thread's `tracing` span (span_id 0: none or not read) */
};

struct stacks_profile {
	__u64 period_ns; /* the sampling period */
};

struct stacks_off_cpu {
	__u64 off_ns;             /* switch-out to switch-in */
	enum stacks_state state;
	__u32 waker;              /* tid of the thread that woke it; 0: none seen */
};

struct stacks_wake {
	__u64 waited_ns;          /* how long the wakee had been off CPU at the wakeup */
	__u32 wakee_tid;
	__u32 wakee_pid;
	enum stacks_wake_context context;
	__u32 pad;
};

struct stacks_folded {
	__u64 off_ns;             /* the folded intervals' total */
	enum stacks_state state;  /* all of them were off CPU for this reason */
	__u32 pad;
};

struct stacks_rss {
	__u64 growth_bytes;       /* grown since this thread's previous record of the counter */
	__u64 resident_bytes;     /* file + anon + shmem now; 0: not read */
	enum stacks_rss_counter counter; /* the counter that grew */
	__u32 pad;
};

struct stacks_block {
	__u64 bytes;
	__u64 latency_ns;         /* issue (or submission when the issue was not seen) → completion */
	enum stacks_block_op op;  /* other REQ_OP_* values pass through */
	__u32 dev_major;          /* the disk; 0:0 when it has none */
	__u32 dev_minor;
	__s32 error;              /* blk_status_t; 0: success */
	__u64 request;            /* the request (its address), naming its STACKS_EV_UWINDOW record */
	__u32 submitter;          /* issued by an io-wq worker for an io_uring request: the tid
				   * that submitted it (its user stack is the row's); else 0 */
	__u32 pad;
};

/* stacks_file.path_complete of a file whose path was not walked again: a `vfs` record's path
 * is walked the first time its (dentry, mnt) is seen in a path generation (see path_seen in
 * kinds/vfs.bpf.h), and user space keeps what it was sent. */
#define STACKS_PATH_SAME 2

/* A file behind a descriptor, as the BPF side read it from the fd table. */
struct stacks_file {
	__u64 inode;              /* the file's inode number; 0: no file */
	enum stacks_file_type file_type;
	__u32 path_len;           /* bytes of `path` holding names (the rest is stale) */
	/* 1: the walk reached the root, `path` is the whole path; STACKS_PATH_SAME: not walked,
	 * the path is the one of the last walk of this (dentry, mnt) user space was sent */
	__u32 path_complete;
	__u32 pad;
	__u64 dentry;             /* the file's dentry and mount (kernel addresses): the key of */
	__u64 mnt;                /* its walked path; 0: no file */
	/* The file's path, leaf first: its components as consecutive NUL-terminated names,
	 * crossing mount points. Reads of a name may run past it (into what follows in the
	 * record, written later: a stacks_file is always the last member of its struct). */
	char path[STACKS_STR_LEN];
};

struct stacks_vfs {
	__u64 bytes;              /* returned; 0 on error */
	__u64 latency_ns;         /* time in the system call */
	__s32 fd;
	__s32 error;              /* errno; 0: success */
	enum stacks_vfs_call syscall;
	__u32 pad;
	struct stacks_file file;  /* kept last (see struct stacks_file) */
};

struct stacks_uring {
	__u64 latency_ns;         /* submission -> completion (the CQE posted) */
	__u64 request;            /* the request (struct io_kiocb address) */
	__s32 res;                /* the CQE's result: bytes, a descriptor, or -errno */
	__s32 fd;                 /* the SQE's descriptor, or a registered file's index (fixed) */
	__u8 opcode;              /* IORING_OP_* */
	__u8 how;                 /* enum stacks_uring_how */
	__u8 fixed;               /* 1: fd is an index in the ring's registered files */
	__u8 pad;
	__u32 waiter;             /* a thread waiting in io_uring_enter for completions of the
				   * ring (io_uring_cqring_wait) that this one counted towards:
				   * its tid; 0: none */
	__u64 waiter_off_ts;      /* that wait's off-CPU interval: the waiter's switch-out (the
				   * `switch` row's time); 0: not known (no `switch`, or it had not
				   * left the CPU) */
	struct stacks_file file;  /* the request's file at completion (inode 0: none); kept last */
};

struct stacks_net_addrs {
	__u8 local[16];  /* IPv4 in the first 4 bytes, network order */
	__u8 remote[16];
	__u16 local_port; /* host order */
	__u16 remote_port;
};

struct stacks_net {
	__u64 bytes;              /* moved; 0 on error */
	__s32 error;              /* errno; 0: success */
	enum stacks_net_family family;
	enum stacks_net_protocol protocol;
	enum stacks_net_direction direction;
	struct stacks_net_addrs addrs;
};

/* No system call (`syscall` of struct stacks_state_sample). */
#define STACKS_NO_SYSCALL (-1)

struct stacks_state_sample {
	__u64 period_ns;          /* the sampling period: the time this row stands for */
	__u64 syscall_ns;         /* time in `syscall` so far; 0: its entry was not seen */
	__u64 off_since;          /* an off-CPU thread's switch-out (switch's task storage): the
				   * `time` of the `switch` row of the interval it is in; 0: on
				   * CPU, `switch` not recorded, or switched out before it began */
	enum stacks_state state;
	__s32 syscall;            /* the system call the thread is in (this architecture's
				   * number), or STACKS_NO_SYSCALL */
	__s32 fd;                 /* the call's file descriptor argument; -1: none */
	/* A TCP/UDP socket behind `fd`: its family, protocol and addresses (family 0: none). */
	enum stacks_net_family family;
	enum stacks_net_protocol protocol;
	struct stacks_net_addrs addrs;
	struct stacks_file file;  /* the file behind `fd` (inode 0: none); kept last */
};

/* Cgroups a recording can be limited to (`--cgroup`), each with its descendants: a cgroup v2
 * id (its kernfs node id, the directory's inode number) and its depth below the root (the
 * index of the cgroup in a descendant's `ancestors`). */
#define STACKS_MAX_CGROUPS 8

struct stacks_cgroup_target {
	__u64 id;
	__u32 level;
	__u32 pad;
};

/* Probes of one recording at most, and the arguments a probe record carries. */
#define STACKS_MAX_PROBES 64
#define STACKS_PROBE_ARGS 6
/* Nested probe records under construction per CPU at most. */
#define STACKS_PROBE_SLOTS 4

/* A probe's settings (rodata `probe_conf`, indexed by the attach cookie). */
struct stacks_probe_conf {
	__u32 stacks;              /* STACKS_WANT_* */
	__u32 counting;            /* 1: count hits per (thread, stacks) in probe_counts */
};

struct stacks_probe {
	__u32 probe;               /* the probe's index (its attach cookie) */
	__u32 nargs;               /* arguments read into `args` */
	__u64 args[STACKS_PROBE_ARGS];
};

/* Set in a counting-table user stack id from the second user stack table (probe_ustacks2). */
#define STACKS_PROBE_USTACK2 (1 << 30)

/* Key and value of the counting table probe_counts: hits of one probe in one thread with
 * one pair of stacks (ids in probe_kstacks / probe_ustacks; -errno when not captured,
 * STACKS_NOT_REQUESTED when not asked for). */
struct stacks_probe_key {
	__u32 probe;
	__u32 pid;
	__u32 tid;
	__s32 kstack;
	__s32 ustack;
	__u32 pad;
};

struct stacks_probe_count {
	__u64 hits;
	__u64 first_ts;            /* bpf_ktime_get_boot_ns() of the first hit */
	__u32 cpu;                 /* of the first hit */
	__u32 pad;
	char comm[STACKS_COMM_LEN];
	char thread[STACKS_COMM_LEN];
	__u64 cgroup;              /* as in struct stacks_header */
};

/* Key and value of the aggregation tables (agg_events0/1): while the IO ring buffer is backed
 * up, `vfs` and `net` events are summed per (kind, thread, stacks, operation, error, file or
 * connection, log2 latency bucket) instead of sent one by one; user space takes the table out
 * once a second and turns each entry into a record whose header count is its events. Stack
 * ids are of the same generation's agg_kstacks / agg_ustacks (-errno when not captured,
 * STACKS_NOT_REQUESTED when not asked for). */
struct stacks_agg_key {
	__u32 kind;
	__u32 pid;
	__u32 tid;
	__s32 kstack;
	__s32 ustack;
	__u32 op;                  /* vfs: enum stacks_vfs_call; net: enum stacks_net_direction */
	__s32 error;
	__s32 fd;                  /* vfs */
	__u64 inode;               /* vfs */
	__u32 latency_log2;        /* vfs: floor(log2(latency ns)), 0 for 0 */
	__u32 family;              /* net: enum stacks_net_family */
	__u32 protocol;            /* net: enum stacks_net_protocol */
	__u32 pad;
	struct stacks_net_addrs addrs; /* net */
	__u32 pad2;
};

struct stacks_agg {
	__u64 count;               /* events summed */
	__u64 bytes;               /* their bytes */
	__u64 latency_ns;          /* their latencies' sum */
	__u64 first_ts;            /* bpf_ktime_get_boot_ns() of the first (vfs: its entry) */
	__u32 cpu;                 /* of the first */
	__u32 pad;
	char comm[STACKS_COMM_LEN];
	char thread[STACKS_COMM_LEN];
	__u64 cgroup;              /* as in struct stacks_header */
	struct stacks_file file;   /* vfs: the file, read at the first event */
	__u8 path_spill[64];       /* room for the path walk's reads past `file` (a name each) */
};

enum stacks_span_op {
	STACKS_SPAN_ENTER = 0,
	STACKS_SPAN_EXIT = 1,
};

struct stacks_span_event {
	enum stacks_span_op op;
	__u32 pad;
};

struct stacks_uwindow {
	__u64 request;            /* as struct stacks_block's */
};

enum stacks_alloc_op {
	STACKS_ALLOC_ALLOC = 0,
	STACKS_ALLOC_FREE = 1,
};

struct stacks_alloc {
	__u64 ptr;                /* the block's address */
	__u64 size;               /* its size in bytes */
	__u64 weight;             /* alloc: the bytes the sample stands for; free: 0 */
	enum stacks_alloc_op op;
	__u32 untracked;          /* alloc: 1 when its free will not be reported (the library's
				   * table of sampled pointers was full) */
};

struct stacks_exec {
	char filename[STACKS_STR_LEN]; /* the file executed */
};

struct stacks_fork {
	__u32 child_pid;
};

/* Most mappings an exit snapshot holds (struct stacks_exit). */
#define STACKS_EXIT_MAPS_MAX 128

/* What a mapping of an exit snapshot is. */
enum stacks_exit_map_what {
	STACKS_MAP_FILE = 0,  /* an executable mapping of a file */
	STACKS_MAP_VDSO = 1,  /* the vdso (no file) */
	STACKS_MAP_STACK = 2, /* the main thread's stack (not executable: where unwinding ends) */
};

/* One mapping of an exit snapshot (struct stacks_exit). */
struct stacks_exit_map {
	__u64 start;
	__u64 end;
	__u64 offset;             /* the file offset of `start` */
	__u32 dev;                /* the file's device as the kernel numbers it (major << 20 | minor) */
	enum stacks_exit_map_what what;
	/* The file's inode and path, walked as for `vfs` (dentry and mnt are the walk's start);
	 * empty but for a file. Kept last: the walk's reads may run past it (into the next
	 * mapping, written later). */
	struct stacks_file file;
};

struct stacks_exit {
	__s32 exit_code;          /* wait(2) encoding */
	/* The exit snapshot: mappings (struct stacks_exit_map) that follow the record's header in
	 * place of frames. A process that had `d` stacks the recorder may not have unwound yet
	 * (the exit_snapshot map) sends its executable mappings (in address order, at most
	 * STACKS_EXIT_MAPS_MAX) and its main stack, read before the kernel takes its memory map
	 * down, for the recorder to unwind those stacks once /proc/PID/maps is empty; others
	 * send none (0). */
	__u32 maps;
};

/* The per-kind fields: the member named after the record's kind. */
union stacks_info {
	struct stacks_profile profile;
	struct stacks_off_cpu off_cpu;
	struct stacks_folded folded;
	struct stacks_wake wake;
	struct stacks_rss rss;
	struct stacks_block block;
	struct stacks_vfs vfs;
	struct stacks_net net;
	struct stacks_uring uring;
	struct stacks_state_sample state;
	struct stacks_probe probe;
	struct stacks_span_event span_event;
	struct stacks_uwindow uwindow;
	struct stacks_alloc alloc;
	struct stacks_exec exec;
	struct stacks_fork fork;
	struct stacks_exit exit;
};

/* Per-process RSS counters as last seen (value of the rss_store map): the counters belong to
 * the process (its mm), so growth is measured against what any of its threads saw last. */
struct rss_state {
	__s64 last[4];     /* last seen size of each counter (enum stacks_rss_counter), bytes;
			    * -1: not seen yet */
};

/* Per-thread RSS growth not yet emitted, by counter (value of the rss_threads map, key tid).
 * A thread's exit emits what is left; user space takes the rest at the end of a recording. */
struct rss_thread {
	__u64 growth[4];   /* bytes grown since the thread's last record of that counter */
	__u32 events[4];   /* growth events since then */
	__u32 tgid;
	__u32 pad;
};

/* One user frame as the kernel normalized it (struct bpf_stack_build_id): status 1 = build id
 * and file offset valid, 2 = only the address (ip) is known, 0 = empty. */
#define STACKS_UFRAME_SIZE 32

/* Bytes of the frames area: room for both stacks. */
#define STACKS_FRAMES_SIZE (STACKS_MAX_DEPTH * 8 + STACKS_MAX_DEPTH * STACKS_UFRAME_SIZE)

/* One record. Sent with bpf_ringbuf_output with only the frames used: the kernel stack's
 * kstack_len addresses (8 bytes each), then the user stack's ustack_len frames
 * (STACKS_UFRAME_SIZE bytes each, build id + file offset resolved by the kernel at capture
 * time, so a process that has exited by the time user space reads the record still
 * symbolizes), in `frames`. A `d` stack (hdr.uwindow > 0) has 8-byte user frames instead,
 * followed by its struct stacks_uregs and stack copy (struct stacks_event_room). An exit
 * record has no stacks; its exit snapshot, when it has one, follows the header instead
 * (struct stacks_exit). */
struct stacks_event {
	struct stacks_header hdr;
	union stacks_info info;
	__u64 frames[STACKS_FRAMES_SIZE / 8];
};

/* A record with room for a `d` stack's registers and stack copy after its frames (the
 * per-CPU scratch records of the kinds that support `d`). */
struct stacks_event_room {
	struct stacks_event e;
	/* Room for the registers and stack copy, which follow the frames used (so they start
	 * inside e.frames unless both stacks are full). */
	struct stacks_uregs regs;
	__u8 stack[STACKS_UWINDOW_MAX];
};

/* Size of a record carrying no frames. */
#define STACKS_EVENT_HEADER_SIZE (sizeof(struct stacks_event) - STACKS_FRAMES_SIZE)

#endif /* STACKS_H */
