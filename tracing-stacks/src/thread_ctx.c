/* thread_ctx.c — the thread context of tracing-stacks: the OpenTelemetry thread-context
 * pointer (OTEP 4947, `otel_thread_ctx_v1`) each thread points at its current span's record,
 * and a canary a reader checks its TLS offset arithmetic against. Both live in the static TLS
 * block of the executable (initial-exec), so a reader finds them at a fixed offset from each
 * thread's thread pointer. */

#define STACKS_TRACING_CANARY 0x5354414b53545343ULL /* "CSTSKATS" */

__attribute__((visibility("default"), tls_model("initial-exec")))
__thread const void *otel_thread_ctx_v1 = 0;

__attribute__((visibility("default"), tls_model("initial-exec")))
__thread unsigned long long stacks_tracing_canary = STACKS_TRACING_CANARY;

/* The ABI of the record and attribute keys (docs/spans.md). */
__attribute__((visibility("default"))) const unsigned int stacks_tracing_abi = 1;

/* Point this thread's context at `record` (NULL: no span). The compiler barriers keep the
 * store where the program put it: a reader interrupts the thread, it never races it. */
void stacks_tracing_set(const void *record)
{
	__asm__ __volatile__("" ::: "memory");
	otel_thread_ctx_v1 = record;
	__asm__ __volatile__("" ::: "memory");
}

/* This thread's context and canary (tests; also keeps the canary's section from being
 * garbage-collected by the linker, since it is referenced). */
const void *stacks_tracing_get(unsigned long long *canary)
{
	*canary = stacks_tracing_canary;
	return otel_thread_ctx_v1;
}

/* The ABI marker's address (referenced so the linker keeps it). */
const unsigned int *stacks_tracing_abi_ref(void)
{
	return &stacks_tracing_abi;
}
