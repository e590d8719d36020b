/* SPDX-License-Identifier: MIT */
/* Flame graphs and report.html; see report.h. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "model/profile.h"
#include "analyze/analysis.h"
#include "analyze/diagnosis.h"
#include "analyze/findings.h"
#include "collect/ebpf.h"
#include "target/target.h"
#include "flamegraph.h"
#include "launch_stacks.h"
#include "membuf.h"
#include "report.h"
#include "timeline.h"

#define MIB (1024.0 * 1024.0)

static void esc(struct membuf *b, const char *s)
{
	if (s)
		membuf_escape(b, s, strlen(s), 0);
}

/* ---- report.html --------------------------------------------------------------------------- */

static const char css[] =
	"body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0;color:#1d2430;"
	"background:#f6f7f9}\n"
	"header{background:#1d2430;color:#fff;padding:18px 28px}\n"
	"header h1{margin:0;font-size:22px}header p{margin:4px 0 0;color:#c9d1dc;font-size:14px}\n"
	"main{padding:8px 28px 40px;max-width:1260px}\n"
	"h2{font-size:19px;margin:28px 0 10px;border-bottom:1px solid #d8dde5;padding-bottom:4px}\n"
	".finding{background:#fff;border-radius:8px;border-left:6px solid #888;padding:12px 16px;"
	"margin:12px 0;box-shadow:0 1px 2px rgba(0,0,0,.08)}\n"
	".finding.critical{border-left-color:#c62828}.finding.warning{border-left-color:#ef8f00}"
	".finding.info{border-left-color:#1e88e5}\n"
	".finding h3{margin:0 0 6px;font-size:17px}\n"
	".sev{display:inline-block;font-size:12px;font-weight:600;text-transform:uppercase;"
	"padding:2px 8px;border-radius:10px;margin-left:8px;vertical-align:middle;color:#fff}\n"
	".sev.critical{background:#c62828}.sev.warning{background:#ef8f00}.sev.info{background:#1e88e5}\n"
	".remedy{background:#eef6ee;border-radius:6px;padding:8px 12px;margin-top:8px}\n"
	"table{border-collapse:collapse;font-size:13px;margin:6px 0;background:#fff}\n"
	"th,td{border:1px solid #dde2ea;padding:4px 8px;text-align:left;vertical-align:top}\n"
	"th{background:#eef1f5}td.n{text-align:right;font-variant-numeric:tabular-nums}\n"
	".ok{background:#fff;border-radius:8px;padding:12px 16px;border-left:6px solid #2e7d32}\n"
	".note{color:#555;font-size:13px}\n"
	".fg{background:#fff;border-radius:8px;padding:8px;margin:10px 0}\n"
	".fg svg{width:100%;height:auto}\n"
	"code{background:#eef1f5;padding:1px 4px;border-radius:3px}\n";

static void td_num(struct membuf *b, const char *fmt, double v)
{
	membuf_puts(b, "<td class=\"n\">");
	membuf_printf(b, fmt, v);
	membuf_puts(b, "</td>");
}

static void td_str(struct membuf *b, const char *s)
{
	membuf_puts(b, "<td>");
	esc(b, s);
	membuf_puts(b, "</td>");
}

static void write_evidence(struct membuf *b, const struct finding *f)
{
	membuf_puts(b, "<table class=\"evidence\"><tr><th>evidence</th><th>value</th></tr>\n");
	for (size_t k = 0; k < f->nev; k++) {
		const struct evidence *e = &f->ev[k];

		membuf_puts(b, "<tr>");
		td_str(b, e->key);
		if (e->type == EV_U64)
			membuf_printf(b, "<td class=\"n\">%llu</td>", (unsigned long long)e->u);
		else if (e->type == EV_DOUBLE)
			td_num(b, "%.6g", e->d);
		else
			td_str(b, e->s);
		membuf_puts(b, "</tr>\n");
	}
	membuf_puts(b, "</table>\n");
}

