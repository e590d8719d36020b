/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/profile.h"
#include "analysis.h"
#include "diagnosis.h"

int diagnosis__new(const struct profile *p, struct diagnosis **ret)
{
	struct diagnosis *d = calloc(1, sizeof(*d));
	struct analysis_opts o;
	char why[320];
	int r;

	if (!d)
		return -ENOMEM;
	findings_analysis_opts(&o);
	r = analysis__new(p, &o, &d->analysis);
	if (r < 0)
		goto fail;
	r = waits_from_ebpf(p->ebpf, &d->waits, d->ebpf_counts);
	if (r == -ENOMEM)
		goto fail;
	d->waits_known = r == 0;
	for (size_t i = 0; i < 4; i++)
		d->analysis->counts[6 + i] = d->ebpf_counts[i];
	if (!d->waits_known)
		snprintf(why, sizeof(why), "no off-CPU or syscall data: %s", p->ebpf ?
			 "the offcpu and syscalls collectors did not run" :
			 p->ebpf_reason[0] ? p->ebpf_reason : "eBPF collectors off");
	r = findings__run(p, d->analysis, d->waits_known ? &d->waits : NULL,
			  d->waits_known ? NULL : why, &d->findings);
	if (r < 0)
		goto fail;
	*ret = d;
	return 0;
fail:
	diagnosis__free(d);
	return r;
}

void diagnosis__free(struct diagnosis *d)
{
	if (!d)
		return;
	analysis__free(d->analysis);
	findings__free(d->findings);
	wait_list__clear(&d->waits);
	free(d);
}
