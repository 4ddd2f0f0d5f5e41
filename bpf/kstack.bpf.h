/* kstack.bpf.h — kernel stacks of tracepoint events from a cache of the kernel's own unwinds,
 * checked against the stack at each use.
 *
 * The kernel unwinds its stack with ORC: a table lookup and a text-address check per frame,
 * ~300 ns a frame on this kind of VM (a block request's 12 frames ~3.8 µs), and the same path
 * is unwound again at every event. Unwinding is a function of where the stack pointer starts
 * and of the stack words it reads: a tracepoint's arguments (the program's ctx) sit at a fixed
 * place in the frames of the code path that fired it, each frame's size is fixed by the
 * function and its return address, and the next return address is a word at a fixed place
 * above it. So an unwind is kept under (kind, where ctx is) with each frame's slot: the stack
 * word that held its address. An event with ctx at the same place whose stack holds the same
 * addresses in the same slots has the same frames.
 * - Where ctx is: its offset in the thread's stack in task context (KC_WAYS entries each); in an interrupt or softirq
 *   (the CPU's IRQ stack) its address. The frames of an interrupt's unwind go on in the
 *   interrupted thread's stack, from the stack pointer the interrupt saved in the IRQ stack's
 *   top word: that word is checked too, and those frames' slots are kept as offsets in the
 *   thread's stack (the same for every thread interrupted at the same place).
 * - A new entry is served only after KC_TRUST more unwinds at its key agreed with it, and one
 *   served use in kstack_recheck is unwound again and compared: a disagreement retires the key
 *   (always unwound after) and is counted (STACKS_DROP_KSTACK_WRONG), as the hits are
 *   (STACKS_DROP_KSTACK_CACHED) and the agreeing re-checks (STACKS_DROP_KSTACK_AGREED).
 * - The first frame is where the program called bpf_get_stack (the kernel's unwind starts at
 *   that helper's caller): an address in the program itself, dropped with the tracing glue when
 *   the stack is converted, and not the same at every call (the compiler may emit the helper
 *   call more than once, and a global function is JITed once per program that calls it): kept
 *   as it was, never compared (comparing it once retired the key of most switches beside
 *   pgbench: every switch-out then unwound). The next (the program's own caller frames, the
 *   tracepoint's glue) are below ctx; all but the first are checked.
 * - Only the kinds whose stacks are taken in tracepoint programs use it (kstack_kinds, set by
 *   user space from each kind's declaration: ctx is the tracepoint's arguments on the stack). Stacks of more than KC_FRAMES frames, or whose
 *   frames are not found in turn among the stack words from just below ctx (within KC_SPAN
 *   bytes on each stack), are unwound every time, as before. */
#pragma once

#define KC_FRAMES 32
#define KC_SPAN 8192
#define KC_WORDS (KC_SPAN / 8)
/* How far below ctx the search for the slots starts: the program's frames are below it. */
#define KC_BELOW 1024
#define KC_TRUST 2
/* Entries per place of ctx: a thread blocking in a pipe read and one preempted on its way
 * back to user mode put the switch's ctx at the same offset, and beside pgbench more paths than
 * two share one (futex, poll, socket and pipe waits): with 2 ways a new entry was learnt every
 * 16 switch-outs served, with 4 one every 120. */
#define KC_WAYS 4
#define KC_PAGE 4096
/* The smallest x86-64 thread stack (16 KiB): ctx further than this from the stack's base is
 * not in it, and the words read for a new entry stay inside it. */
#define KC_THREAD_MIN 16384
/* The record kinds (a bit each) whose kernel stacks may be served from the cache, set by user
 * space from the kinds that say their stacks are taken in tracepoint programs. */
const volatile __u32 kstack_kinds = 0;
_Static_assert(STACKS_EV_ROOM <= 32, "kstack_kinds has a bit per record kind");

/* Whether kernel stacks may be served from the cache (user space: --kernel-stacks-unwound
 * turns it off). */
const volatile bool kstack_cache_on = true;
/* One served use in this many is unwound again and compared (user space: 1,024; the tests set
 * 1 through STACKS_KSTACK_RECHECK, and then every use is compared and none served). */
const volatile __u32 kstack_recheck = 1024;