static void write_findings(struct membuf *b, const struct profile *p)
{
	const struct findings *f = p->diag ? p->diag->findings : NULL;

	membuf_puts(b, "<h2 id=\"findings\">Findings</h2>\n");
	if (!f) {
		membuf_puts(b, "<p class=\"note\">The diagnosis could not be computed.</p>\n");
		return;
	}
	if (!f->n)
		membuf_puts(b, "<div class=\"ok\"><strong>No findings.</strong> None of the rules "
			    "(pageable copies, small kernels, synchronous checkpoints, data loader "
			    "stalls, NCCL hangs, stragglers, excessive synchronisation, GPU memory "
			    "growth) fired for this window.</div>\n");
	for (size_t i = 0; i < f->n; i++) {
		const struct finding *x = &f->v[i];
		const char *sev = finding_severity_name(x->severity);

		membuf_printf(b, "<div class=\"finding %s\" data-category=\"", sev);
		esc(b, x->category);
		membuf_puts(b, "\"><h3>");
		esc(b, x->category);
		membuf_printf(b, "<span class=\"sev %s\">%s</span></h3>\n<p>", sev, sev);
		esc(b, x->summary);
		membuf_puts(b, "</p>\n");
		write_evidence(b, x);
		membuf_puts(b, "<div class=\"remedy\"><strong>Remedy.</strong> ");
		esc(b, x->remedy);
		membuf_puts(b, "</div></div>\n");
	}
	if (!f->waits_known) {
		membuf_puts(b, "<p class=\"note\">Not checked: SyncCheckpoint and DataLoaderStall "
			    "need off-CPU/syscall data (");
		esc(b, f->waits_why);
		membuf_puts(b, ").</p>\n");
	}
}

static void write_kernels(struct membuf *b, const struct analysis *a)
{
	membuf_printf(b, "<h2 id=\"kernels\">Top kernels</h2>\n<p class=\"note\">%s</p>\n",
		      a->gpu_timing ? "By GPU time (CUPTI)." :
		      "By launch count: no GPU timing (CUPTI) in this window, so kernel durations "
		      "and GPU busy time are unknown (API-level timing).");
	if (!a->nkernels) {
		membuf_puts(b, "<p class=\"note\">No kernel launches in the window.</p>\n");
		return;
	}
	membuf_puts(b, "<table><tr><th>kernel</th><th>launches</th><th>launch API ms</th>");
	if (a->gpu_timing)
		membuf_puts(b, "<th>GPU ms</th><th>mean us</th><th>min us</th><th>max us</th>");
	membuf_puts(b, "</tr>\n");
	for (size_t i = 0; i < a->nkernels && i < AN_TOP_KERNELS; i++) {
		const struct an_kernel *k = &a->kernels[i];

		membuf_puts(b, "<tr>");
		td_str(b, k->name);
		td_num(b, "%.0f", (double)k->launches);
		td_num(b, "%.3f", (double)k->api_ns / 1e6);
		if (a->gpu_timing) {
			td_num(b, "%.3f", (double)k->gpu_ns / 1e6);
			td_num(b, "%.1f", k->gpu_count ? (double)k->gpu_ns / (double)k->gpu_count / 1e3 : 0);
			td_num(b, "%.1f", (double)k->gpu_min_ns / 1e3);
			td_num(b, "%.1f", (double)k->gpu_max_ns / 1e3);
		}
		membuf_puts(b, "</tr>\n");
	}
	membuf_puts(b, "</table>\n");
	if (a->gpu_timing && a->nstreams) {
		membuf_puts(b, "<table><tr><th>GPU stream</th><th>rank</th><th>kernels</th>"
			    "<th>busy %</th></tr>\n");
		for (size_t i = 0; i < a->nstreams; i++) {
			const struct an_stream *s = &a->streams[i];

			membuf_printf(b, "<tr><td>pid %d, GPU %u stream %u</td>", s->pid, s->device, s->stream);
			td_num(b, "%.0f", (double)s->rank);
			td_num(b, "%.0f", (double)s->kernels);
			td_num(b, "%.1f", s->busy_pct);
			membuf_puts(b, "</tr>\n");
		}
		membuf_puts(b, "</table>\n");
	}
}

