/* control.bpf.h — the settings user space changes while the programs run (stacks-record
 * --control, the agent's CPU budget degrading in place): globals of the .bss, memory-mapped,
 * written by user space alone, read by the programs at each event. Included by stacks.bpf.c
 * before the kinds. */

/* `switch`'s MIN: shorter off-CPU intervals are folded per thread and state (their time and
 * count kept, their stacks dropped). */
volatile __u64 switch_min_ns = 0;

/* `uring`'s MIN: requests completed sooner are summed in the aggregation tables
 * (aggregate.bpf.h) per submitter, op, how it ran, error, descriptor, file and log2 latency
 * bucket, without stacks: a row a second per such group, its count, bytes and time exact.
 * 0: none. */
volatile __u64 uring_min_ns = 0;

/* `state`: 1e9 / HZ of the thread-state passes, what one row stands for. */
volatile __u64 state_period_ns = 0;