struct kc_key {
	__u32 kind;
	__u16 irq; /* 1: ctx is on the CPU's IRQ stack */
	__u16 way; /* < KC_WAYS: two paths may put ctx at the same place */
	__u64 at;  /* ctx's offset in the thread's stack, or (irq) its address */
};

struct kc_entry {
	__u32 n;      /* frames */
	__u32 n1;     /* frames before the first whose slot is in the interrupted thread's stack */
	__u32 pad;
	__u32 agreed; /* later unwinds at the key that agreed with it */
	__u32 bad;    /* an unwind disagreed: the key is unwound every time */
	__s32 first;  /* bytes from ctx to the second frame's slot (the first has none) */
	__u32 span;   /* bytes checked from there: past the last slot, or (n1 < n) to the IRQ
		       * stack's top, whose last word is the interrupted stack pointer */
	__u32 link;   /* n1 < n: that stack pointer's offset in the thread's stack */
	__u32 first2; /* n1 < n: offset in the thread's stack of frame n1's slot */
	__u32 span2;  /* n1 < n: bytes checked from there */
	__u16 off[KC_FRAMES]; /* each frame's slot in words from its stack's first (1 or n1) */
	__u64 ip[KC_FRAMES];
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 8192);
	__type(key, struct kc_key);
	__type(value, struct kc_entry);
} kstack_cache SEC(".maps");

/* Per CPU and context (0 task, 1 IRQ stack: a task-context program can be interrupted by
 * one in an interrupt): stack words copied for a check or a new entry (a page of room past
 * KC_SPAN for the page-wise copy), and the entry being made. */
struct kc_scratch {
	__u64 w[KC_WORDS + KC_PAGE / 8];
	struct kc_entry fresh;
	/* Stacks served on this CPU in this context: schedules the re-checks. Per CPU, not per
	 * entry: an entry is shared by the CPUs, and a count in it written at every use moved
	 * its cache line from CPU to CPU at nearly every switch. */
	__u64 served;
	/* Switch-outs on this CPU: schedules the re-checks of the entries served at switch-ins. */
	__u64 switch_outs;
	/* ctx stored and read back: its address as a number (kstack_ctx_at). */
	__u64 ctx_addr;
};
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, struct kc_scratch);
} kstack_scratch SEC(".maps");

/* A new entry's search for the slots on one stack (a bpf_loop callback: a word a step). */
struct kc_find {
	struct kc_scratch *s;
	struct stacks_event *e;
	__u32 words;  /* words copied */
	__u32 n;      /* frames */
	__u32 i;      /* the frame looked for */
	__u32 origin; /* the word of the first slot found on this stack */
	bool found;   /* one was */
};

static int kc_find_step(__u32 j, void *ctx)
{
	struct kc_find *f = ctx;
	struct kc_scratch *s = f->s;
	struct stacks_event *e = f->e;
	__u32 i = f->i;
	if (!s || !e || j >= f->words || i >= f->n || i >= KC_FRAMES)
		return 1;
	barrier_var(j); /* index with the register checked */
	if (j >= KC_WORDS)
		return 1;
	__u64 ip = e->frames[i & (KC_FRAMES - 1)];
	if (s->w[j & (KC_WORDS - 1)] != ip)
		return 0;
	if (!f->found) {
		f->origin = j;
		f->found = true;
	}
	__u32 rel = j - f->origin;
	if (rel >= KC_WORDS)
		return 1;
	s->fresh.off[i & (KC_FRAMES - 1)] = (__u16)rel;
	f->i = i + 1;
	return f->i >= f->n ? 1 : 0;
}

/* Copy the stack from `from` up, a page at a time, until `limit` bytes or a page that cannot
 * be read (the guard page past an IRQ stack's top): the bytes copied. */
static __always_inline __u32 kc_copy_up(struct kc_scratch *s, __u64 from, __u64 limit)
{
	__u32 got = 0;
	for (__u32 k = 0; k < KC_SPAN / KC_PAGE + 1; k++) {
		__u64 len = KC_PAGE - ((from + got) & (KC_PAGE - 1));
		if (got + len > limit)
			len = limit - got;
		if (len == 0 || len > KC_PAGE || got > KC_SPAN)
			break;
		__u32 at = got / 8;
		barrier_var(at);
		if (at > KC_WORDS)
			break;
		if (bpf_probe_read_kernel(&s->w[at], len, (void *)(from + got)))
			break;
		got += len;
	}
	return got;
}