static void write_transfers(struct membuf *b, const struct analysis *a)
{
	membuf_puts(b, "<h2 id=\"copies\">Copies and collectives</h2>\n");
	if (a->ncopies) {
		membuf_puts(b, "<table><tr><th>kind</th><th>host memory</th><th>count</th><th>MiB</th>"
			    "<th>API ms</th><th>blocking GB/s</th>");
		membuf_puts(b, a->gpu_timing ? "<th>GPU GB/s</th></tr>\n" : "</tr>\n");
		for (size_t i = 0; i < a->ncopies; i++) {
			const struct an_copy *c = &a->copies[i];

			membuf_puts(b, "<tr>");
			td_str(b, c->kind);
			td_str(b, c->host_memory);
			td_num(b, "%.0f", (double)c->count);
			td_num(b, "%.1f", (double)c->bytes / MIB);
			td_num(b, "%.3f", (double)c->api_ns / 1e6);
			if (c->blocking_ns)
				td_num(b, "%.2f", (double)c->blocking_bytes / (double)c->blocking_ns);
			else
				membuf_puts(b, "<td class=\"n\">-</td>");   /* asynchronous: no host view */
			if (a->gpu_timing)
				td_num(b, "%.2f", c->gpu_ns ? (double)c->gpu_bytes / (double)c->gpu_ns : 0);
			membuf_puts(b, "</tr>\n");
		}
		membuf_puts(b, "</table>\n");
	}
	if (a->nnccl) {
		membuf_puts(b, "<table><tr><th>NCCL op</th><th>count</th><th>MiB</th><th>API ms</th>"
			    "<th>longest ms</th></tr>\n");
		for (size_t i = 0; i < a->nnccl; i++) {
			const struct an_nccl_op *n = &a->nccl[i];

			membuf_puts(b, "<tr>");
			td_str(b, n->op);
			td_num(b, "%.0f", (double)n->count);
			td_num(b, "%.1f", (double)n->bytes / MIB);
			td_num(b, "%.3f", (double)n->api_ns / 1e6);
			td_num(b, "%.3f", (double)n->max_ns / 1e6);
			membuf_puts(b, "</tr>\n");
		}
		membuf_puts(b, "</table>\n");
	}
	for (size_t g = 0; g < a->ngroups; g++) {
		const struct an_group *gr = &a->groups[g];

		membuf_printf(b, "<table><tr><th>rank (of %d)</th><th>pid / tid</th><th>collectives</th>"
			      "<th>median lateness ms</th><th>mean lateness ms</th><th>arrived last</th>"
			      "</tr>\n", gr->nranks);
		for (size_t j = 0; j < gr->nm; j++) {
			const struct an_rank *m = &gr->m[j];
			const struct an_thread *th = &a->threads[m->thread];

			membuf_printf(b, "<tr><td class=\"n\">%d</td><td>%d / %u</td>", m->rank, th->pid,
				      th->tid);
			td_num(b, "%.0f", (double)th->collectives);
			td_num(b, "%.3f", (double)m->lateness_median_ns / 1e6);
			td_num(b, "%.3f", (double)m->lateness_mean_ns / 1e6);
			membuf_printf(b, "<td class=\"n\">%llu of %zu</td></tr>\n",
				      (unsigned long long)m->last_count, gr->ncoll);
		}
		membuf_puts(b, "</table>\n");
	}
	membuf_puts(b, "<p class=\"note\">Compute/communication overlap: ");
	if (a->overlap_known)
		membuf_printf(b, "%.1f%% of communication kernel time overlaps compute kernels.",
			      a->comm_ns ? 100.0 * (double)a->overlap_ns / (double)a->comm_ns : 0);
	else
		membuf_puts(b, a->gpu_timing ? "no communication kernels in the GPU records." :
			    "unknown (API-level timing).");
	membuf_puts(b, "</p>\n");
}

