/* SPDX-License-Identifier: MIT */
/*
 * injector/collect/ebpf.c, ebpf_verifier_reason(): the verifier's own words on why it
 * refused a program, read off the end of its load log, for summary.json's ebpf.task_work
 * and the warning on the terminal (a kernel that has bpf_task_work in its BTF but refuses
 * it from sched_switch). The logs are of the shape Linux 6.18 writes.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>
#include "injector/collect/ebpf_internal.h"

static const char refused_tw[] =
	"0: R1=ctx() R10=fp0\n"
	"; if (!running || paused) @ syscalls.bpf.c:527\n"
	"0: (18) r2 = 0xffffc90001092000       ; R2=map_value(map=syscalls.bss,ks=4,vs=72)\n"
	"from 531 to 543: R0=map_value(map=sys_works,ks=4,vs=8) R6=1\n"
	"; return bpf_task_work_schedule_resume_impl(t, &w->tw, map, cb, NULL) == 0; @ x.h:50\n"
	"550: (85) call bpf_task_work_schedule_resume_impl#65360\n"
	"sleepable callback in a program that is not sleepable\n"
	"kfunc bpf_task_work_schedule_resume_impl#65360 failed callback verification\n"
	"verification time 4076 usec\n"
	"stack depth 232+0\n"
	"processed 162 insns (limit 1000000) max_states_per_insn 0 total_states 14\n";

static void the_reason_lines_before_the_statistics(void **state)
{
	char out[256];

	(void)state;
	ebpf_verifier_reason(refused_tw, out, sizeof(out));
	assert_string_equal(out, "sleepable callback in a program that is not sleepable; kfunc "
			    "bpf_task_work_schedule_resume_impl#65360 failed callback verification");
}

static void one_reason_line_and_no_statistics(void **state)
{
	/* a log cut before its statistics (the buffer full), and one line of reason */
	static const char log[] =
		"12: (85) call bpf_probe_read_kernel#113\n"
		"R2 min value is negative, either use unsigned or 'var &= const'\n";
	char out[256];

	(void)state;
	ebpf_verifier_reason(log, out, sizeof(out));
	assert_string_equal(out, "R2 min value is negative, either use unsigned or 'var &= const'");
}

static void nothing_to_say(void **state)
{
	char out[64] = "stale";

	(void)state;
	ebpf_verifier_reason("", out, sizeof(out));
	assert_string_equal(out, "");
	ebpf_verifier_reason("1: (b7) r0 = 0\n2: (95) exit\nprocessed 2 insns\n", out, sizeof(out));
	assert_string_equal(out, "");
}

static void a_long_reason_is_cut_to_the_buffer(void **state)
{
	char log[1200], out[40];

	(void)state;
	memset(log, 'x', 1000);
	strcpy(log + 1000, "\nverification time 1 usec\n");
	ebpf_verifier_reason(log, out, sizeof(out));
	assert_int_equal(strlen(out), sizeof(out) - 1);
	assert_int_equal(strspn(out, "x"), sizeof(out) - 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(the_reason_lines_before_the_statistics),
		cmocka_unit_test(one_reason_line_and_no_statistics),
		cmocka_unit_test(nothing_to_say),
		cmocka_unit_test(a_long_reason_is_cut_to_the_buffer),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
