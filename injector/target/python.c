/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

#include "procsyms.h"
#include "u64map.h"
#include "python.h"

#define PY_DEBUG_COOKIE "xdebugpy"

struct py_proc {
	pid_t pid;
	uint32_t version_hex;
	char version[24];
	const char *source;
	struct py_version_offsets off;
	uint64_t runtime, code_type;
	struct py_reader reader;
	struct u64map codes;      /* code address -> index + 1 into code (0: not a code object) */
	struct py_code *code;
	size_t ncode, capcode;
	/* threading._main_thread, looked up at most MAIN_TRIES times until found */
	unsigned main_tries;
	bool main_found;
	uint64_t main_tid;
	char main_name[64];
};

#define MAIN_TRIES 6

/* --python-names short: for every process of the run (a way of printing, like a locale) */
static bool short_names;

void py_set_short_names(bool on)
{
	short_names = on;
}

static int vm_read(void *ctx, uint64_t addr, void *buf, size_t len)
{
	const struct py_proc *p = ctx;
	struct iovec local = { .iov_base = buf, .iov_len = len };
	struct iovec remote = { .iov_base = (void *)(uintptr_t)addr, .iov_len = len };
	ssize_t n;

	n = process_vm_readv(p->pid, &local, 1, &remote, 1, 0);
	if (n < 0)
		return -errno;
	return (size_t)n == len ? 0 : -EFAULT;
}

void py_proc__free(struct py_proc *p)
{
	if (!p)
		return;
	for (size_t i = 0; i < p->ncode; i++)
		py_code__clear(&p->code[i]);
	free(p->code);
	u64map_clear(&p->codes);
	free(p);
}

/* A symbol of the interpreter: libpython first (a shared build), then the executable. */
static int find_sym(struct proc_syms *ps, const char *name, uint64_t *addr)
{
	int r = proc_syms__find(ps, "libpython3*", name, addr);

	if (r == -ENOENT)
		r = proc_syms__find(ps, NULL, name, addr);
	return r < 0 ? r : 0;
}

/*
 * 3.13 keeps a description of its own layout at the start of _PyRuntime. Where it is there
 * and says what the table says it is, it wins (it is the interpreter's own word, and covers
 * patch releases whose internals moved).
 */
struct py_debug_offsets_313 {
	char cookie[8];
	uint64_t version, free_threaded;
	struct { uint64_t size, finalizing, interpreters_head; } runtime_state;
	struct { uint64_t size, id, next, threads_head, gc, imports_modules, sysdict, builtins,
		 ceval_gil, gil_runtime_state, gil_runtime_state_enabled, gil_runtime_state_locked,
		 gil_runtime_state_holder; } interpreter_state;
	struct { uint64_t size, prev, next, interp, current_frame, thread_id, native_thread_id,
		 datastack_chunk, status; } thread_state;
	struct { uint64_t size, previous, executable, instr_ptr, localsplus, owner; } interpreter_frame;
	struct { uint64_t size, filename, name, qualname, linetable, firstlineno, argcount,
		 localsplusnames, localspluskinds, co_code_adaptive; } code_object;
	struct { uint64_t size, ob_type; } pyobject;
};

static bool fits16(uint64_t v)
{
	return v < 0xffff;
}

