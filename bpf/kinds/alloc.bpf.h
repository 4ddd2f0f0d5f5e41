/* kinds/alloc.bpf.h — the `alloc` event: allocations sampled by bytes inside the process
 * (libstacks_alloc.so's and SampledAlloc's USDT probes stacks:alloc (ptr, size, weight,
 * tracked) and stacks:free (ptr, size), and OpenTelemetry's otel_memory:alloc (ptr, size,
 * weight) and otel_memory:free (ptr), attached by stacks-record to each file its targets map
 * with them). Only the samples reach here, so a probe hit is rare by design: a record each, in
 * the probes ring.
 * Included by stacks.bpf.c after kinds/probe.bpf.h (its record slots and usdt.bpf.h). */
#pragma once
#include "probe.bpf.h"

const volatile __u32 alloc_stacks = 0; /* STACKS_WANT_* at a sampled allocation */

static __always_inline int alloc_event(struct pt_regs *ctx, enum stacks_alloc_op op)
{
	if (!current_is_target())
		return 0;
	long ptr = 0, size = 0, weight = 0, tracked = 1;
	if (bpf_usdt_arg(ctx, 0, &ptr))
		return 0;
	/* otel_memory:free has no size: 0. */
	if ((op == STACKS_ALLOC_ALLOC || bpf_usdt_arg_cnt(ctx) > 1) && bpf_usdt_arg(ctx, 1, &size))
		return 0;
	if (op == STACKS_ALLOC_ALLOC && bpf_usdt_arg(ctx, 2, &weight))
		return 0;
	if (op == STACKS_ALLOC_ALLOC && bpf_usdt_arg_cnt(ctx) > 3 && bpf_usdt_arg(ctx, 3, &tracked))
		tracked = 1;
	struct probe_slot *s = probe_record(STACKS_EV_ALLOC);
	if (!s)
		return 0;
	struct stacks_event *e = &s->e;
	e->info.alloc.ptr = (__u64)ptr;
	e->info.alloc.size = (__u64)size;
	e->info.alloc.weight = (__u64)weight;
	e->info.alloc.op = op;
	e->info.alloc.untracked = tracked ? 0 : 1;
	read_span(&e->hdr.span);
	/* A free's stack is not asked for: the rows of a pointer are paired by address, and the
	 * allocation's stack is the one that matters. */
	capture_stacks_d(ctx, e, op == STACKS_ALLOC_ALLOC ? alloc_stacks : 0);
	submit_room(e);
	s->busy = 0;
	return 0;
}

SEC("usdt")
int on_alloc(struct pt_regs *ctx)
{
	return alloc_event(ctx, STACKS_ALLOC_ALLOC);
}

SEC("usdt")
int on_alloc_free(struct pt_regs *ctx)
{
	return alloc_event(ctx, STACKS_ALLOC_FREE);
}

/* Target processes that mapped something new since user space last looked (tgid -> 1): it
 * looks at their mapped files again for a sampler's probes, so that a library loaded later
 * (dlopen: a Python extension, a plugin) or the libraries of a process started during the
 * recording (`-a`, cgroups) are attached to as well. Every mmap without MAP_FIXED passes here
 * (a library's segments are placed in such a reservation), anonymous ones too: user space
 * reads the map of each process marked at most once a second. Full: marked at its next. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, __u8);
} alloc_remapped SEC(".maps");

SEC("tp_btf/vm_unmapped_area")
int BPF_PROG(alloc_new_mapping, unsigned long addr, struct vm_unmapped_area_info *info)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	if (bpf_map_lookup_elem(&alloc_remapped, &tgid) || !current_is_target())
		return 0;
	__u8 one = 1;
	bpf_map_update_elem(&alloc_remapped, &tgid, &one, BPF_NOEXIST);
	return 0;
}