/* The n frames of an unwind with ctx at `a` kept as a new entry under `key`, when each after
 * the first is found in turn among the stack words from KC_BELOW below ctx: on ctx's stack,
 * then (ctx on the IRQ stack) on the interrupted thread's from the stack pointer it saved. */
static __always_inline void kc_learn(struct kc_scratch *s, struct stacks_event *e, __u32 n,
				     __u64 a, __u64 base, struct kc_key *key)
{
	if (n < 2 || n > KC_FRAMES)
		return;
	__u64 from = a - KC_BELOW;
	__u64 limit = KC_SPAN;
	if (!key->irq) {
		if (a - base < KC_BELOW)
			return;
		limit = base + KC_THREAD_MIN - from;
		if (limit > KC_SPAN)
			limit = KC_SPAN;
	}
	__u32 got = kc_copy_up(s, from, limit) & ~7U;
	if (got < 16 || got > KC_SPAN)
		return;
	struct kc_find f = { .s = s, .e = e, .words = got / 8, .n = n, .i = 1 };
	bpf_loop(KC_WORDS, kc_find_step, &f, 0);
	if (!f.found)
		return;
	__u32 n1 = f.i;
	s->fresh.first = (__s32)(f.origin * 8) - KC_BELOW;
	s->fresh.n1 = n1;
	s->fresh.link = s->fresh.first2 = s->fresh.span2 = 0;
	if (n1 == n) {
		s->fresh.span = ((__u32)s->fresh.off[(n - 1) & (KC_FRAMES - 1)] + 1) * 8;
	} else {
		/* The rest are in the interrupted thread's stack, from the stack pointer saved in
		 * the IRQ stack's top word (the last copied: the next page is its guard). */
		if (!key->irq || n1 < 2)
			return;
		__u32 top = got / 8 - 1;
		if (top >= KC_WORDS)
			return;
		__u64 sp = s->w[top];
		if (sp < base || sp - base >= KC_THREAD_MIN)
			return;
		s->fresh.span = got - f.origin * 8;
		s->fresh.link = (__u32)(sp - base);
		__u32 got2 = kc_copy_up(s, sp, base + KC_THREAD_MIN - sp) & ~7U;
		if (got2 < 8 || got2 > KC_SPAN)
			return;
		f.words = got2 / 8;
		f.found = false;
		bpf_loop(KC_WORDS, kc_find_step, &f, 0);
		if (f.i != n || !f.found)
			return;
		s->fresh.first2 = s->fresh.link + f.origin * 8;
		s->fresh.span2 = ((__u32)s->fresh.off[(n - 1) & (KC_FRAMES - 1)] + 1) * 8;
	}
	for (__u32 i = 0; i < KC_FRAMES; i++) {
		if (i >= n)
			break;
		s->fresh.ip[i] = e->frames[i];
	}
	s->fresh.n = n;
	s->fresh.pad = 0;
	s->fresh.agreed = 0;
	s->fresh.bad = 0;
	bpf_map_update_elem(&kstack_cache, key, &s->fresh, BPF_ANY);
}

/* The kernel word at `addr`, by a plain load: bpf_core_cast gives an untrusted pointer, which
 * the verifier turns into a move, and whose loads the JIT guards (a fault reads 0). Checking a
 * cached stack's slots this way costs a few ns a frame, where copying the stack between them
 * with bpf_probe_read_kernel (a byte-wise, fault-guarded copy) cost most of a cached switch
 * stack's time. rb_node's first member is an unsigned long on every architecture. */
static __always_inline __u64 kc_word(__u64 addr)
{
	return bpf_core_cast((void *)addr, struct rb_node)->__rb_parent_color;
}

/* Whether the stack from `at` holds entry c's frames [from, to) in their slots. */
static __always_inline bool kc_slots_hold(struct kc_entry *c, __u64 at, __u32 from, __u32 to)
{
	for (__u32 i = 1; i < KC_FRAMES; i++) {
		if (i >= to)
			break;
		if (i < from)
			continue;
		__u32 o = c->off[i];
		if (o >= KC_WORDS || kc_word(at + (__u64)o * 8) != c->ip[i])
			return false;
	}
	return true;
}

/* Whether the stack holds entry c's frames after the first in their slots (ctx at `a`, the
 * thread's stack at `base`). */