static void write_timeline_help(struct membuf *b, const struct profile *p)
{
	membuf_puts(b, "<h2 id=\"timeline\">Open the timeline</h2>\n<ol>\n"
		    "<li>Go to <a href=\"https://ui.perfetto.dev\">ui.perfetto.dev</a>, choose "
		    "<em>Open trace file</em> and pick <code>timeline.json.gz</code> from this folder "
		    "(it stays on your machine: the UI runs in the browser). Or open "
		    "<code>chrome://tracing</code> in Chrome and <em>Load</em> it.</li>\n"
		    "<li>One process per target, one track per thread (named with its NCCL rank) and "
		    "one per GPU stream. Categories: <code>cuda_api</code>, <code>cuda_kernel</code>, "
		    "<code>cuda_memcpy</code>, <code>cuda_memory</code>, <code>nccl</code>, "
		    "<code>rdma</code>, <code>syscall</code>, <code>cpu_sample</code>, "
		    "<code>offcpu</code>, <code>python</code>; the arguments of a slice carry bytes, "
		    "kind, grid, op, count, datatype, rank and path.</li>\n"
		    "<li>Times are CLOCK_MONOTONIC in microseconds, the one clock of every source. "
		    "Click a slice for its arguments; arrows join launches to their kernels when "
		    "GPU timing (CUPTI) is there.</li>\n</ol>\n");
	if (p->timeline && p->timeline->events_aggregated)
		membuf_printf(b, "<p class=\"note\">The window was over the timeline's size budget: "
			      "%llu events are folded into %llu slices (their args say how many and "
			      "their total time). summary.json has every count.</p>\n",
			      (unsigned long long)p->timeline->events_aggregated,
			      (unsigned long long)p->timeline->aggregate_slices);
}

static void write_thresholds(struct membuf *b)
{
	size_t n;
	const struct finding_threshold_row *t = findings_thresholds(&n);

	membuf_puts(b, "<details><summary>Rules and thresholds</summary><table><tr><th>rule</th>"
		    "<th>threshold</th><th>value</th><th>why</th></tr>\n");
	for (size_t i = 0; i < n; i++) {
		membuf_puts(b, "<tr>");
		td_str(b, t[i].category);
		td_str(b, t[i].name);
		membuf_printf(b, "<td class=\"n\">%.6g %s</td>", t[i].value, t[i].unit);
		td_str(b, t[i].why);
		membuf_puts(b, "</tr>\n");
	}
	membuf_puts(b, "</table></details>\n");
}

/* What the record rate kept the collectors from recording (summary.json, ebpf.record_rate) */
static void write_unrecorded(struct membuf *b, const struct ebpf_cost *c)
{
	if (c->offcpu_site_stacks)
		membuf_printf(b, " %" PRIu64 " off-CPU blocks (%.3f s) came at a site their thread "
			      "had recorded in the last second: they have that record's stacks, "
			      "none were taken for them (summary.json, ebpf.record_rate).",
			      c->offcpu_site_stacks, (double)c->offcpu_site_stacks_ns / 1e9);
	if (c->slow_site)
		membuf_printf(b, " %" PRIu64 " slow syscalls came at a site (file, user pc) their "
			      "thread had recorded one at in the last second: they have that "
			      "record's file, timed until they got the CPU back (summary.json, "
			      "ebpf.record_rate).", c->slow_site);
	if (!c->offcpu_not_recorded && !c->slow_not_recorded && !c->untimed)
		return;
	membuf_printf(b, " Past the record rate (%" PRIu32 " a second per thread), counted and "
		      "not recorded: %" PRIu64 " off-CPU blocks (%.3f s, one frame in the off-CPU "
		      "flame graph), %" PRIu64 " slow syscalls, and %" PRIu64 " syscalls not timed "
		      "(summary.json, ebpf.record_rate).", c->record_rate, c->offcpu_not_recorded,
		      (double)c->offcpu_not_recorded_ns / 1e9, c->slow_not_recorded, c->untimed);
}

