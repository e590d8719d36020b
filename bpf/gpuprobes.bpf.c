/* SPDX-License-Identifier: (MIT OR GPL-2.0) */
/*
 * gpuprobes: uprobes on the exported functions of libcudart / libcuda / libnccl /
 * libibverbs in one target process, for `aiprof profile --method ebpf`. Nothing is loaded
 * into the target: the kernel puts breakpoints on the library's code pages.
 *
 * Two programs serve every function; the attach cookie (gpuprobes.h) says which function
 * an attachment is on. gp_entry stashes the arguments of a call per thread; gp_return
 * sends one struct gp_rec to the ring buffer when that call returns.
 *
 * Only the outermost probed call of a thread is recorded, as libaiprof.so does (a runtime
 * call that goes through the driver is one event, not two). Nesting is told by the stack
 * pointer: a call that starts below the followed call's return-address slot runs inside
 * it; one that starts at the same slot is a tail call (its return address was already
 * taken over by the uretprobe); one above it means the followed call never returned
 * (longjmp) and is dropped.
 *
 * x86-64 only (the System V argument registers are named below). Needs Linux >= 5.15
 * (bpf_get_attach_cookie for uprobes). Built from UAPI headers alone: struct pt_regs is
 * the only kernel type used, and its layout is ABI, so there is no vmlinux.h and no CO-RE.
 */
#include <linux/bpf.h>
#include <linux/ptrace.h>            /* struct pt_regs as user space sees it: rdi, rsp, ... */
#include <stdbool.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "gpuprobes.h"

#ifndef __TARGET_ARCH_x86
#error "gpuprobes reads x86-64 argument registers; build with -D__TARGET_ARCH_x86"
#endif

char LICENSE[] SEC("license") = "Dual MIT/GPL";

/* Set by user space before load. */
const volatile __u32 target_tgid = 0;        /* host pid of the one process to follow */
const volatile __u64 target_pidns_dev = 0;   /* st_dev / st_ino of /proc/PID/ns/pid, for */
const volatile __u64 target_pidns_ino = 0;   /* ids as the target sees them (0: skip) */

/* Read by user space through the mmap'ed .bss. */
__u64 ring_drops = 0;     /* records lost: ring buffer full */
__u64 table_drops = 0;    /* calls not followed: the per-thread table was full */

/* The call a thread is in, between gp_entry and gp_return. */
struct gp_call {
	__u64 ts;
	__u64 sp;         /* rsp at entry: the slot of the return address */
	__u64 ret_addr;   /* what that slot held at entry */
	__u64 task;       /* bpf_get_current_task(): a reused tid is another thread */
	__u32 fn;
	__u16 read;       /* enum gp_read */
	__u16 flags;      /* GP_REC_F_* */
	__u64 arg[GP_ARGS];
	__u64 rd[2];
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);       /* threads inside a probed call at the same time */
	__type(key, __u32);              /* host tid */
	__type(value, struct gp_call);
} calls SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 20);    /* user space may resize before load */
} records SEC(".maps");

static __always_inline bool is_target(__u64 pid_tgid)
{
	return (__u32)(pid_tgid >> 32) == target_tgid;
}