static __always_inline bool kc_holds(struct kc_entry *c, __u64 a, __u64 base)
{
	__u32 span = c->span, n = c->n, n1 = c->n1;
	if (span < 8 || span > KC_SPAN || n < 2 || n > KC_FRAMES || n1 > n)
		return false;
	__u64 at = a + (__s64)c->first;
	if (!kc_slots_hold(c, at, 1, n1))
		return false;
	if (n1 == n)
		return true;
	if (kc_word(at + span - 8) != base + c->link)
		return false;
	__u32 span2 = c->span2;
	if (span2 < 8 || span2 > KC_SPAN || c->first2 >= KC_THREAD_MIN)
		return false;
	return kc_slots_hold(c, base + c->first2, n1, n);
}

/* Whether the unwind just made into e->frames (n frames) is entry c's, but for the first frame
 * (the program's own address). */
static __always_inline bool kc_same(struct kc_entry *c, struct stacks_event *e, __u32 n)
{
	if (n != c->n)
		return false;
	for (__u32 i = 1; i < KC_FRAMES; i++) {
		if (i >= n)
			break;
		if (e->frames[i] != c->ip[i])
			return false;
	}
	return true;
}

/* Entry c's frames into e->frames: the bytes written, as bpf_get_stack. */
static __always_inline long kc_serve(struct kc_entry *c, struct stacks_event *e)
{
	__u32 n = c->n;
	for (__u32 i = 0; i < KC_FRAMES; i++) {
		if (i >= n)
			break;
		e->frames[i] = c->ip[i];
	}
	return (long)n * 8;
}

/* The kind of a `switch` key in the thread's stack: with the system call the thread is in
 * (orig_ax, -1 outside one) in its high half. The kernel moves a system call's stack by a
 * random offset at each entry, so each place of ctx is shared by many code paths (beside
 * pgbench all KC_WAYS ways of a place were taken); the system call sets most of them apart,
 * and it reads the same at the switch-in (a thread's registers are frozen off CPU). */
static __always_inline __u32 kc_switch_kind(struct task_struct *task)
{
	struct pt_regs *r = (struct pt_regs *)bpf_task_pt_regs(task);
	__u32 nr = r ? (__u32)r->orig_ax & 0xffff : 0xffff;
	return STACKS_EV_SWITCH | (nr << 16);
}

/* Places of ctx in the thread's stack, with the system call (a key without its way), where
 * `switch` has a trusted entry: a switch-out there leaves its kernel stack for its switch-in;
 * elsewhere it is taken at once, which teaches the cache. A bit each (hashed), set as an
 * entry there is trusted or served, cleared where a switch-in found a retired one. */
#define KC_PLACE_BITS 65536
__u64 kstack_switch_trusted[KC_PLACE_BITS / 64];

static __always_inline __u32 kc_place(__u32 kind, __u64 at)
{
	__u32 h = (((__u32)at / 8) | (kind >> 16) << 11) * 0x9E3779B1U;
	return (h >> 16) & (KC_PLACE_BITS - 1);
}

static __always_inline bool kc_place_is_trusted(__u32 kind, __u64 at)
{
	__u32 w = kc_place(kind, at);
	return kstack_switch_trusted[(w / 64) & (KC_PLACE_BITS / 64 - 1)] & (1ULL << (w & 63));
}

static __always_inline void kc_place_trusted(__u32 kind, __u64 at, bool on)
{
	__u32 w = kc_place(kind, at);
	__u64 bit = 1ULL << (w & 63);
	__u64 *word = &kstack_switch_trusted[(w / 64) & (KC_PLACE_BITS / 64 - 1)];
	if (!!(*word & bit) == on)
		return;
	if (on)
		__sync_fetch_and_or(word, bit);
	else
		__sync_fetch_and_and(word, ~bit);
}

/* A `switch` entry at `key`'s place is trusted: the place is marked so, unless a way there is
 * retired (the place is then unwound at every switch-out, as any retired key). */
static __always_inline void kc_trust_place(struct kc_key *key)
{
	if ((key->kind & 0xffff) != STACKS_EV_SWITCH || key->irq)
		return;
	if (kc_place_is_trusted(key->kind, key->at))
		return;
	struct kc_key k = *key;
	for (__u16 way = 0; way < KC_WAYS; way++) {
		k.way = way;
		struct kc_entry *c = bpf_map_lookup_elem(&kstack_cache, &k);
		if (c && c->bad)
			return;
	}
	kc_place_trusted(key->kind, key->at, true);
}

