/* kinds/span.bpf.h — the `span` event: enter and exit of `tracing` spans (tracing-stacks' USDT
 * probes). Included by stacks.bpf.c after common.bpf.h. */
#pragma once

/* ---- Span enter and exit (tracing-stacks' USDT probes, `-e span`) ---------------------- */

const volatile __u32 span_stacks = 0; /* STACKS_WANT_* at span entry */

/* A traced thread entered or left the span its thread context points at. */
static __always_inline int span_transition(void *ctx, enum stacks_span_op op)
{
	if (!current_is_target())
		return 0;
	struct probe_slot *s = probe_record(STACKS_EV_SPAN);
	if (!s)
		return 0;
	struct stacks_event *e = &s->e;
	e->info.span_event.op = op;
	e->info.span_event.pad = 0;
	read_span(&e->hdr.span);
	if (e->hdr.span.span_id) {
		if (op == STACKS_SPAN_ENTER)
			capture_stacks_d(ctx, e, span_stacks);
		submit_room(e);
	}
	s->busy = 0;
	return 0;
}

SEC("usdt")
int on_span_enter(struct pt_regs *ctx)
{
	return span_transition(ctx, STACKS_SPAN_ENTER);
}

SEC("usdt")
int on_span_exit(struct pt_regs *ctx)
{
	return span_transition(ctx, STACKS_SPAN_EXIT);
}
