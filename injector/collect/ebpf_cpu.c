/* SPDX-License-Identifier: MIT */
/*
 * On-CPU sampling, user half (kernel half: bpf/cpu.bpf.c, shared structs: bpf/cpu.h).
 * One cpu-clock perf event per online CPU at the requested frequency, each running the
 * sampling program; records become cpu_sample timeline events and stacks.folded lines.
 */
#ifndef AIPROF_NO_EBPF
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <linux/perf_event.h>
#include <sys/syscall.h>
#include <bpf/libbpf.h>

#include "bpf/cpu.h"
#include "cpu.skel.h"
#include "ebpf_internal.h"
#include "log.h"

static int perf_open(int cpu, uint32_t freq)
{
	struct perf_event_attr a = {
		.type = PERF_TYPE_SOFTWARE,
		.config = PERF_COUNT_SW_CPU_CLOCK,
		.size = sizeof(a),
		.freq = 1,
		.sample_freq = freq,
	};

	return (int)syscall(SYS_perf_event_open, &a, -1, cpu, -1, PERF_FLAG_FD_CLOEXEC);
}

static int ebpf_cpu__open(struct ebpf *e)
{
	struct bpf_object_open_opts oo = { .sz = sizeof(oo), .btf_custom_path = e->opts.btf_path };
	struct cpu_bpf *skel;
	int fd, r;

	/* probe: can we sample at all? (perf_event_paranoid, no perf support in a VM) */
	fd = perf_open(0, e->opts.frequency_hz);
	if (fd < 0) {
		r = -errno;
		snprintf(e->why[EC_CPU], sizeof(e->why[EC_CPU]), "cannot open a cpu-clock perf event "
			 "at %u Hz: %s", e->opts.frequency_hz, strerror(-r));
		return r;
	}
	close(fd);
	skel = cpu_bpf__open_opts(&oo);
	if (!skel) {
		r = -errno;
		snprintf(e->why[EC_CPU], sizeof(e->why[EC_CPU]), "cannot open the CPU sampler: %s",
			 strerror(-r));
		return r;
	}
	skel->rodata->want_python = (e->opts.collectors & EBPF_COLLECT_PYTHON) != 0;
	bpf_map__set_max_entries(skel->maps.events, EBPF_RINGBUF_BYTES);
	r = ebpf_share_maps(e, skel->obj);
	if (r == 0)
		r = cpu_bpf__load(skel);
	if (r < 0) {
		snprintf(e->why[EC_CPU], sizeof(e->why[EC_CPU]), "the kernel refused the CPU "
			 "sampler: %s", strerror(-r));
		cpu_bpf__destroy(skel);
		return r;
	}
	ebpf_loaded(e, skel->obj);
	e->cpu = skel;
	return 0;
}

static int ebpf_cpu__attach(struct ebpf *e)
{
	int n = libbpf_num_possible_cpus(), r;

	if (n <= 0)
		return n < 0 ? n : -ENODEV;
	e->perf_fds = calloc((size_t)n, sizeof(*e->perf_fds));
	e->perf_links = calloc((size_t)n, sizeof(*e->perf_links));
	if (!e->perf_fds || !e->perf_links)
		return -ENOMEM;
	e->nperf = n;
	for (int cpu = 0; cpu < n; cpu++)
		e->perf_fds[cpu] = -1;
	for (int cpu = 0; cpu < n; cpu++) {
		e->perf_fds[cpu] = perf_open(cpu, e->opts.frequency_hz);
		if (e->perf_fds[cpu] < 0) {
			if (errno == ENODEV)
				continue;  /* possible but not online */
			r = -errno;
			goto fail;
		}
		e->perf_links[cpu] = bpf_program__attach_perf_event(e->cpu->progs.cpu_sample,
								    e->perf_fds[cpu]);
		if (!e->perf_links[cpu]) {
			r = -errno;
			goto fail;
		}
	}
	return 0;
fail:
	snprintf(e->why[EC_CPU], sizeof(e->why[EC_CPU]), "cannot attach the CPU sampler: %s",
		 strerror(-r));
	return r;
}

static void ebpf_cpu__set_running(struct ebpf *e, bool on)
{
	if (!e->cpu)
		return;
	e->cpu->bss->running = on;
	if (!on)
		e->lost += __atomic_exchange_n(&e->cpu->bss->lost, 0, __ATOMIC_RELAXED);
}

static void ebpf_cpu__record(struct ebpf *e, struct ebpf_tdata *td, const void *data, size_t size)
{
	const struct cpu_sample *s = data;
	struct ebpf_cpu_ev *ev;
	uint32_t leaf = 0;
	int id;

	if (size < sizeof(*s)) {
		e->bad_records++;
		return;
	}
	ebpf_note_tid(td, s->hdr.tid, s->hdr.comm);
	id = ebpf_stack_from(e, td, &s->st, false, true, &leaf, NULL);
	if (id < 0)
		return;
	stack_store__add(&e->stacks, (uint32_t)id, STACK_CPU, 1);
	td->cpu_samples++;
	if (!ebpf_keep_event(e, td))
		return;
	if (td->ncpu == td->capcpu) {
		size_t ncap = td->capcpu ? td->capcpu * 2 : 1024;
		struct ebpf_cpu_ev *nv = realloc(td->cpu, ncap * sizeof(*nv));

		if (!nv)
			return;
		td->cpu = nv;
		td->capcpu = ncap;
	}
	ev = &td->cpu[td->ncpu++];
	*ev = (struct ebpf_cpu_ev){ .ts = s->hdr.ts, .tid = s->hdr.tid, .cpu = s->hdr.cpu,
				    .stack = (uint32_t)id, .leaf = leaf };
}

static void ebpf_cpu__destroy(struct ebpf *e)
{
	for (int i = 0; i < e->nperf; i++) {
		if (e->perf_links[i])
			bpf_link__destroy(e->perf_links[i]);  /* closes its perf event too */
		else if (e->perf_fds[i] >= 0)
			close(e->perf_fds[i]);
	}
	free(e->perf_links);
	free(e->perf_fds);
	e->perf_links = NULL;
	e->perf_fds = NULL;
	e->nperf = 0;
	cpu_bpf__destroy(e->cpu);
	e->cpu = NULL;
}

static bool ebpf_cpu__is_on(const struct ebpf *e)
{
	return e->cpu != NULL;
}

const struct ebpf_collector_ops ebpf_cpu_ops = {
	.id = EC_CPU,
	.flag = EBPF_COLLECT_CPU,
	.rec_type = EBPF_REC_CPU_SAMPLE,
	.open = ebpf_cpu__open,
	.attach = ebpf_cpu__attach,
	.is_on = ebpf_cpu__is_on,
	.set_running = ebpf_cpu__set_running,
	.record = ebpf_cpu__record,
	.destroy = ebpf_cpu__destroy,
};
#endif