/* What keeping --budget took (summary.json, ebpf.budget) */
static void write_budget(struct membuf *b, const struct ebpf_cost *c)
{
	const struct ebpf_budget *bu = &c->budget;
	double share;

	if (!bu->ppm)
		return;
	if (!bu->kept_by_measure) {
		membuf_puts(b, " Budget: not kept (the cost could not be measured).");
		return;
	}
	share = c->targets_cpu_ns ? 100.0 * (double)c->bpf_ns / (double)c->targets_cpu_ns : 0;
	membuf_printf(b, " Budget %.3g%% of the targets' CPU: %s (%.2f%%)", bu->ppm / 1e4,
		      share * 1e4 <= bu->ppm ? "kept" : "not kept", share);
	if (bu->changes_total)
		membuf_printf(b, "; record rate lowered to %" PRIu32 " a second per thread, off-CPU "
			      "and syscall collectors paused %" PRIu32 " times for %.1f s, nothing of "
			      "theirs recorded meanwhile", bu->lowest_rate, bu->pauses,
			      (double)bu->paused_ns / 1e9);
	membuf_puts(b, " (summary.json, ebpf.budget).");
}

/* One line: what the window cost the node in aiprof's BPF programs (summary.json, ebpf.cost) */
static void write_cost(struct membuf *b, const struct profile *p)
{
	const struct ebpf_cost *c = ebpf__cost(p->ebpf);

	if (!p->ebpf)
		return;
	membuf_puts(b, "<p class=\"note\" id=\"cost\">Cost of this window: ");
	if (!c || !c->measured) {
		membuf_puts(b, "not measured (");
		esc(b, c ? c->why : "the window did not run");
		membuf_puts(b, ").");
		if (c) {
			write_budget(b, c);
			write_unrecorded(b, c);
		}
		membuf_puts(b, "</p>\n");
		return;
	}
	membuf_printf(b, "aiprof's BPF programs ran %.3f s of CPU in the %.1f s window "
		      "(%" PRIu64 " runs, on every CPU, for every task their tracepoints fire for), ",
		      (double)c->bpf_ns / 1e9, (double)c->window_ns / 1e9, c->bpf_runs);
	if (c->targets_cpu_ns)
		membuf_printf(b, "%.2f%% of the %.2f s of CPU the targets used",
			      100.0 * (double)c->bpf_ns / (double)c->targets_cpu_ns,
			      (double)c->targets_cpu_ns / 1e9);
	else
		membuf_puts(b, "while the targets used no measurable CPU");
	membuf_printf(b, "; the injector itself used %.3f s (summary.json, ebpf.cost).",
		      (double)c->injector_cpu_ns / 1e9);
	write_budget(b, c);
	write_unrecorded(b, c);
	membuf_puts(b, "</p>\n");
}