static int apply_debug_offsets(struct py_proc *p, char *why, size_t whylen)
{
	struct py_debug_offsets_313 d;
	struct py_version_offsets o = p->off;

	if (vm_read(p, p->runtime, &d, sizeof(d)) < 0 || memcmp(d.cookie, PY_DEBUG_COOKIE, 8) != 0)
		return 0;  /* not there: the table stands */
	if (d.free_threaded) {
		snprintf(why, whylen, "python %s is a free-threaded build, whose frames aiprof "
			 "cannot read yet", p->version);
		return -EPROTONOSUPPORT;
	}
	if ((d.version >> 16) != (p->version_hex >> 16))
		return 0;
	if (!fits16(d.thread_state.current_frame) || d.interpreter_frame.previous >= PY_FRAME_READ ||
	    d.interpreter_frame.executable >= PY_FRAME_READ ||
	    d.interpreter_frame.instr_ptr >= PY_FRAME_READ || d.interpreter_frame.owner >= PY_FRAME_READ)
		return 0;
	o.runtime_interpreters_head = (uint32_t)d.runtime_state.interpreters_head;
	o.interp_next = (uint32_t)d.interpreter_state.next;
	o.interp_threads_head = (uint32_t)d.interpreter_state.threads_head;
	o.tstate_next = (uint32_t)d.thread_state.next;
	o.tstate_interp = (uint32_t)d.thread_state.interp;
	o.tstate_native_thread_id = (uint32_t)d.thread_state.native_thread_id;
	o.bpf.ts_cframe = PY_OFF_NONE;
	o.bpf.ts_current_frame = (uint16_t)d.thread_state.current_frame;
	o.bpf.fr_previous = (uint16_t)d.interpreter_frame.previous;
	o.bpf.fr_code = (uint16_t)d.interpreter_frame.executable;
	o.bpf.fr_instr = (uint16_t)d.interpreter_frame.instr_ptr;
	o.bpf.fr_owner = (uint16_t)d.interpreter_frame.owner;
	o.code_filename = (uint32_t)d.code_object.filename;
	o.code_name = (uint32_t)d.code_object.name;
	o.code_qualname = (uint32_t)d.code_object.qualname;
	o.code_linetable = (uint32_t)d.code_object.linetable;
	o.code_firstlineno = (uint32_t)d.code_object.firstlineno;
	o.code_adaptive = (uint32_t)d.code_object.co_code_adaptive;
	o.ob_type = (uint32_t)d.pyobject.ob_type;
	p->off = o;
	p->source = "_Py_DebugOffsets";
	return 0;
}

int py_proc__new(pid_t pid, char *why, size_t whylen, struct py_proc **ret)
{
	struct proc_syms *ps = NULL;
	struct py_proc *p = NULL;
	const struct py_version_offsets *row;
	uint64_t version_addr = 0;
	uint32_t hex = 0;
	struct py_tstate ts[8];
	size_t n = 0;
	int r;

	why[0] = 0;
	r = proc_syms__new(pid, &ps);
	if (r < 0) {
		snprintf(why, whylen, "cannot read the memory map of pid %d: %s", pid, strerror(-r));
		return r;
	}
	p = calloc(1, sizeof(*p));
	if (!p) {
		r = -ENOMEM;
		goto fail;
	}
	p->pid = pid;
	p->reader = (struct py_reader){ .read = vm_read, .ctx = p };
	p->source = "table";
	r = find_sym(ps, "_PyRuntime", &p->runtime);
	if (r < 0) {
		snprintf(why, whylen, "no CPython in pid %d", pid);
		r = -ENOENT;
		goto fail;
	}
	if (find_sym(ps, "Py_Version", &version_addr) < 0 ||
	    vm_read(p, version_addr, &hex, sizeof(hex)) < 0) {
		snprintf(why, whylen, "pid %d runs a CPython older than 3.11 (no Py_Version); "
			 "Python frames need %s", pid, py_offsets_covered());
		r = -EPROTONOSUPPORT;
		goto fail;
	}
	p->version_hex = hex;
	snprintf(p->version, sizeof(p->version), "%u.%u.%u", hex >> 24, (hex >> 16) & 0xff,
		 (hex >> 8) & 0xff);
	row = py_offsets_for(hex);
	if (!row) {
		snprintf(why, whylen, "python %s: aiprof reads the frames of CPython %s only",
			 p->version, py_offsets_covered());
		r = -EPROTONOSUPPORT;
		goto fail;
	}
	p->off = *row;
	if (find_sym(ps, "PyCode_Type", &p->code_type) < 0) {
		snprintf(why, whylen, "python %s in pid %d: PyCode_Type not found", p->version, pid);
		r = -EPROTONOSUPPORT;
		goto fail;
	}
	if (row->minor >= 13 && (r = apply_debug_offsets(p, why, whylen)) < 0)
		goto fail;
	/* where the BPF walker reads whether a thread holds the GIL */
	p->off.bpf.gil_holder = row->runtime_gil_last_holder ?
				p->runtime + row->runtime_gil_last_holder : 0;
	/* a row that does not match what is in memory finds no thread states */
	r = py_list_threads(&p->reader, &p->off, p->runtime, ts, 8, &n);
	if (r == -EAGAIN && n)
		r = 0;          /* torn by threads that came and went, but found where they are */
	if (r < 0 || n == 0) {
		snprintf(why, whylen, "python %s in pid %d: no thread state found where the %s "
			 "offsets say (%s)", p->version, pid, p->source,
			 r < 0 ? strerror(-r) : "interpreter not initialised, or offsets wrong");
		/* an empty list read whole: an interpreter starting up (worth trying again) */
		r = r < 0 ? -EPROTONOSUPPORT : -EAGAIN;
		goto fail;
	}
	proc_syms__free(ps);
	*ret = p;
	return 0;
fail:
	proc_syms__free(ps);
	py_proc__free(p);
	return r;
}

