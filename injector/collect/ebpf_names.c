/* SPDX-License-Identifier: MIT */
/* Names of what the kernel says of a task: its state bits as the one letter ps(1) shows, a
 * syscall's name; and the name the program gave a thread. No other dependency: the fuzzer
 * of what prints them links them alone. */
#include <stdint.h>
#include <stdio.h>

#include "ebpf_internal.h"

const char *ebpf_pyname_of(const struct ebpf_tdata *td, uint32_t tid)
{
	for (size_t i = td->npynames; i-- > 0;)
		if (td->pynames[i].tid == tid)
			return td->pynames[i].found ? td->pynames[i].name : NULL;
	return NULL;
}

const char *ebpf_state_letter(uint32_t state)
{
	if (state == 0)
		return "R";  /* running or runnable */
	if (state & 2)
		return "D";  /* uninterruptible: disk I/O, some locks */
	if (state & 1)
		return "S";
	if (state & (4 | 8))
		return "T";  /* stopped or traced */
	return "?";
}

static const char *const syscall_names[] = {
#include "syscall_names.h"
};

#define NNAMES (sizeof(syscall_names) / sizeof(syscall_names[0]))

const char *ebpf_syscall_name(uint32_t nr, char *buf, size_t len)
{
	if (nr < NNAMES && syscall_names[nr])
		return syscall_names[nr];
	snprintf(buf, len, "syscall_%u", nr);
	return buf;
}
