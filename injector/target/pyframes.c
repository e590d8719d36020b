/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pyframes.h"

static int rd(const struct py_reader *r, uint64_t addr, void *buf, size_t len)
{
	if (!addr || addr + len < addr)
		return -EFAULT;
	return r->read(r->ctx, addr, buf, len);
}

static int rd_u64(const struct py_reader *r, uint64_t addr, uint64_t *v)
{
	return rd(r, addr, v, sizeof(*v));
}

/* Appends code point cp as UTF-8 if it fits (with room for the NUL); false if not. */
static bool put_utf8(char *buf, size_t len, size_t *pos, uint32_t cp)
{
	char tmp[4];
	size_t n;

	if (cp >= 0xd800 && cp <= 0xdfff)
		cp = 0xfffd;  /* lone surrogates (surrogateescape) are not valid UTF-8 */
	if (cp < 0x80) {
		tmp[0] = (char)cp;
		n = 1;
	} else if (cp < 0x800) {
		tmp[0] = (char)(0xc0 | cp >> 6);
		tmp[1] = (char)(0x80 | (cp & 0x3f));
		n = 2;
	} else if (cp < 0x10000) {
		tmp[0] = (char)(0xe0 | cp >> 12);
		tmp[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
		tmp[2] = (char)(0x80 | (cp & 0x3f));
		n = 3;
	} else if (cp <= 0x10ffff) {
		tmp[0] = (char)(0xf0 | cp >> 18);
		tmp[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
		tmp[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
		tmp[3] = (char)(0x80 | (cp & 0x3f));
		n = 4;
	} else {
		return put_utf8(buf, len, pos, 0xfffd);
	}
	if (*pos + n + 1 > len)
		return false;
	memcpy(buf + *pos, tmp, n);
	*pos += n;
	return true;
}

int py_read_str(const struct py_reader *r, const struct py_version_offsets *o, uint64_t addr,
		char *buf, size_t len)
{
	uint8_t raw[PY_STR_MAX * 4];
	uint64_t length = 0;
	uint32_t state = 0, kind, charsz;
	size_t n, pos = 0;
	uint64_t data;
	int err;

	if (!len)
		return -EINVAL;
	buf[0] = 0;
	if ((err = rd_u64(r, addr + o->unicode_length, &length)) < 0 ||
	    (err = rd(r, addr + o->unicode_state, &state, sizeof(state))) < 0)
		return err;
	kind = (state >> 2) & 7;
	if (!((state >> 5) & 1))      /* not compact: a legacy string, never a code name */
		return -EINVAL;
	if ((state >> 6) & 1) {       /* ascii */
		if (kind != 1)
			return -EINVAL;
		data = addr + o->unicode_ascii_size;
	} else {
		data = addr + o->unicode_compact_size;
	}
	if (kind != 1 && kind != 2 && kind != 4)
		return -EINVAL;
	if (length > (1u << 30))
		return -EINVAL;
	charsz = kind;
	n = (size_t)length;
	if (n > PY_STR_MAX)
		n = PY_STR_MAX;
	if (n && (err = rd(r, data, raw, n * charsz)) < 0)
		return err;
	for (size_t i = 0; i < n; i++) {
		uint32_t cp;

		if (charsz == 1)
			cp = raw[i];
		else if (charsz == 2)
			cp = (uint32_t)raw[2 * i] | (uint32_t)raw[2 * i + 1] << 8;
		else
			cp = (uint32_t)raw[4 * i] | (uint32_t)raw[4 * i + 1] << 8 |
			     (uint32_t)raw[4 * i + 2] << 16 | (uint32_t)raw[4 * i + 3] << 24;
		if (cp == 0)
			cp = 0xfffd;
		if (!put_utf8(buf, len, &pos, cp))
			break;  /* truncated at a whole character */
	}
	buf[pos] = 0;
	return 0;
}

void py_code__clear(struct py_code *c)
{
	free(c->linetable);
	memset(c, 0, sizeof(*c));
}

int py_read_code(const struct py_reader *r, const struct py_version_offsets *o,
		 uint64_t code_type, uint64_t addr, struct py_code *ret)
{
	struct py_code c = { 0 };
	uint64_t type = 0, p = 0, tsize = 0;
	int32_t first = 0;
	int err;

	memset(ret, 0, sizeof(*ret));
	if ((err = rd_u64(r, addr + o->ob_type, &type)) < 0)
		return err;
	if (!code_type || type != code_type)
		return -EINVAL;
	if ((err = rd_u64(r, addr + o->code_qualname, &p)) < 0 ||
	    py_read_str(r, o, p, c.qualname, sizeof(c.qualname)) < 0 || !c.qualname[0]) {
		if ((err = rd_u64(r, addr + o->code_name, &p)) < 0)
			return err;
		if ((err = py_read_str(r, o, p, c.qualname, sizeof(c.qualname))) < 0)
			return err;
	}
	if ((err = rd_u64(r, addr + o->code_filename, &p)) < 0)
		return err;
	if (py_read_str(r, o, p, c.filename, sizeof(c.filename)) < 0)
		snprintf(c.filename, sizeof(c.filename), "?");
	if ((err = rd(r, addr + o->code_firstlineno, &first, sizeof(first))) < 0)
		return err;
	c.firstlineno = first;
	c.bytecode = addr + o->code_adaptive;
	/* the line table is a bytes object; without it frames just have no line numbers */
	if (rd_u64(r, addr + o->code_linetable, &p) == 0 && p &&
	    rd_u64(r, p + o->bytes_size, &tsize) == 0 && tsize > 0 && tsize <= PY_LINETABLE_MAX) {
		c.linetable = malloc((size_t)tsize);
		if (!c.linetable)
			return -ENOMEM;
		if (rd(r, p + o->bytes_data, c.linetable, (size_t)tsize) < 0) {
			free(c.linetable);
			c.linetable = NULL;
		} else {
			c.linetable_len = (size_t)tsize;
		}
	}
	*ret = c;
	return 0;
}

/* A varint of the location table: 6 bits per byte, bit 6 says another byte follows. */
static bool scan_varint(const uint8_t *tab, size_t len, size_t *pos, uint32_t *ret)
{
	uint32_t val = 0;
	unsigned shift = 0;

	for (;;) {
		uint8_t b;

		if (*pos >= len || shift > 30)
			return false;
		b = tab[(*pos)++];
		val |= (uint32_t)(b & 63) << shift;
		if (!(b & 64))
			break;
		shift += 6;
	}
	*ret = val;
	return true;
}

static bool scan_svarint(const uint8_t *tab, size_t len, size_t *pos, int64_t *ret)
{
	uint32_t u;

	if (!scan_varint(tab, len, pos, &u))
		return false;
	*ret = (u & 1) ? -(int64_t)(u >> 1) : (int64_t)(u >> 1);
	return true;
}

int py_linetable_line(const uint8_t *tab, size_t len, int firstlineno, uint64_t addr)
{
	int64_t line = firstlineno;
	uint64_t start = 0;
	size_t pos = 0;

	while (pos < len) {
		uint8_t first = tab[pos];
		unsigned code = (first >> 3) & 15;
		uint64_t end = start + 2 * (uint64_t)((first & 7) + 1);  /* code units are 2 bytes */
		int64_t delta = 0;
		bool no_line = false;
		size_t p = pos + 1;

		if (!(first & 0x80))
			return -1;  /* not at the start of an entry: a corrupt table */
		switch (code) {
		case 15:              /* no location */
			no_line = true;
			break;
		case 14:              /* long form: line delta, end line, column, end column */
		case 13:              /* no column: line delta */
			if (!scan_svarint(tab, len, &p, &delta))
				return -1;
			break;
		case 10: case 11: case 12: /* one line: delta is code - 10, then two column bytes */
			delta = code - 10;
			break;
		default:              /* short form: same line */
			break;
		}
		line += delta;
		if (line < -(1LL << 31) || line > (1LL << 31))
			return -1;
		if (addr >= start && addr < end)
			return no_line || line < 0 ? -1 : (int)line;
		start = end;
		/* the next entry starts at the next byte with the top bit set */
		pos++;
		while (pos < len && !(tab[pos] & 0x80))
			pos++;
	}
	return -1;
}

#define PY_LIST_TRIES 4

/* One walk of the lists; *ret_torn: a thread state in the middle could not be read (freed
 * under the walk by a thread that ended), so the rest of its list was not seen */
static int list_threads_once(const struct py_reader *r, const struct py_version_offsets *o,
			     uint64_t runtime, struct py_tstate *out, size_t max, size_t *ret_n,
			     bool *ret_torn)
{
	uint64_t interp = 0;
	size_t n = 0;
	int err;

	*ret_n = 0;
	*ret_torn = false;
	if ((err = rd_u64(r, runtime + o->runtime_interpreters_head, &interp)) < 0)
		return err;
	for (int i = 0; interp && i < PY_INTERPS_MAX; i++) {
		uint64_t ts = 0, next_interp = 0;

		if (rd_u64(r, interp + o->interp_threads_head, &ts) < 0)
			break;
		for (int k = 0; ts && k < PY_THREADS_MAX && n < max; k++) {
			uint64_t back = 0, tid = 0, next = 0;

			if (rd_u64(r, ts + o->tstate_interp, &back) < 0 ||
			    rd_u64(r, ts + o->tstate_native_thread_id, &tid) < 0 ||
			    rd_u64(r, ts + o->tstate_next, &next) < 0) {
				*ret_torn = true;
				break;
			}
			if (back == interp && tid > 0 && tid <= 0x7fffffff) {
				out[n].tstate = ts;
				out[n].native_tid = tid;
				n++;
			}
			if (next == ts)
				break;
			ts = next;
		}
		if (rd_u64(r, interp + o->interp_next, &next_interp) < 0 || next_interp == interp)
			break;
		interp = next_interp;
	}
	*ret_n = n;
	return 0;
}

int py_list_threads(const struct py_reader *r, const struct py_version_offsets *o,
		    uint64_t runtime, struct py_tstate *out, size_t max, size_t *ret_n)
{
	bool torn = false;
	int err = 0;

	/* the lists change under the walk as threads come and go: walked again if torn */
	for (int i = 0; i < PY_LIST_TRIES; i++) {
		err = list_threads_once(r, o, runtime, out, max, ret_n, &torn);
		if (err < 0 || !torn)
			return err;
	}
	return -EAGAIN;
}

static uint64_t load64(const uint8_t *buf, uint32_t off)
{
	uint64_t v = 0;

	if (off <= PY_FRAME_READ - 8)
		memcpy(&v, buf + off, sizeof(v));
	return v;
}

/* The innermost frame of the thread whose state is at tstate, or 0. */
static uint64_t current_frame(const struct py_reader *r, const struct py_offsets *b,
			      uint64_t tstate)
{
	uint64_t frame = 0, p = 0;

	if (b->ts_cframe != PY_OFF_NONE) {
		if (rd_u64(r, tstate + b->ts_cframe, &p) < 0 || !p ||
		    rd_u64(r, p + b->cframe_current_frame, &frame) < 0)
			frame = 0;
	} else if (rd_u64(r, tstate + b->ts_current_frame, &frame) < 0) {
		frame = 0;
	}
	return frame;
}

size_t py_walk_frames(const struct py_reader *r, const struct py_version_offsets *o,
		      uint64_t tstate, struct ebpf_py_frame *out, size_t max, size_t outer,
		      uint32_t *ret_cut, uint32_t *ret_status)
{
	const struct py_offsets *b = &o->bpf;
	uint8_t buf[PY_FRAME_READ];
	uint64_t frame;
	size_t i = 0, inner, limit;

	*ret_status = EBPF_PY_ST_NONE;
	*ret_cut = 0;
	if (outer > max || (outer & (outer - 1)))
		outer = 0;
	inner = max - outer;
	limit = outer ? EBPF_PY_WALK_MAX : max;
	frame = current_frame(r, b, tstate);
	if (!frame) {
		*ret_status = EBPF_PY_ST_NO_FRAME;
		return 0;
	}
	*ret_status = EBPF_PY_ST_OK;
	for (; frame && i < limit; i++) {
		size_t slot = i < inner ? i : inner + ((i - inner) & (outer - 1));
		uint64_t flags;

		if (rd(r, frame, buf, sizeof(buf)) < 0) {
			*ret_status = EBPF_PY_ST_READ_ERROR;
			break;
		}
		flags = (uint64_t)(b->fr_owner < PY_FRAME_READ ? buf[b->fr_owner] : 0)
			<< EBPF_PY_OWNER_SHIFT;
		if (b->fr_is_entry != PY_OFF_NONE && b->fr_is_entry < PY_FRAME_READ)
			flags |= (uint64_t)(buf[b->fr_is_entry] & 1) << EBPF_PY_ENTRY_SHIFT;
		out[slot].code = load64(buf, b->fr_code) & b->code_mask;
		out[slot].instr_flags = (load64(buf, b->fr_instr) & EBPF_PY_INSTR_MASK) | flags;
		frame = load64(buf, b->fr_previous);
	}
	if (i == limit && frame && *ret_status == EBPF_PY_ST_OK)
		*ret_status = EBPF_PY_ST_TRUNCATED;
	if (i > max)
		*ret_cut = (uint32_t)(i - max);
	return i < max ? i : max;
}

const char *py_short_name(const char *qualname)
{
	const char *s = strrchr(qualname, '.');

	/* "f.<locals>.<listcomp>" -> "<listcomp>", "Thread.run" -> "run"; a qualname that
	 * ends in its separator keeps its whole self */
	return s && s[1] ? s + 1 : qualname;
}

void py_format_frame(const struct py_code *c, int line, bool short_name, char *buf, size_t len)
{
	const char *name = short_name ? py_short_name(c->qualname) : c->qualname;

	if (line >= 0)
		snprintf(buf, len, "%s (%s:%d)", name, c->filename, line);
	else
		snprintf(buf, len, "%s (%s)", name, c->filename);
}

/* ---- a thread's `threading` name ---------------------------------------------------- */

#define PY_TPFLAGS_INLINE_VALUES (1ull << 2)   /* 3.13 */
#define PY_TPFLAGS_MANAGED_DICT  (1ull << 4)
#define PY_TPFLAGS_HEAPTYPE      (1ull << 9)
#define PY_KEYS_GENERAL 0                      /* dk_kind: entries with their hash */
#define PY_DICT_MAX 16384                      /* a dict's entries looked at (sys.modules
						* of a big job has thousands) */
#define PY_ENTRY_CHUNK 64                      /* entries read at once */
#define PY_NAME_MAX 32                         /* the names looked up: short ASCII */
#define PY_INDEX_LOG2_MAX 24                   /* dk_log2_index_bytes of a sane dict */

/* Whether the str object at addr is exactly s (short ASCII: a str equal to it is a compact
 * ASCII one), in one read of its header and s's length of data. */
static bool str_is(const struct py_reader *r, const struct py_version_offsets *o, uint64_t addr,
		   const char *s)
{
	uint8_t b[128];
	size_t n = strlen(s);
	uint64_t length;
	uint32_t state;

	if (!addr || n > PY_NAME_MAX || o->unicode_ascii_size + n > sizeof(b) ||
	    o->unicode_length + 8 > o->unicode_ascii_size ||
	    o->unicode_state + 4 > o->unicode_ascii_size ||
	    rd(r, addr, b, o->unicode_ascii_size + n) < 0)
		return false;
	memcpy(&length, b + o->unicode_length, sizeof(length));
	memcpy(&state, b + o->unicode_state, sizeof(state));
	/* compact (bit 5) and ascii (bit 6), kind 1 */
	return length == n && ((state >> 5) & 1) && ((state >> 6) & 1) && ((state >> 2) & 7) == 1 &&
	       memcmp(b + o->unicode_ascii_size, s, n) == 0;
}

/* The entry of keys whose key is the str name: its index, and (a combined table) its value
 * in *ret_value; -ENOENT when none is. */
static int keys_find(const struct py_reader *r, const struct py_version_offsets *o,
		     uint64_t keys, const char *name, uint64_t *ret_value)
{
	uint8_t l2i = 0, kind = 0;
	uint64_t n = 0, entries;
	size_t esz, koff;

	*ret_value = 0;
	if (rd(r, keys + o->keys_log2_index_bytes, &l2i, 1) < 0 ||
	    rd(r, keys + o->keys_kind, &kind, 1) < 0 || rd_u64(r, keys + o->keys_nentries, &n) < 0 ||
	    l2i > PY_INDEX_LOG2_MAX)
		return -EFAULT;
	/* PyDictKeyEntry { hash, key, value } or PyDictUnicodeEntry { key, value } */
	esz = kind == PY_KEYS_GENERAL ? 24 : 16;
	koff = kind == PY_KEYS_GENERAL ? 8 : 0;
	entries = keys + o->keys_indices + (1ull << l2i);
	for (uint64_t i = 0; i < n && i < PY_DICT_MAX; i += PY_ENTRY_CHUNK) {
		uint64_t e[PY_ENTRY_CHUNK * 3];
		uint64_t k = n - i < PY_ENTRY_CHUNK ? n - i : PY_ENTRY_CHUNK;
		size_t words = esz / 8;

		if (rd(r, entries + i * esz, e, k * esz) < 0)
			return -EFAULT;
		for (uint64_t j = 0; j < k; j++)
			if (str_is(r, o, e[j * words + koff / 8], name)) {
				*ret_value = e[j * words + koff / 8 + 1];
				return (int)(i + j);
			}
	}
	return -ENOENT;
}

/* Value number i of a split table's values. */
static int split_value(const struct py_reader *r, const struct py_version_offsets *o,
		       uint64_t values, int i, uint64_t *ret)
{
	return rd_u64(r, values + o->values_head + 8 * (uint64_t)i, ret);
}

/* d[name] of the dict object at dict (combined or split). */
static int dict_get(const struct py_reader *r, const struct py_version_offsets *o, uint64_t dict,
		    const char *name, uint64_t *ret)
{
	uint64_t keys = 0, values = 0;
	int i, err;

	if ((err = rd_u64(r, dict + o->dict_keys, &keys)) < 0 ||
	    (err = rd_u64(r, dict + o->dict_values, &values)) < 0)
		return err;
	i = keys_find(r, o, keys, name, ret);
	if (i < 0)
		return i;
	return values ? split_value(r, o, values, i, ret) : 0;
}

/* A heap type whose ht_name is its tp_name: the heap-type offsets are right for it. */
static bool heap_type_checks(const struct py_reader *r, const struct py_version_offsets *o,
			     uint64_t type)
{
	char tp[64], ht[64];
	uint64_t tp_name = 0, ht_name = 0;
	size_t i;

	if (rd_u64(r, type + o->type_name, &tp_name) < 0 || rd_u64(r, type + o->heap_name, &ht_name) < 0)
		return false;
	/* an ASCII name (nearly every class's): tp_name is ht_name's own data, right after its
	 * header; the str must then be a compact ASCII one */
	if (ht_name && tp_name == ht_name + o->unicode_ascii_size) {
		uint32_t state = 0;

		return rd(r, ht_name + o->unicode_state, &state, sizeof(state)) == 0 &&
		       ((state >> 5) & 1) && ((state >> 6) & 1);
	}
	if (py_read_str(r, o, ht_name, ht, sizeof(ht)) < 0)
		return false;
	for (i = 0; i < sizeof(tp) - 1; i++)
		if (rd(r, tp_name + i, &tp[i], 1) < 0 || !tp[i])
			break;
	tp[i] = 0;
	return i < sizeof(tp) - 1 && strcmp(tp, ht) == 0;
}

/* obj.name for an instance of a Python class (a managed dict: 3.11+), read from its
 * instance values or its dict as the version keeps them. */
static int attr_of(const struct py_reader *r, const struct py_version_offsets *o, uint64_t obj,
		   const char *name, uint64_t *ret)
{
	uint64_t type = 0, flags = 0, word = 0, dict = 0, values = 0, keys = 0, v;
	int i, err = 0;

	if (obj < o->values_before + o->dict_before + 16 ||
	    (err = rd_u64(r, obj + o->ob_type, &type)) < 0 ||
	    (err = rd_u64(r, type + o->type_flags, &flags)) < 0 ||
	    (err = rd_u64(r, obj - o->dict_before, &word)) < 0)
		return err ? err : -EFAULT;
	if (!(flags & PY_TPFLAGS_HEAPTYPE) || !(flags & PY_TPFLAGS_MANAGED_DICT) ||
	    !heap_type_checks(r, o, type))
		return -ENOENT;
	if (o->minor == 11) {
		dict = word;
		if ((err = rd_u64(r, obj - o->values_before, &values)) < 0)
			return err;
	} else if (o->minor == 12) {
		if (word & 1)
			values = word + 1;      /* stored as values - 1 */
		else
			dict = word;
	} else {
		uint64_t basic = 0;
		uint8_t valid = 0;

		dict = word;
		if (!dict && (flags & PY_TPFLAGS_INLINE_VALUES) &&
		    rd_u64(r, type + o->type_basicsize, &basic) == 0 && basic < (1u << 20) &&
		    rd(r, obj + basic + 3, &valid, 1) == 0 && valid)
			values = obj + basic;   /* { capacity, size, embedded, valid; values[] } */
	}
	if (values) {
		if ((err = rd_u64(r, type + o->heap_cached_keys, &keys)) < 0)
			return err;
		i = keys_find(r, o, keys, name, &v);
		if (i < 0)
			return i;
		err = split_value(r, o, values, i, &v);
	} else if (dict) {
		err = dict_get(r, o, dict, name, &v);
	} else {
		return -ENOENT;
	}
	if (err < 0)
		return err;
	if (!v)
		return -ENOENT;
	*ret = v;
	return 0;
}

int py_thread_name(const struct py_reader *r, const struct py_version_offsets *o,
		   uint64_t code_type, uint64_t tstate, char *buf, size_t len)
{
	const struct py_offsets *b = &o->bpf;
	uint8_t fb[PY_FRAME_READ];
	uint64_t frame, outer = 0, code = 0, self = 0, name = 0;
	uint64_t str_type = 0, name_type = 0, co_name = 0, ctype = 0, qual = 0, file = 0;
	char fname[PY_STR_MAX];
	size_t i, flen;
	int err;

	if (!len)
		return -EINVAL;
	buf[0] = 0;
	frame = current_frame(r, b, tstate);
	/* the outermost Python frame: the thread's first */
	for (i = 0; frame && i < EBPF_PY_WALK_MAX; i++) {
		uint8_t owner;

		if (rd(r, frame, fb, sizeof(fb)) < 0)
			return -EFAULT;
		owner = b->fr_owner < PY_FRAME_READ ? fb[b->fr_owner] : 0;
		if (owner < o->owner_shim_min) {
			outer = frame;
			code = load64(fb, b->fr_code) & b->code_mask;
		}
		frame = load64(fb, b->fr_previous);
	}
	if (frame)
		return -E2BIG;          /* deeper than the walker goes: not its first frame */
	if (!outer)
		return -ENOENT;         /* no Python frame (yet) */
	/* a code object (its type), Thread._bootstrap, in a threading.py */
	if ((err = rd_u64(r, code + o->ob_type, &ctype)) < 0 ||
	    (err = rd_u64(r, code + o->code_qualname, &qual)) < 0 ||
	    (err = rd_u64(r, code + o->code_filename, &file)) < 0)
		return err;
	if (ctype != code_type || !str_is(r, o, qual, "Thread._bootstrap") ||
	    py_read_str(r, o, file, fname, sizeof(fname)) < 0)
		return -ENOENT;         /* not started by threading (the main thread, say) */
	flen = strlen(fname);
	if (flen < 12 || strcmp(fname + flen - 12, "threading.py") != 0)
		return -ENOENT;
	/* Thread._bootstrap(self): its first local is the Thread */
	if ((err = rd_u64(r, outer + o->fr_localsplus, &self)) < 0 ||
	    (err = attr_of(r, o, self, "_name", &name)) < 0)
		return err;
	/* a str, as its code's co_name is */
	if ((err = rd_u64(r, code + o->code_name, &co_name)) < 0 ||
	    (err = rd_u64(r, co_name + o->ob_type, &str_type)) < 0 ||
	    (err = rd_u64(r, name + o->ob_type, &name_type)) < 0)
		return err;
	if (name_type != str_type)
		return -EINVAL;
	return py_read_str(r, o, name, buf, len);
}

/* Whether the type of obj is named name (tp_name: "str", "int"). */
static bool type_named(const struct py_reader *r, const struct py_version_offsets *o,
		       uint64_t obj, const char *name)
{
	uint64_t type = 0, tp_name = 0;
	char b[8];
	size_t n = strlen(name) + 1;

	return n <= sizeof(b) && rd_u64(r, obj + o->ob_type, &type) == 0 &&
	       rd_u64(r, type + o->type_name, &tp_name) == 0 && rd(r, tp_name, b, n) == 0 &&
	       memcmp(b, name, n) == 0;
}

/* A small non-negative int (at most two 30-bit digits). */
static int int_of(const struct py_reader *r, const struct py_version_offsets *o, uint64_t obj,
		  uint64_t *ret)
{
	uint64_t size = 0, ndigits;
	uint32_t d[2] = { 0, 0 };

	if (!type_named(r, o, obj, "int") || rd_u64(r, obj + o->long_size, &size) < 0)
		return -EINVAL;
	if (o->minor == 11) {
		if ((int64_t)size < 0)
			return -EINVAL;         /* ob_size: negative for a negative number */
		ndigits = size;
	} else {
		if ((size & 3) == 2)
			return -EINVAL;         /* lv_tag: sign in the low bits, 2 negative */
		ndigits = size >> 3;
	}
	if (ndigits > 2 || (ndigits && rd(r, obj + o->long_digits, d, ndigits * 4) < 0))
		return -EINVAL;
	*ret = (uint64_t)(d[0] & 0x3fffffff) | (uint64_t)(d[1] & 0x3fffffff) << 30;
	return 0;
}

int py_main_thread(const struct py_reader *r, const struct py_version_offsets *o,
		   uint64_t runtime, uint64_t *ret_tid, char *buf, size_t len)
{
	uint64_t interp = 0, modules = 0, mod = 0, md = 0, th = 0, idv = 0, name = 0;
	int err;

	if (!len)
		return -EINVAL;
	buf[0] = 0;
	if (!o->interp_modules)
		return -ENOTSUP;
	if ((err = rd_u64(r, runtime + o->runtime_interpreters_head, &interp)) < 0 ||
	    (err = rd_u64(r, interp + o->interp_modules, &modules)) < 0 ||
	    (err = dict_get(r, o, modules, "threading", &mod)) < 0 ||
	    (err = rd_u64(r, mod + o->module_dict, &md)) < 0 ||
	    (err = dict_get(r, o, md, "_main_thread", &th)) < 0 ||
	    (err = attr_of(r, o, th, "_native_id", &idv)) < 0 ||
	    (err = int_of(r, o, idv, ret_tid)) < 0 ||
	    (err = attr_of(r, o, th, "_name", &name)) < 0)
		return err;
	if (!type_named(r, o, name, "str"))
		return -EINVAL;
	return py_read_str(r, o, name, buf, len);
}