void report_html(const struct profile *p, const char *const svgs[3], struct membuf *b)
{
	static const char *const fg_titles[3] = { "On-CPU flame graph", "Off-CPU flame graph",
						  "GPU launches by call stack" };
	static const char *const fg_files[3] = { "flamegraph.svg", "flamegraph-offcpu.svg",
						 "flamegraph-gpu.svg" };
	const struct analysis *a = p->diag ? p->diag->analysis : NULL;
	time_t secs = (time_t)(p->start_realtime_ns / 1000000000ULL);
	char when[40];
	struct tm tm;

	gmtime_r(&secs, &tm);
	strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S UTC", &tm);
	membuf_puts(b, "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
		    "<meta name=\"viewport\" content=\"width=device-width\">"
		    "<title>aiprof report</title>\n<style>\n");
	membuf_puts(b, css);
	membuf_puts(b, "</style></head><body>\n<header><h1>aiprof report</h1><p>");
	membuf_printf(b, "%s, %.3g s window, ", when, (double)(p->end_ns - p->start_ns) / 1e9);
	for (size_t i = 0; i < p->ntargets; i++) {
		membuf_puts(b, i ? ", " : "");
		esc(b, p->targets[i].comm);
		membuf_printf(b, " (pid %d%s", p->targets[i].pid, p->targets[i].error ? ", failed" : "");
		if (p->targets[i].died) {
			/* a process that ended in the window is named, with how */
			char how[64];

			proc_status_text(p->targets[i].exit_status, how, sizeof(how));
			membuf_printf(b, ", %s", how);
		}
		membuf_puts(b, ")");
	}
	membuf_printf(b, "; GPU timing: %s</p>\n",
		      a && a->gpu_timing ? "CUPTI" : "API-level (no CUPTI)");
	write_cost(b, p);
	membuf_puts(b, "</header>\n<main>\n");
	write_findings(b, p);
	membuf_puts(b, "<h2 id=\"flamegraphs\">Flame graphs</h2>\n<p class=\"note\">Hover for "
		    "details, click a frame to zoom, <em>Search</em> highlights frames matching a "
		    "regular expression, <em>Reset Zoom</em> goes back. Each is also a file in this "
		    "folder.</p>\n");
	for (int i = 0; i < 3; i++) {
		membuf_puts(b, "<div class=\"fg\"><strong>");
		membuf_puts(b, fg_titles[i]);
		membuf_printf(b, "</strong> <span class=\"note\">(%s)</span>\n", fg_files[i]);
		if (svgs[i])
			membuf_puts(b, svgs[i]);
		else
			membuf_puts(b, "<p class=\"note\">Not recorded in this window (see "
				    "summary.json, not_collected).</p>");
		membuf_puts(b, "</div>\n");
	}
	if (a) {
		write_kernels(b, a);
		write_transfers(b, a);
	}
	write_timeline_help(b, p);
	write_thresholds(b);
	membuf_puts(b, "<p class=\"note\">Files: timeline.json.gz, summary.json (schema "
		    "aiprof.summary/v2), stacks.folded, offcpu.folded, gpu.folded, flame graphs.</p>\n"
		    "</main></body></html>\n");
}

/* renders one folded text to an SVG string (NUL-terminated, caller frees) */
static int render(const char *folded, size_t len, const struct fg_opts *o, char **ret)
{
	struct fg_tree *t = NULL;
	struct membuf out = { 0 };
	int r;

	r = fg_tree__parse(folded, len, &t);
	if (r < 0)
		return r;
	r = fg_tree__svg(t, o, &out);
	fg_tree__free(t);
	if (r < 0) {
		membuf_free(&out);
		return r;
	}
	*ret = out.p;
	return 0;
}

static int slurp(const char *path, char **ret, size_t *len)
{
	FILE *f = fopen(path, "re");
	struct membuf b = { 0 };
	char chunk[65536];
	size_t n;

	if (!f)
		return -errno;
	while ((n = fread(chunk, 1, sizeof(chunk), f)) > 0)
		membuf_put(&b, chunk, n);
	fclose(f);
	if (b.failed) {
		membuf_free(&b);
		return -ENOMEM;
	}
	*ret = b.p ? b.p : strdup("");
	*len = b.len;
	return *ret ? 0 : -ENOMEM;
}

static int write_svg(const char *dir, const char *name, const char *svg)
{
	struct membuf b = { 0 };
	char path[4200];
	int r;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	membuf_puts(&b, "<?xml version=\"1.0\" standalone=\"no\"?>\n");
	membuf_puts(&b, svg);
	r = membuf_write_file(&b, path);
	membuf_free(&b);
	return r;
}