/* The current thread's kernel stack into e->frames, as bpf_get_stack: bytes written, or
 * -errno; `fresh`: unwound by the kernel (and compared with the entry that holds) even where
 * the cache would serve it. A global function: the verifier checks it once, not once per way
 * into it. */
__noinline long kstack_capture(void *ctx __arg_ctx, struct stacks_event *e, __u32 kind, bool fresh)
{
	if (!e)
		return -EFAULT;
	struct kc_scratch *s = NULL;
	struct kc_entry *c = NULL;
	struct kc_key key = { .kind = kind };
	__u64 a = 0, base = 0;
	bool check = false, keyed = false;

	if (kstack_cache_on && kind < STACKS_EV_ROOM && (kstack_kinds & (1U << kind))) {
		void *p = ctx;
		struct task_struct *task = bpf_get_current_task_btf();
		base = (__u64)BPF_CORE_READ(task, stack);
		/* ctx's address as a number: the verifier lets privileged programs read it. */
		if (base && !bpf_probe_read_kernel(&a, sizeof(a), &p) && a) {
			keyed = true;
			if (a > base && a - base < KC_THREAD_MIN) {
				key.at = a - base;
				if (kind == STACKS_EV_SWITCH)
					key.kind = kc_switch_kind(task);
			} else {
				key.irq = 1;
				key.at = a;
			}
			__u32 slot = key.irq;
			s = bpf_map_lookup_elem(&kstack_scratch, &slot);
		}
	}
	/* The way to learn into: a free one, else one not yet trusted, else the last. */
	__u16 spare = KC_WAYS;
	if (keyed && s) {
		for (__u16 way = 0; way < KC_WAYS; way++) {
			key.way = way;
			c = bpf_map_lookup_elem(&kstack_cache, &key);
			if (!c) {
				if (spare == KC_WAYS)
					spare = way;
				continue;
			}
			if (c->bad) {
				keyed = false; /* retired: unwound every time */
				break;
			}
			if (kc_holds(c, a, base)) {
				check = true;
				break;
			}
			if (c->agreed < KC_TRUST && spare == KC_WAYS)
				spare = way;
		}
		if (check && c && c->agreed >= KC_TRUST)
			kc_trust_place(&key);
		if (check && c && c->agreed >= KC_TRUST && kstack_recheck > 1 && !fresh &&
		    (++s->served % kstack_recheck)) {
			count_drop(STACKS_DROP_KSTACK_CACHED);
			return kc_serve(c, e);
		}
	}
	long bytes = bpf_get_stack(ctx, e->frames, STACK_BYTES, 0);
	if (bytes <= 0 || !keyed || !s)
		return bytes;
	__u32 n = (__u32)bytes / 8;
	if (check) {
		if (!c)
			return bytes;
		/* c is the way that held: compare the kernel's unwind with it. */
		if (kc_same(c, e, n)) {
			if (c->agreed < KC_TRUST)
				c->agreed++;
			else
				count_drop(STACKS_DROP_KSTACK_AGREED);
			if (c->agreed >= KC_TRUST)
				kc_trust_place(&key);
		} else {
			if (c->agreed >= KC_TRUST)
				count_drop(STACKS_DROP_KSTACK_WRONG);
			c->bad = 1;
		}
		return bytes;
	}
	key.way = spare < KC_WAYS ? spare : KC_WAYS - 1;
	kc_learn(s, e, n, a, base, &key);
	return bytes;
}

/* The current thread's kernel stack into e->frames, from the cache where it holds. */
static __always_inline long capture_kernel_ips(void *ctx, struct stacks_event *e, __u32 kind)
{
	return kstack_capture(ctx, e, kind, false);
}

