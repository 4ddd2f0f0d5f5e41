/* control.bpf.h — the settings user space changes while the programs run (stacks-record
 * --control, the agent's CPU budget degrading in place): globals of the .bss, memory-mapped,
 * written by user space alone, read by the programs at each event. Included by stacks.bpf.c
 * before the kinds; a kind's own such globals are in its file (uring_min_ns). */

/* `switch`'s MIN: shorter off-CPU intervals are folded per thread and state (their time and
 * count kept, their stacks dropped). */
volatile __u64 switch_min_ns = 0;

/* `switch`'s N (`switch:STACKS:MIN:N`): stacks are taken at 1 switch-out in N, at random; a
 * kept interval (MIN or longer) of one taken is a row standing for N, the others make none
 * (the short ones are folded either way). 0 is 1. */
volatile __u64 switch_one_in = 0;

/* `state`: 1e9 / HZ of the thread-state passes, what one row stands for. */
volatile __u64 state_period_ns = 0;