int report_write(const struct profile *p, const char *dir, char *ret_path, size_t len)
{
	static const char *const folded[2] = { "stacks.folded", "offcpu.folded" };
	static const char *const svg_names[3] = { "flamegraph.svg", "flamegraph-offcpu.svg",
						  "flamegraph-gpu.svg" };
	const char *unit = "launches";
	struct fg_opts opts[3] = {
		{ .id = "cpu", .title = "On-CPU", .unit = "samples", .palette = FG_HOT,
		  .subtitle = "where threads ran: stacks sampled on CPU, Python frames merged" },
		{ .id = "offcpu", .title = "Off-CPU", .unit = "us", .palette = FG_BLUE,
		  .subtitle = "where threads waited: microseconds blocked, by stack" },
		{ .id = "gpu", .title = "GPU launches", .palette = FG_GPU },
	};
	char *svgs[3] = { NULL, NULL, NULL };
	struct membuf gpu = { 0 }, html = { 0 };
	struct launch_stacks_stats gst;
	char path[4200], sub[256], title[80];
	int r = 0;

	for (int i = 0; i < 2; i++) {
		char *text = NULL;
		size_t n = 0;

		snprintf(path, sizeof(path), "%s/%s", dir, folded[i]);
		r = slurp(path, &text, &n);
		if (r == -ENOENT) {
			r = 0;
			continue;
		}
		if (r < 0)
			goto out;
		r = render(text, n, &opts[i], &svgs[i]);
		free(text);
		if (r < 0)
			goto out;
		r = write_svg(dir, svg_names[i], svgs[i]);
		if (r < 0)
			goto out;
	}
	/* the wall-clock view: a file of its own, not inline */
	{
		struct fg_opts wo = { .id = "wall", .title = "Wall clock", .unit = "us",
				      .palette = FG_HOT, .subtitle = "where the threads' time went, on "
				      "a CPU (samples x 1/frequency) or off it (blocks of at least "
				      "--offcpu-min), microseconds by stack" };
		char *text = NULL, *svg = NULL;
		size_t n = 0;

		snprintf(path, sizeof(path), "%s/wall.folded", dir);
		r = slurp(path, &text, &n);
		if (r == 0) {
			r = render(text, n, &wo, &svg);
			free(text);
			if (r == 0)
				r = write_svg(dir, "flamegraph-wall.svg", svg);
			free(svg);
		}
		if (r == -ENOENT)
			r = 0;
		if (r < 0)
			goto out;
	}
	r = launch_stacks_folded(p, &gpu, &gst);
	if (r < 0)
		goto out;
	if (gpu.len) {
		snprintf(path, sizeof(path), "%s/gpu.folded", dir);
		r = membuf_write_file(&gpu, path);
		if (r < 0)
			goto out;
		unit = gst.by_gpu_time ? "ns" : "launches";
		snprintf(sub, sizeof(sub), "CPU call stacks at kernel launches, weighted by %s; %llu of "
			 "%llu launches with a call stack (%llu unwound by CFI)",
			 gst.by_gpu_time ? "the kernel's GPU time in ns (CUPTI)" :
					   "launch count (no GPU timing in this window)",
			 (unsigned long long)gst.launches_with_stack, (unsigned long long)gst.launches,
			 (unsigned long long)gst.launches_stack_cfi);
		snprintf(title, sizeof(title), "GPU launches by call stack, weight: %s",
			 gst.by_gpu_time ? "kernel time" : "launch count");
		opts[2].title = title;
		opts[2].unit = unit;
		opts[2].subtitle = sub;
		r = render(gpu.p, gpu.len, &opts[2], &svgs[2]);
		if (r < 0)
			goto out;
		r = write_svg(dir, svg_names[2], svgs[2]);
		if (r < 0)
			goto out;
	}
	report_html(p, (const char *const *)svgs, &html);
	snprintf(path, sizeof(path), "%s/report.html", dir);
	r = membuf_write_file(&html, path);
	if (r == 0)
		snprintf(ret_path, len, "%s", path);
out:
	for (int i = 0; i < 3; i++)
		free(svgs[i]);
	membuf_free(&gpu);
	membuf_free(&html);
	return r;
}