SEC("uprobe")
int gp_entry(struct pt_regs *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u64 task = bpf_get_current_task();
	__u64 cookie, sp = ctx->rsp;
	__u32 tid = (__u32)id, nstack;
	struct gp_call *cur, call = {};

	if (!is_target(id))
		return 0;
	cur = bpf_map_lookup_elem(&calls, &tid);
	if (cur && cur->task == task) {
		if (sp < cur->sp)
			return 0;                       /* nested inside the followed call */
		if (sp == cur->sp) {
			__u64 ra = 0;

			bpf_probe_read_user(&ra, sizeof(ra), (void *)sp);
			if (ra != cur->ret_addr)
				return 0;               /* tail call out of the followed call */
		}
	}

	cookie = bpf_get_attach_cookie(ctx);
	call.fn = GP_COOKIE_FN(cookie);
	call.read = (__u16)GP_COOKIE_READ(cookie);
	call.task = task;
	call.sp = sp;
	bpf_probe_read_user(&call.ret_addr, sizeof(call.ret_addr), (void *)sp);
	call.arg[0] = ctx->rdi;
	call.arg[1] = ctx->rsi;
	call.arg[2] = ctx->rdx;
	call.arg[3] = ctx->rcx;
	call.arg[4] = ctx->r8;
	call.arg[5] = ctx->r9;
	nstack = GP_COOKIE_NSTACK(cookie);
	call.flags = GP_REC_F_ARGS;
	/* the first stack argument sits just above the return address */
	if (nstack > 0 && bpf_probe_read_user(&call.arg[6], sizeof(__u64), (void *)(sp + 8)))
		call.flags &= ~GP_REC_F_ARGS;
	if (nstack > 1 && bpf_probe_read_user(&call.arg[7], sizeof(__u64), (void *)(sp + 16)))
		call.flags &= ~GP_REC_F_ARGS;
	if (nstack > 2 && bpf_probe_read_user(&call.arg[8], sizeof(__u64), (void *)(sp + 24)))
		call.flags &= ~GP_REC_F_ARGS;
	if (call.read == GP_READ_IBV_MR && call.arg[0]) {
		if (!bpf_probe_read_user(&call.rd[0], sizeof(__u64),
					 (void *)(call.arg[0] + GP_IBV_MR_ADDR_OFF)))
			call.flags |= GP_REC_F_RD0;
		if (!bpf_probe_read_user(&call.rd[1], sizeof(__u64),
					 (void *)(call.arg[0] + GP_IBV_MR_LENGTH_OFF)))
			call.flags |= GP_REC_F_RD1;
	} else if (call.read == GP_READ_CALLER) {
		call.rd[0] = call.ret_addr;
		call.flags |= GP_REC_F_RD0;
	} else if (call.read == GP_READ_IBV_QP) {
		__u32 v = 0;

		if (call.arg[0] && !bpf_probe_read_user(&v, sizeof(v),
				(void *)(call.arg[0] + GP_IBV_QP_QP_NUM_OFF))) {
			call.rd[0] = v;
			call.flags |= GP_REC_F_RD0;
		}
		if (call.arg[1] && !bpf_probe_read_user(&v, sizeof(v),
				(void *)(call.arg[1] + GP_IBV_QP_ATTR_STATE_OFF))) {
			call.rd[1] = v;
			call.flags |= GP_REC_F_RD1;
		}
	}
	call.ts = bpf_ktime_get_ns();
	if (bpf_map_update_elem(&calls, &tid, &call, BPF_ANY))
		__sync_fetch_and_add(&table_drops, 1);
	return 0;
}

SEC("uretprobe")
int gp_return(struct pt_regs *ctx)
{
	__u64 now = bpf_ktime_get_ns();
	__u64 id = bpf_get_current_pid_tgid();
	__u64 sp = ctx->rsp;       /* after `ret`: the entry rsp + 8 */
	__u32 tid = (__u32)id;
	struct bpf_pidns_info ns = {};
	struct gp_call *c;
	struct gp_rec *r;

	if (!is_target(id))
		return 0;
	c = bpf_map_lookup_elem(&calls, &tid);
	if (!c)
		return 0;
	if (c->task != bpf_get_current_task())
		goto forget;                    /* left by an earlier thread with this tid */
	if (sp <= c->sp)
		return 0;                       /* a nested call returned */
	if (sp != c->sp + 8)
		goto forget;                    /* unwound past the followed call */
	if (GP_COOKIE_FN(bpf_get_attach_cookie(ctx)) != c->fn)
		return 0;                       /* the inner half of a tail call */

	r = bpf_ringbuf_reserve(&records, sizeof(*r), 0);
	if (!r) {
		__sync_fetch_and_add(&ring_drops, 1);
		goto forget;
	}
	r->ts = c->ts;
	r->dur = now - c->ts;
	r->pid = (__u32)(id >> 32);
	r->tid = tid;
	r->ns_pid = 0;
	r->ns_tid = 0;
	if (target_pidns_ino &&
	    !bpf_get_ns_current_pid_tgid(target_pidns_dev, target_pidns_ino, &ns, sizeof(ns))) {
		r->ns_pid = ns.tgid;
		r->ns_tid = ns.pid;
	}
	r->fn = (__u16)c->fn;
	r->flags = c->flags;
	r->pad = 0;
	r->ret = ctx->rax;
	__builtin_memcpy(r->arg, c->arg, sizeof(r->arg));
	r->rd[0] = c->rd[0];
	r->rd[1] = c->rd[1];
	if (c->read == GP_READ_OUT_PTR && c->arg[0] &&
	    !bpf_probe_read_user(&r->rd[0], sizeof(__u64), (void *)c->arg[0]))
		r->flags |= GP_REC_F_RD0;
	bpf_ringbuf_submit(r, BPF_RB_NO_WAKEUP);   /* user space polls; no wakeups needed */
forget:
	bpf_map_delete_elem(&calls, &tid);
	return 0;
}
