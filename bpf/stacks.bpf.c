// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/* stacks.bpf.c — BPF programs of stacks-record: the shared helpers (common.bpf.h), then one
 * file per event kind (kinds/<kind>.bpf.h), each with its programs, maps and tunables. Built
 * on perf_event, tp_btf and raw_tp (attached by name through BTF: no tracefs needed),
 * uprobes/USDT and iter/task only (no kprobes, no fentry). stacks-record checks that every
 * program here is known to it and finds each tp_btf program's tracepoint in its section. */
#include "common.bpf.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* Every record kind has its counters in the drop causes counted by kind and its entry in
 * kind_ring (stacks.h, STACKS_EV_ROOM). */
_Static_assert(STACKS_EV_COUNT <= STACKS_EV_ROOM, "a record kind past STACKS_EV_ROOM");
_Static_assert(STACKS_DROP_FIXED_END <= STACKS_DROP_COUNT, "drop causes past STACKS_DROP_COUNT");

#include "control.bpf.h"
/* Every kinds/<kind>.bpf.h, listed by stacks-record/build.rs from the directory: a new kind
 * is its file there, declaring what it uses of another kind's before the other is included. */
#include "kinds.bpf.h"
