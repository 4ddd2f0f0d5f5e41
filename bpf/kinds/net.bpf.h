/* kinds/net.bpf.h — the `net` event: TCP and UDP sends and receives, IPv4 and IPv6, with both
 * ends; summed in the kernel while the IO ring buffer is backed up (aggregate.bpf.h). Included
 * by stacks.bpf.c after common.bpf.h. */
#pragma once

/* Tunables, set by user space before load. */
const volatile __u32 net_stacks = 0; /* STACKS_WANT_* */

/* ---- TCP and UDP -------------------------------------------------------------------- */

static __always_inline void net_event(void *ctx, struct sock *sk, int ret,
				      enum stacks_net_direction dir)
{
	/* Nothing moved, or a non-blocking socket had nothing to do: not traffic. */
	if (ret == 0 || ret == -EAGAIN || !current_is_target())
		return;
	if (agg_now()) {
		struct stacks_agg_key k = {};
		__u64 id = bpf_get_current_pid_tgid();
		if (!sock_addrs(sk, &k.family, &k.protocol, &k.addrs))
			return;
		k.kind = STACKS_EV_NET;
		k.pid = id >> 32;
		k.tid = (__u32)id;
		k.op = dir;
		k.error = ret < 0 ? -ret : 0;
		k.fd = -1;
		if (agg_add(ctx, &k, net_stacks, ret > 0 ? ret : 0, 0, bpf_ktime_get_boot_ns(), -1))
			return;
	}
	struct stacks_event *e = scratch_for(SCRATCH_TASK);
	if (!e)
		return;
	struct stacks_net *n = &e->info.net;
	__u32 family, protocol;
	if (!sock_addrs(sk, &family, &protocol, &n->addrs))
		return;
	fill_header(e, STACKS_EV_NET, bpf_get_current_task_btf());
	n->bytes = ret > 0 ? ret : 0;
	n->error = ret < 0 ? -ret : 0;
	n->family = family;
	n->protocol = protocol;
	n->direction = dir;
	read_span(&e->hdr.span);
	capture_stacks_d(ctx, e, net_stacks);
	submit_room(e);
}

SEC("tp_btf/sock_send_length")
int BPF_PROG(on_sock_send, struct sock *sk, int ret, int flags)
{
	net_event(ctx, sk, ret, STACKS_NET_SEND);
	return 0;
}

SEC("tp_btf/sock_recv_length")
int BPF_PROG(on_sock_recv, struct sock *sk, int ret, int flags)
{
	net_event(ctx, sk, ret, STACKS_NET_RECV);
	return 0;
}