const char *py_proc__version(const struct py_proc *p)
{
	return p->version;
}

const char *py_proc__offsets_source(const struct py_proc *p)
{
	return p->source;
}

const struct py_version_offsets *py_proc__offsets(const struct py_proc *p)
{
	return &p->off;
}

int py_proc__threads(struct py_proc *p, struct py_tstate *out, size_t max, size_t *ret_n)
{
	return py_list_threads(&p->reader, &p->off, p->runtime, out, max, ret_n);
}

int py_proc__thread_name(struct py_proc *p, uint64_t tstate, uint64_t native_tid, char *buf,
			 size_t len)
{
	int r = py_thread_name(&p->reader, &p->off, p->code_type, tstate, buf, len);

	if (r != -ENOENT)
		return r;
	/* not started by threading: the main thread, if it is this one (looked up once: a
	 * walk of sys.modules) */
	if (!p->main_found && p->main_tries < MAIN_TRIES) {
		p->main_tries++;
		p->main_found = py_main_thread(&p->reader, &p->off, p->runtime, &p->main_tid,
					       p->main_name, sizeof(p->main_name)) == 0;
	}
	if (!p->main_found || p->main_tid != native_tid)
		return -ENOENT;
	snprintf(buf, len, "%s", p->main_name);
	return 0;
}

void py_proc__walk(struct py_proc *p, uint64_t tstate, struct ebpf_stacks *st)
{
	uint32_t cut, status;

	st->py_frames = (uint16_t)py_walk_frames(&p->reader, &p->off, tstate, st->py, EBPF_PY_MAX,
						 EBPF_PY_OUTER, &cut, &status);
	st->py_cut = (uint16_t)cut;
	st->py_status = (uint16_t)status;
	st->py_gil = EBPF_PY_GIL_UNKNOWN;
	if (p->off.bpf.gil_holder) {
		/* the GIL's last_holder and locked, as the BPF sampler reads them */
		struct { uint64_t last_holder; int32_t locked; } g;

		if (vm_read(p, p->off.bpf.gil_holder, &g, sizeof(g)) == 0)
			st->py_gil = g.locked && g.last_holder == tstate ? EBPF_PY_GIL_HELD :
					  EBPF_PY_GIL_NOT_HELD;
	}
}

static const struct py_code *code_at(struct py_proc *p, uint64_t addr)
{
	struct py_code c;
	uint64_t v;

	if (u64map_get(&p->codes, addr, &v))
		return v ? &p->code[v - 1] : NULL;
	if (py_read_code(&p->reader, &p->off, p->code_type, addr, &c) < 0) {
		u64map_put(&p->codes, addr, 0);
		return NULL;
	}
	if (p->ncode == p->capcode) {
		size_t ncap = p->capcode ? p->capcode * 2 : 64;
		struct py_code *nv = realloc(p->code, ncap * sizeof(*nv));

		if (!nv) {
			py_code__clear(&c);
			return NULL;
		}
		p->code = nv;
		p->capcode = ncap;
	}
	if (u64map_put(&p->codes, addr, p->ncode + 1) < 0) {
		py_code__clear(&c);
		return NULL;
	}
	p->code[p->ncode] = c;
	return &p->code[p->ncode++];
}

int py_proc__frame(struct py_proc *p, uint64_t code, uint64_t instr, char *buf, size_t len)
{
	const struct py_code *c = code_at(p, code);
	int line;

	if (!c)
		return -EINVAL;
	if (instr < c->bytecode || instr - c->bytecode > PY_LINETABLE_MAX * 16ULL)
		line = c->firstlineno;  /* a frame that has not started yet */
	else
		line = py_linetable_line(c->linetable, c->linetable_len, c->firstlineno,
					 instr - c->bytecode);
	py_format_frame(c, line, short_names, buf, len);
	return 0;
}