/* ---- Kernel stacks of switch-outs, taken at the switch-in ------------------------------ */
/* Most off-CPU intervals are short and folded without a stack (beside pgbench 2-4% of
 * switch-outs start one that is kept), yet taking the kernel stack at every switch-out, even
 * from the cache, was half of `on_switch`'s time (~560 of ~1,130 ns). A thread off CPU does not
 * touch its stack: from the switch-out to its switch-in every frame above the scheduler's is
 * as it was, and the switch-in (on_switch, the thread not run yet) is where an interval is
 * known to be kept. So the switch-out keeps only where ctx was in the thread's stack, and a
 * kept interval's switch-in serves the entry of that key whose frames are in their slots in
 * the sleeping thread's stack. Only the slots above the frame the context switch saved
 * (thread.sp and its inactive_task_frame) are checked: the tracing glue's and the return into
 * __schedule below them were overwritten by the switch itself, and they are the same at every
 * switch-out (one call site). Only trusted entries are served (KC_TRUST unwinds at the
 * switch-out agreed); they are made and re-checked at the switch-outs taken at once: those at
 * a place (and system call) where no entry is trusted yet, 1 in kstack_recheck (unwound and
 * compared even where the cache holds), and the next KC_LEARN_RUNS at a place where a
 * switch-in found no entry. Such a switch-in falls back to the kernel's unwind of the sleeping
 * thread, which leaves out the frames in .sched.text (STACKS_DROP_KSTACK_LATE_UNWOUND): beside
 * pgbench 4% of the kept intervals in a 30 s recording, 3.8% in 70 s (a code path at each of a
 * system call's random stack offsets is learnt apart). With kstack_recheck 1 (the tests), every switch-out is
 * unwound and every kept interval's switch-in checks the entry it would have served against
 * that unwind (STACKS_DROP_KSTACK_LATE_AGREED, or a difference: STACKS_DROP_KSTACK_WRONG). */

#define KC_LEARN_RUNS 8
/* Switch-outs still to take at once at each place of ctx and system call (kc_place): set where
 * a switch-in found no entry held (another path shares the key). */
__u8 kstack_learn[KC_PLACE_BITS];

/* Whether kernel stacks of switch-outs may be taken at the switch-in: the cache is on for
 * `switch` and the kernel saves a switched-out thread's stack pointer where x86-64 does. */
static __always_inline bool kstack_late_on(void)
{
	return kstack_cache_on && (kstack_kinds & (1U << STACKS_EV_SWITCH)) &&
	       bpf_core_field_exists(struct thread_struct, sp) &&
	       bpf_core_type_exists(struct inactive_task_frame);
}

/* Pointer `p` as a number: stored in a map value and read back (a privileged program may store
 * a pointer there), two plain accesses where a helper's copy cost ~100 ns. */
static __always_inline __u64 kc_number(struct kc_scratch *s, void *p)
{
	*(void *volatile *)&s->ctx_addr = p;
	return *(volatile __u64 *)&s->ctx_addr;
}

/* Where ctx is in the stack of `task` (the current thread): its offset, or 0 when it is not on
 * it. */
static __always_inline __u32 kstack_ctx_at(void *ctx, struct task_struct *task)
{
	__u32 zero = 0;
	struct kc_scratch *s = bpf_map_lookup_elem(&kstack_scratch, &zero);
	if (!s)
		return 0;
	__u64 a = kc_number(s, ctx);
	__u64 base = kc_number(s, task->stack);
	if (!base || a <= base || a - base >= KC_THREAD_MIN)
		return 0;
	return (__u32)(a - base);
}

/* Whether this switch-out's kernel stack (ctx at `at`) is left for its switch-in: not the 1 in
 * kstack_recheck unwound now (every one with kstack_recheck 1), nor one of the switch-outs to
 * unwind at a place where no entry held. */
static __always_inline bool kstack_leave_for_switch_in(struct task_struct *task, __u32 at,
						       bool *fresh)
{
	__u32 zero = 0;
	struct kc_scratch *s = bpf_map_lookup_elem(&kstack_scratch, &zero);
	*fresh = false;
	if (!s || kstack_recheck <= 1)
		return false;
	if (!(++s->switch_outs % kstack_recheck)) {
		*fresh = true;
		return false;
	}
	__u32 kind = kc_switch_kind(task);
	if (!kc_place_is_trusted(kind, at))
		return false;
	__u32 w = kc_place(kind, at) & (KC_PLACE_BITS - 1);
	if (kstack_learn[w]) {
		kstack_learn[w]--;
		return false;
	}
	return true;
}

/* Whether entry c's frames whose slots are at `live` or above (at least one) hold in the stack
 * (ctx was at `a`). */
