/* SPDX-License-Identifier: MIT */
/*
 * `aiprof stacks`: every thread of the targets as ebpf__threads() read it, as text for a
 * person (innermost frame first, as py-spy dump and gdb print them) and as JSON
 * (schema aiprof.stacks/v1) for a program and for `aiprof merge`.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "collect/ebpf_internal.h"
#include "framename.h"
#include "jsonw.h"
#include "threads_dump.h"

static const char *const kind_names[] = { "native", "python", "kernel", "cut" };

/* "blocked" for a sleeping thread, "running" for a runnable one */
static const char *doing(const struct ebpf_thread *t)
{
	return t->state ? "blocked" : "running";
}

void threads_dump_meta_now(struct dump_meta *m)
{
	time_t now = time(NULL);
	struct tm tm;

	gmtime_r(&now, &tm);
	strftime(m->taken_at, sizeof(m->taken_at), "%Y-%m-%dT%H:%M:%SZ", &tm);
	if (gethostname(m->host, sizeof(m->host) - 1) < 0)
		m->host[0] = 0;
	m->host[sizeof(m->host) - 1] = 0;
}

int threads_dump_write_json_file(FILE *f, const struct ebpf *e, const struct dump_meta *m)
{
	struct jsonw *w = jsonw__new(jsonw_sink_file, f);

	if (!w)
		return -ENOMEM;
	threads_dump_write_json(w, e, m);
	jsonw_newline(w);
	return jsonw__finish(w) < 0 ? -EIO : 0;
}

void threads_dump_write_json(struct jsonw *w, const struct ebpf *e, const struct dump_meta *m)
{
	char nb[32];

	jsonw_obj_open(w);
	jsonw_kv_str(w, "schema", THREADS_DUMP_SCHEMA);
	jsonw_kv_str(w, "taken_at", m->taken_at);
	jsonw_kv_str(w, "host", m->host);
	jsonw_kv_uint(w, "took_us", m->took_ns / 1000);
	jsonw_kv_str(w, "unwinding", e->uw ? "cfi" : "fp");
	jsonw_key(w, "processes");
	jsonw_arr_open(w);
	for (size_t i = 0; i < e->nt; i++) {
		const struct ebpf_tdata *td = &e->t[i];

		jsonw_obj_open(w);
		jsonw_kv_int(w, "pid", td->pid);
		jsonw_kv_str(w, "comm", td->comm);
		if (td->parent)
			jsonw_kv_int(w, "parent", td->parent);
		if (m->ranks && i < m->nranks && m->ranks[i] >= 0)
			jsonw_kv_int(w, "rank", m->ranks[i]);
		else {
			jsonw_key(w, "rank");
			jsonw_null(w);
		}
		if (td->py)
			jsonw_kv_str(w, "python", py_proc__version(td->py));
		/* in the kernel's list as it was read, gone before their Python frames were:
		 * never shown with frames that may not be theirs */
		jsonw_kv_uint(w, "threads_ended_during_read", td->threads_ended);
		jsonw_key(w, "threads");
		jsonw_arr_open(w);
		for (size_t k = 0; k < td->nthreads; k++) {
			const struct ebpf_thread *t = &td->threads[k];
			const char *pyname = ebpf_pyname_of(td, t->tid);
			size_t nf = 0;
			const uint32_t *f = stack_store__stack_frames(&e->stacks, t->stack, &nf);

			jsonw_obj_open(w);
			jsonw_kv_uint(w, "tid", t->tid);
			jsonw_kv_str(w, "comm", t->comm);
			if (pyname)
				jsonw_kv_str(w, "python_name", pyname);
			if (t->gil)
				jsonw_kv_bool(w, "holds_gil", t->gil == EBPF_PY_GIL_HELD);
			jsonw_kv_str(w, "state", ebpf_state_letter(t->state));
			jsonw_kv_bool(w, "on_cpu", t->on_cpu);
			if (t->syscall >= 0)
				jsonw_kv_str(w, "syscall", ebpf_syscall_name((uint32_t)t->syscall, nb,
									     sizeof(nb)));
			if (t->wchan != UINT32_MAX) {
				size_t len;
				const char *wc = stack_store__frame_name(&e->stacks, t->wchan);

				frame_kind_of(wc, &len);
				jsonw_key(w, "wchan");
				jsonw_strn(w, wc, len);
			}
			if (t->for_ns) {
				jsonw_key(w, t->state ? "blocked_s" : "running_s");
				jsonw_fixed3(w, t->for_ns / 1000000);
			}
			jsonw_kv_bool(w, "whole_stack", t->whole);
			jsonw_key(w, "frames");
			jsonw_arr_open(w);
			/* innermost first; the root "comm-pid" frame is left out */
			for (size_t j = nf; f && j-- > 1;) {
				const char *name = stack_store__frame_name(&e->stacks, f[j]);
				size_t len;
				enum frame_kind fk = frame_kind_of(name, &len);

				jsonw_obj_open(w);
				jsonw_key(w, "name");
				jsonw_strn(w, name, len);
				jsonw_kv_str(w, "kind", kind_names[fk]);
				jsonw_obj_close(w);
			}
			jsonw_arr_close(w);
			jsonw_obj_close(w);
		}
		jsonw_arr_close(w);
		jsonw_obj_close(w);
	}
	jsonw_arr_close(w);
	jsonw_obj_close(w);
}

