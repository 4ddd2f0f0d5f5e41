/* kinds/profile.bpf.h — the `profile` event: CPU samples from the cpu-clock perf event, with
 * stacks. Included by stacks.bpf.c after common.bpf.h. */
#pragma once

/* Tunables, set by user space before load. */
const volatile __u32 profile_stacks = 0; /* STACKS_WANT_* */

/* ---- CPU samples -------------------------------------------------------------------- */

SEC("perf_event")
int on_cpu_sample(struct bpf_perf_event_data *ctx)
{
	if (!current_is_target())
		return 0;
	struct stacks_event *e = scratch_for(SCRATCH_PERF);
	if (!e)
		return 0;
	fill_header(e, STACKS_EV_PROFILE, bpf_get_current_task_btf());
	e->info.profile.period_ns = ctx->sample_period;
	read_span(&e->hdr.span);
	__u32 want = profile_stacks;
	/* The context allows only whole-word loads of the registers. */
	__u64 cs = *(volatile __u64 *)&ctx->regs.cs;
	if ((want & STACKS_WANT_KERNEL) && (cs & 3) == 3) {
		/* Taken in user mode: no kernel frames, what bpf_get_stack finds after its checks
		 * and the callchain buffer's setup (~250 ns of a sample), without the call. */
		want &= ~STACKS_WANT_KERNEL;
		e->hdr.kstack_len = 0;
	}
	capture_stacks_d(ctx, e, want);
	submit_room(e);
	return 0;
}