static __always_inline bool kc_live_slots_hold(struct kc_entry *c, __u64 a, __u64 live)
{
	__u32 span = c->span, n = c->n;
	if (span < 8 || span > KC_SPAN || n < 2 || n > KC_FRAMES || c->n1 != n)
		return false;
	__u64 at = a + (__s64)c->first;
	/* The slots rise with the frames: the live ones are the last. */
	__u32 from = KC_FRAMES;
	for (__u32 i = 1; i < KC_FRAMES; i++) {
		if (i >= n)
			break;
		if (at + (__u64)(c->off[i] & (KC_WORDS - 1)) * 8 >= live) {
			from = i;
			break;
		}
	}
	return from < n && kc_slots_hold(c, at, from, n);
}

/* A switched-out thread's kernel stack from the cache: its stack at `base`, ctx at `at` in it
 * at the switch-out, the live frames from `live`. `check` 0: into e->frames, as bpf_get_stack
 * (bytes, or -ENOENT when no trusted entry holds); otherwise compared with the `check` frames
 * unwound at the switch-out into e->frames (0; -ENOENT when none holds). A global function:
 * the verifier checks it once. */
__noinline long kstack_late(struct stacks_event *e, __u64 base, __u64 kind_at, __u64 live,
			    __u32 check)
{
	if (!e)
		return -EFAULT;
	__u64 at = kind_at & 0xffffffff;
	struct kc_key key = { .kind = (__u32)(kind_at >> 32), .at = at };
	__u64 a = base + at;
	for (__u16 way = 0; way < KC_WAYS; way++) {
		key.way = way;
		struct kc_entry *c = bpf_map_lookup_elem(&kstack_cache, &key);
		if (!c)
			continue;
		if (c->bad) {
			kc_place_trusted(key.kind, at, false);
			return -ENOENT;
		}
		if (c->agreed < KC_TRUST || !kc_live_slots_hold(c, a, live))
			continue;
		if (check) {
			if (kc_same(c, e, check)) {
				count_drop(STACKS_DROP_KSTACK_LATE_AGREED);
			} else {
				count_drop(STACKS_DROP_KSTACK_WRONG);
				c->bad = 1;
			}
			return 0;
		}
		count_drop(STACKS_DROP_KSTACK_LATE);
		return kc_serve(c, e);
	}
	return -ENOENT;
}

/* The kernel stack of `task`, switched out with ctx at `at` in its stack and not run since,
 * into e->frames at its switch-in (or at the end of a recording, off CPU): from the cache, else
 * by the kernel's unwind of the sleeping thread (without .sched.text), and the next switch-outs
 * at that place are unwound to learn it. Bytes, or -errno. */
static __always_inline long kstack_at_switch_in(struct stacks_event *e, struct task_struct *task,
						__u32 at)
{
	__u32 zero = 0;
	struct kc_scratch *s = bpf_map_lookup_elem(&kstack_scratch, &zero);
	if (!s)
		return -ENOMEM;
	__u64 base = kc_number(s, task->stack);
	__u64 live = task->thread.sp + bpf_core_type_size(struct inactive_task_frame);
	long bytes = kstack_late(e, base, (__u64)kc_switch_kind(task) << 32 | at, live, 0);
	if (bytes != -ENOENT)
		return bytes;
	kstack_learn[kc_place(kc_switch_kind(task), at) & (KC_PLACE_BITS - 1)] = KC_LEARN_RUNS;
	count_drop(STACKS_DROP_KSTACK_LATE_UNWOUND);
	return bpf_get_task_stack(task, e->frames, STACK_BYTES, 0);
}

/* With kstack_recheck 1: the entry a kept interval's switch-in would have served, compared with
 * the `n` frames unwound at its switch-out. */
static __always_inline void kstack_check_at_switch_in(struct stacks_event *e,
						      struct task_struct *task, __u32 at, __u32 n)
{
	__u32 zero = 0;
	struct kc_scratch *s = bpf_map_lookup_elem(&kstack_scratch, &zero);
	if (!s)
		return;
	__u64 base = kc_number(s, task->stack);
	__u64 live = task->thread.sp + bpf_core_type_size(struct inactive_task_frame);
	kstack_late(e, base, (__u64)kc_switch_kind(task) << 32 | at, live, n);
}