void threads_dump_write_text(FILE *out, const struct ebpf *e, const struct dump_meta *m)
{
	char nb[32];

	for (size_t i = 0; i < e->nt; i++) {
		const struct ebpf_tdata *td = &e->t[i];

		/* names are the target's: escaped for the terminal (framename.h) */
		fprintf(out, "Process %d (", td->pid);
		frame_name_fprint(out, td->comm, strnlen(td->comm, sizeof(td->comm)));
		fputc(')', out);
		if (m->ranks && i < m->nranks && m->ranks[i] >= 0)
			fprintf(out, ", rank %d", m->ranks[i]);
		if (td->py)
			fprintf(out, ", Python %s", py_proc__version(td->py));
		fprintf(out, ": %zu thread%s, read in %.1f ms on %s at %s", td->nthreads,
			td->nthreads == 1 ? "" : "s", (double)m->took_ns / 1e6, m->host, m->taken_at);
		if (td->threads_ended)
			fprintf(out, " (%u more ended during the read: not shown)", td->threads_ended);
		fputc('\n', out);
		for (size_t k = 0; k < td->nthreads; k++) {
			const struct ebpf_thread *t = &td->threads[k];
			const char *pyname = ebpf_pyname_of(td, t->tid);
			size_t nf = 0;
			const uint32_t *f = stack_store__stack_frames(&e->stacks, t->stack, &nf);

			fprintf(out, "\nThread %u ", t->tid);
			if (pyname) {
				frame_name_fprint_quoted(out, pyname, strlen(pyname));
				fputs(" (", out);
			} else {
				fputc('(', out);
			}
			frame_name_fprint(out, t->comm, strnlen(t->comm, sizeof(t->comm)));
			fprintf(out, "): %s", t->state ? ebpf_state_letter(t->state) : t->on_cpu ?
				"running" : "runnable");
			if (t->syscall >= 0)
				fprintf(out, " in %s()", ebpf_syscall_name((uint32_t)t->syscall, nb,
									    sizeof(nb)));
			if (t->for_ns)
				fprintf(out, ", %s for %.3f s", doing(t), (double)t->for_ns / 1e9);
			if (!t->whole)
				fprintf(out, " (stack incomplete: where is marked [...])");
			if (t->gil == EBPF_PY_GIL_HELD)
				fprintf(out, ", holding the GIL");
			if (t->on_cpu)
				fprintf(out, " (on a CPU as it was read: the stack may be torn)");
			fputc('\n', out);
			for (size_t j = nf; f && j-- > 1;) {
				const char *name = stack_store__frame_name(&e->stacks, f[j]);
				size_t len;
				enum frame_kind fk = frame_kind_of(name, &len);

				fputs("    ", out);
				frame_name_fprint(out, name, len);
				fprintf(out, "%s\n", fk == FK_KERNEL ? "  [kernel]" : "");
			}
		}
		fputc('\n', out);
	}
}
