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
_Static_assert(STACKS_DROP_URING_MAP_FULL < STACKS_DROP_COUNT, "drop causes past STACKS_DROP_COUNT");

#include "control.bpf.h"
#include "kinds/profile.bpf.h"
#include "kinds/switch.bpf.h"
#include "kinds/rss.bpf.h"
#include "kinds/block.bpf.h"
#include "kinds/vfs.bpf.h"
#include "kinds/net.bpf.h"
#include "kinds/state.bpf.h"
#include "kinds/probe.bpf.h"
#include "kinds/span.bpf.h"
#include "kinds/alloc.bpf.h"
#include "kinds/uring.bpf.h"
#include "kinds/lifecycle.bpf.h"
