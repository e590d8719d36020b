/* SPDX-License-Identifier: MIT */
/* Folded stacks -> interactive SVG flame graph; see flamegraph.h. */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "blobtab.h"
#include "u64map.h"
#include "flamegraph.h"
#include "membuf.h"

#define FRAME_H 16
#define FONT_PX 12
#define CHAR_W 7.0            /* average glyph width of 12 px Verdana */
#define PAD_TOP 60
#define PAD_BOTTOM 30
#define PAD_SIDE 10

struct fg_node {
	uint32_t name;            /* interned name id */
	uint32_t parent;
	uint32_t first_child, next_sibling;   /* 0 = none (node 0 is the root) */
	uint64_t total;
};

struct fg_tree {
	struct blobtab names;     /* frame names, interned */
	struct fg_node *n;
	size_t nn, capn;
	struct u64map children;   /* parent << 32 | name -> node */
	struct fg_stats st;
};

static const char *name_of(const struct fg_tree *t, uint32_t id, size_t *len)
{
	return blobtab_get(&t->names, id, len);
}

static int name_intern(struct fg_tree *t, const char *s, size_t n, uint32_t *ret)
{
	int64_t id = blobtab_intern(&t->names, s, n);

	if (id < 0)
		return (int)id;
	*ret = (uint32_t)id;
	return 0;
}

static int child_of(struct fg_tree *t, uint32_t parent, uint32_t name, uint32_t *ret)
{
	uint64_t key = (uint64_t)parent << 32 | name, k;

	if (u64map_get(&t->children, key, &k)) {
		*ret = (uint32_t)k;
		return 0;
	}
	if (t->nn >= FG_MAX_NODES)
		return -E2BIG;
	if (t->nn == t->capn) {
		size_t nc = t->capn * 2;
		struct fg_node *nv = realloc(t->n, nc * sizeof(*nv));

		if (!nv)
			return -ENOMEM;
		t->n = nv;
		t->capn = nc;
	}
	if (u64map_put(&t->children, key, t->nn) < 0)
		return -ENOMEM;
	t->n[t->nn] = (struct fg_node){ .name = name, .parent = parent,
					.next_sibling = t->n[parent].first_child };
	t->n[parent].first_child = (uint32_t)t->nn;
	*ret = (uint32_t)t->nn++;
	return 0;
}

/* the count at the end of a line: digits, optionally a fractional part (rounded) */
static bool parse_count(const char *s, size_t n, uint64_t *ret)
{
	uint64_t v = 0;
	size_t i = 0;

	if (n == 0 || s[0] < '0' || s[0] > '9')
		return false;
	for (; i < n && s[i] >= '0' && s[i] <= '9'; i++) {
		if (v > (UINT64_MAX - 9) / 10)
			v = UINT64_MAX / 4;   /* saturate */
		else
			v = v * 10 + (uint64_t)(s[i] - '0');
	}
	if (i < n && s[i] == '.') {
		if (i + 1 < n && s[i + 1] >= '5' && s[i + 1] <= '9' && v < UINT64_MAX / 4)
			v++;
		for (i++; i < n && s[i] >= '0' && s[i] <= '9'; i++)
			;
	}
	if (i != n)
		return false;
	if (v > UINT64_MAX / 4)
		v = UINT64_MAX / 4;
	*ret = v;
	return true;
}

static int add_line(struct fg_tree *t, const char *s, size_t n)
{
	uint32_t path[FG_MAX_DEPTH];
	size_t depth = 0, sp, i;
	uint64_t count;
	uint32_t node = 0;
	int r;

	while (n && (s[n - 1] == '\r' || s[n - 1] == ' ' || s[n - 1] == '\t'))
		n--;
	if (!n)
		return 0;
	t->st.lines++;
	for (sp = n; sp > 0 && s[sp - 1] != ' ' && s[sp - 1] != '\t'; sp--)
		;
	if (sp == 0 || !parse_count(s + sp, n - sp, &count)) {
		t->st.bad_lines++;
		return 0;
	}
	n = sp - 1;
	while (n && (s[n - 1] == ' ' || s[n - 1] == '\t'))
		n--;
	if (!count)
		return 0;
	/* frames, root first */
	for (i = 0; i <= n;) {
		size_t j = i;
		uint32_t id = 0;

		while (j < n && s[j] != ';')
			j++;
		if (depth == FG_MAX_DEPTH) {
			t->st.truncated++;
			break;
		}
		r = name_intern(t, s + i, j - i, &id);
		if (r < 0)
			return r;
		path[depth++] = id;
		i = j + 1;
	}
	for (i = 0; i < depth; i++) {
		r = child_of(t, node, path[i], &node);
		if (r == -E2BIG) {
			t->st.skipped++;
			return 0;
		}
		if (r < 0)
			return r;
	}
	/* counts go up the path; saturating */
	for (uint32_t k = node;; k = t->n[k].parent) {
		t->n[k].total = t->n[k].total > UINT64_MAX / 2 - count ? UINT64_MAX / 2 :
				t->n[k].total + count;
		if (k == 0)
			break;
	}
	t->st.stacks++;
	if (depth > t->st.max_depth)
		t->st.max_depth = depth;
	return 0;
}

int fg_tree__parse(const char *text, size_t len, struct fg_tree **ret)
{
	struct fg_tree *t = calloc(1, sizeof(*t));
	int r = 0;

	if (!t)
		return -ENOMEM;
	t->capn = 1024;
	t->n = calloc(t->capn, sizeof(*t->n));
	if (!t->n) {
		free(t);
		return -ENOMEM;
	}
	t->nn = 1;   /* the root, "all" */
	for (size_t i = 0; i < len && r == 0;) {
		const char *nl = memchr(text + i, '\n', len - i);
		size_t j = nl ? (size_t)(nl - text) : len;

		r = add_line(t, text + i, j - i);
		i = j + 1;
	}
	if (r < 0) {
		fg_tree__free(t);
		return r;
	}
	t->st.total = t->n[0].total;
	t->st.nodes = t->nn;
	*ret = t;
	return 0;
}

void fg_tree__free(struct fg_tree *t)
{
	if (!t)
		return;
	blobtab_clear(&t->names);
	free(t->n);
	u64map_clear(&t->children);
	free(t);
}

void fg_tree__stats(const struct fg_tree *t, struct fg_stats *ret)
{
	*ret = t->st;
}

/* ---- SVG ------------------------------------------------------------------------------- */

static bool ends_with(const char *s, size_t n, const char *suf)
{
	size_t k = strlen(suf);

	return n >= k && memcmp(s + n - k, suf, k) == 0;
}

static bool contains(const char *s, size_t n, const char *needle)
{
	size_t k = strlen(needle);

	for (size_t i = 0; i + k <= n; i++)
		if (memcmp(s + i, needle, k) == 0)
			return true;
	return false;
}

/* FNV-1a of a frame name: its colour, the same every run */
static uint64_t hash_bytes(const char *s, size_t n)
{
	uint64_t h = 0xcbf29ce484222325ULL;

	for (size_t i = 0; i < n; i++)
		h = (h ^ (unsigned char)s[i]) * 0x100000001b3ULL;
	return h ^ (h >> 29);
}

/* deterministic colour of a frame name */
static void colour(enum fg_palette pal, const char *s, size_t n, bool leaf_gpu, char *buf,
		   size_t len)
{
	uint64_t h = hash_bytes(s, n);
	double v1 = (double)(h & 0xff) / 255.0, v2 = (double)((h >> 8) & 0xff) / 255.0;
	double v3 = (double)((h >> 16) & 0xff) / 255.0;
	int r, g, b;

	if (pal == FG_BLUE) {
		r = (int)(50 + 60 * v1);
		g = (int)(90 + 80 * v2);
		b = (int)(190 + 65 * v3);
	} else if (pal == FG_GPU && leaf_gpu) {
		r = (int)(160 + 60 * v1);
		g = (int)(90 + 50 * v2);
		b = (int)(200 + 55 * v3);
	} else if (ends_with(s, n, "_[k]")) {
		r = (int)(200 + 55 * v1);
		g = (int)(130 + 60 * v2);
		b = (int)(40 + 40 * v3);
	} else if (contains(s, n, ".py") || pal == FG_GPU) {
		r = (int)(60 + 80 * v1);
		g = (int)(170 + 60 * v2);
		b = (int)(60 + 60 * v3);
	} else {
		r = (int)(205 + 50 * v3);
		g = (int)(230 * v1);
		b = (int)(55 * v2);
	}
	snprintf(buf, len, "rgb(%d,%d,%d)", r, g, b);
}

static const char script_js[] =
	"(function(){\n"
	"var svg=document.getElementById(ID),NS='http://www.w3.org/2000/svg';\n"
	"if(!svg)return;\n"
	"var W=+svg.getAttribute('data-w'),PAD=+svg.getAttribute('data-pad'),CW=+svg.getAttribute('data-cw');\n"
	"var total=+svg.getAttribute('data-total'),unit=svg.getAttribute('data-unit');\n"
	"var frames=svg.querySelectorAll('g.fg-f');\n"
	"var det=svg.querySelector('.fg-details'),unz=svg.querySelector('.fg-reset'),\n"
	"    mat=svg.querySelector('.fg-matched'),srch=svg.querySelector('.fg-search');\n"
	"function A(e,k){return +e.getAttribute(k);}\n"
	"function name(g){return g.getAttribute('data-n');}\n"
	"function fit(g,w){var t=g.querySelector('text'),n=name(g),m=Math.floor((w-6)/CW);\n"
	" if(m<3){t.textContent='';return;} t.textContent=n.length<=m?n:n.substring(0,m-2)+'..';}\n"
	"function show(g,x,w,vis){var r=g.querySelector('rect'),t=g.querySelector('text');\n"
	" g.style.display=vis?'':'none'; if(!vis)return;\n"
	" r.setAttribute('x',x);r.setAttribute('width',Math.max(w,0));t.setAttribute('x',x+3);fit(g,w);}\n"
	"function zoom(z){var zx=A(z,'data-x'),zw=A(z,'data-w'),zd=A(z,'data-d'),s=(W-2*PAD)/zw;\n"
	" for(var i=0;i<frames.length;i++){var g=frames[i],x=A(g,'data-x'),w=A(g,'data-w'),d=A(g,'data-d');\n"
	"  if(d<zd){var an=x<=zx+1e-6&&x+w>=zx+zw-1e-6; g.classList.toggle('fg-parent',an); show(g,PAD,W-2*PAD,an);}\n"
	"  else{var inn=x>=zx-1e-6&&x+w<=zx+zw+1e-6; g.classList.remove('fg-parent'); show(g,PAD+(x-zx)*s,w*s,inn);}}\n"
	" unz.style.opacity='1';}\n"
	"function reset(){for(var i=0;i<frames.length;i++){var g=frames[i];g.classList.remove('fg-parent');\n"
	"  show(g,PAD+A(g,'data-x'),A(g,'data-w'),true);} unz.style.opacity='0.3';}\n"
	"function fmt(c){var p=total?(100*c/total):0;return c.toLocaleString()+' '+unit+', '+p.toFixed(2)+'%';}\n"
	"for(var i=0;i<frames.length;i++){(function(g){\n"
	" g.addEventListener('mouseover',function(){det.textContent=name(g)+' ('+fmt(A(g,'data-c'))+')';});\n"
	" g.addEventListener('mouseout',function(){det.textContent=' ';});\n"
	" g.addEventListener('click',function(){zoom(g);});})(frames[i]);}\n"
	"unz.addEventListener('click',reset);\n"
	"function search(re){var hit=[],sum=0,end=-1;\n"
	" for(var i=0;i<frames.length;i++){var g=frames[i],r=g.querySelector('rect');\n"
	"  if(re&&re.test(name(g))){r.setAttribute('fill','rgb(230,0,230)');hit.push([A(g,'data-x'),A(g,'data-w'),A(g,'data-c')]);}\n"
	"  else r.setAttribute('fill',g.getAttribute('data-fill'));}\n"
	" hit.sort(function(a,b){return a[0]-b[0]||b[1]-a[1];});\n"
	" for(var k=0;k<hit.length;k++){if(hit[k][0]>=end-1e-6){sum+=hit[k][2];end=hit[k][0]+hit[k][1];}}\n"
	" mat.textContent=re?('Matched: '+fmt(sum)):' ';}\n"
	"srch.addEventListener('click',function(){var t=prompt('Search frames (regular expression):','');\n"
	" if(t===null)return; if(t===''){search(null);return;}\n"
	" try{search(new RegExp(t));}catch(e){mat.textContent='bad expression';}});\n"
	"})();\n";

struct lay {
	uint32_t node;
	uint64_t x;               /* in counts, from the left */
	uint32_t depth;
};

struct kid {
	uint32_t node;
	const char *name;
	size_t len;
};

static int kid_cmp(const void *a, const void *b)
{
	const struct kid *x = a, *y = b;
	size_t n = x->len < y->len ? x->len : y->len;
	int c = memcmp(x->name, y->name, n);

	if (c)
		return c;
	return x->len < y->len ? -1 : x->len > y->len;
}

static void sanitize_id(const char *in, char *out, size_t len)
{
	size_t o = 0;

	for (; in && *in && o + 1 < len; in++)
		if ((*in >= 'a' && *in <= 'z') || (*in >= 'A' && *in <= 'Z') ||
		    (*in >= '0' && *in <= '9') || *in == '_' || *in == '-')
			out[o++] = *in;
	if (!o)
		out[o++] = 'x';
	out[o] = 0;
}

/* The drawing's geometry: what every frame's position is computed from. */
struct svg_geom {
	unsigned width, height;
	double scale, minw;             /* px per count; frames narrower than minw are left out */
	char id[64];
};

/* The depth of the deepest frame that will be drawn. -ENOMEM or 0. */
static int drawn_depth(const struct fg_tree *t, const struct svg_geom *g, size_t *ret)
{
	uint32_t *depth = calloc(t->nn, sizeof(*depth));
	size_t maxd = 0;

	if (!depth)
		return -ENOMEM;
	for (size_t k = 1; k < t->nn; k++) {
		/* parents have lower ids than their children */
		depth[k] = depth[t->n[k].parent] + 1;
		if ((double)t->n[k].total * g->scale >= g->minw && depth[k] > maxd)
			maxd = depth[k];
	}
	free(depth);
	*ret = maxd;
	return 0;
}

/* <svg>, its style, background, title and the controls, up to the frames. */
static void svg_header(struct membuf *out, const struct fg_tree *t, const struct fg_opts *o,
		       const struct svg_geom *g)
{
	const char *unit = o->unit ? o->unit : "samples", *title = o->title ? o->title : "Flame Graph";
	const char *id = g->id;
	unsigned width = g->width, height = g->height;

	membuf_printf(out, "<svg version=\"1.1\" id=\"fg-%s\" class=\"aiprof-flamegraph\" width=\"%u\" "
		      "height=\"%u\" viewBox=\"0 0 %u %u\" xmlns=\"http://www.w3.org/2000/svg\" "
		      "data-w=\"%u\" data-pad=\"%d\" data-cw=\"%.1f\" data-total=\"%llu\" data-unit=\"",
		      id, width, height, width, height, width, PAD_SIDE, CHAR_W,
		      (unsigned long long)t->n[0].total);
	membuf_escape(out, unit, strlen(unit), 0);
	membuf_printf(out, "\">\n<style>\n"
		      "#fg-%s text{font-family:Verdana,sans-serif;font-size:%dpx;fill:#000}\n"
		      "#fg-%s g.fg-f{cursor:pointer}\n"
		      "#fg-%s g.fg-f:hover rect{stroke:#000;stroke-width:0.5}\n"
		      "#fg-%s g.fg-parent rect{opacity:0.5}\n"
		      "#fg-%s .fg-title{font-size:17px;text-anchor:middle}\n"
		      "#fg-%s .fg-btn{cursor:pointer}\n"
		      "</style>\n", id, FONT_PX, id, id, id, id, id);
	membuf_printf(out, "<defs><linearGradient id=\"fg-%s-bg\" y1=\"0\" y2=\"1\" x1=\"0\" x2=\"0\">"
		      "<stop stop-color=\"#eeeeee\" offset=\"5%%\"/><stop stop-color=\"%s\" "
		      "offset=\"95%%\"/></linearGradient></defs>\n", id,
		      o->palette == FG_BLUE ? "#e0e8f8" : o->palette == FG_GPU ? "#e8f4e8" : "#eeeeb0");
	membuf_printf(out, "<rect x=\"0\" y=\"0\" width=\"%u\" height=\"%u\" fill=\"url(#fg-%s-bg)\"/>\n",
		      width, height, id);
	membuf_printf(out, "<text class=\"fg-title\" x=\"%u\" y=\"24\">", width / 2);
	membuf_escape(out, title, strlen(title), 0);
	membuf_puts(out, "</text>\n");
	if (o->subtitle) {
		membuf_printf(out, "<text x=\"%u\" y=\"42\" style=\"text-anchor:middle;fill:#555\">", width / 2);
		membuf_escape(out, o->subtitle, strlen(o->subtitle), 0);
		membuf_puts(out, "</text>\n");
	}
	membuf_printf(out, "<text class=\"fg-btn fg-reset\" x=\"%d\" y=\"24\" style=\"opacity:0.3\">Reset Zoom</text>\n",
		      PAD_SIDE);
	membuf_printf(out, "<text class=\"fg-btn fg-search\" x=\"%u\" y=\"24\" style=\"text-anchor:end\">Search</text>\n",
		      width - PAD_SIDE);
	membuf_printf(out, "<text class=\"fg-matched\" x=\"%u\" y=\"%u\" style=\"text-anchor:end\"> </text>\n",
		      width - PAD_SIDE, height - 10);
	membuf_printf(out, "<text class=\"fg-details\" x=\"%d\" y=\"%u\"> </text>\n", PAD_SIDE, height - 10);
	if (!t->n[0].total)
		membuf_printf(out, "<text x=\"%u\" y=\"%u\" style=\"text-anchor:middle\">no samples in this "
			      "window</text>\n", width / 2, height / 2);
}

/* One frame: its group, rectangle and (where it fits) its name. */
static void svg_frame(struct membuf *out, const struct fg_tree *t, const struct fg_opts *o,
		      const struct svg_geom *g, const struct lay *cur)
{
	const struct fg_node *nd = &t->n[cur->node];
	double x = PAD_SIDE + (double)cur->x * g->scale, w = (double)nd->total * g->scale;
	unsigned y = g->height - PAD_BOTTOM - (cur->depth + 1) * FRAME_H;
	const char *nm = "all";
	size_t nl = 3;
	char fill[32];

	if (cur->node) {
		nm = name_of(t, nd->name, &nl);
		if (nl == 0) {
			nm = "[empty]";
			nl = 7;
		}
	}
	colour(o->palette, nm, nl, o->palette == FG_GPU && !nd->first_child && cur->node, fill,
	       sizeof(fill));
	membuf_printf(out, "<g class=\"fg-f\" data-x=\"%.2f\" data-w=\"%.2f\" data-d=\"%u\" "
		      "data-c=\"%llu\" data-fill=\"%s\" data-n=\"", x - PAD_SIDE, w, cur->depth,
		      (unsigned long long)nd->total, fill);
	membuf_escape(out, nm, nl, 0);
	membuf_puts(out, "\"><title>");
	membuf_escape(out, nm, nl, 0);
	membuf_printf(out, " (%llu %s, %.2f%%)</title><rect x=\"%.2f\" y=\"%u\" width=\"%.2f\" "
		      "height=\"%d\" fill=\"%s\" rx=\"2\" ry=\"2\"/><text x=\"%.2f\" y=\"%u\">",
		      (unsigned long long)nd->total, o->unit ? o->unit : "samples",
		      t->n[0].total ? 100.0 * (double)nd->total / (double)t->n[0].total : 0,
		      x, y, w, FRAME_H - 1, fill, x + 3, y + FRAME_H - 4);
	if (w >= 3 * CHAR_W + 6) {
		size_t maxc = (size_t)((w - 6) / CHAR_W);

		membuf_escape(out, nm, nl, maxc >= nl ? 0 : (maxc > 2 ? maxc - 2 : 1));
	}
	membuf_puts(out, "</text></g>\n");
}

/* The depth-first walk: frames still to draw, and scratch for one frame's children. */
struct walk {
	struct lay *stack;
	size_t nstack, capstack;
	struct kid *kids;
	uint64_t *xs;
	size_t capkids;
};

/* Pushes cur's children (sorted by name, so the graph is the same every run), right to
 * left, each at its x: cumulative in name order. 0 or -ENOMEM. */
static int push_children(struct walk *k, const struct fg_tree *t, const struct lay *cur)
{
	uint64_t cx = cur->x;
	size_t nk = 0;

	for (uint32_t c = t->n[cur->node].first_child; c; c = t->n[c].next_sibling) {
		if (nk == k->capkids) {
			size_t nc = k->capkids ? k->capkids * 2 : 64;
			struct kid *nv = realloc(k->kids, nc * sizeof(*nv));
			uint64_t *nx;

			if (!nv)
				return -ENOMEM;
			k->kids = nv;
			nx = realloc(k->xs, nc * sizeof(*nx));
			if (!nx)
				return -ENOMEM;
			k->xs = nx;
			k->capkids = nc;
		}
		k->kids[nk].node = c;
		k->kids[nk].name = name_of(t, t->n[c].name, &k->kids[nk].len);
		nk++;
	}
	if (nk > 1)
		qsort(k->kids, nk, sizeof(*k->kids), kid_cmp);
	if (k->nstack + nk > k->capstack) {
		size_t nc = (k->nstack + nk) * 2;
		struct lay *nv = realloc(k->stack, nc * sizeof(*nv));

		if (!nv)
			return -ENOMEM;
		k->stack = nv;
		k->capstack = nc;
	}
	for (size_t i = 0; i < nk; i++) {
		k->xs[i] = cx;
		cx += t->n[k->kids[i].node].total;
	}
	for (size_t i = nk; i-- > 0;)
		k->stack[k->nstack++] = (struct lay){ k->kids[i].node, k->xs[i], cur->depth + 1 };
	return 0;
}

/* Every frame at least minw wide, depth first. 0 or -ENOMEM. */
static int svg_frames(struct membuf *out, const struct fg_tree *t, const struct fg_opts *o,
		      const struct svg_geom *g)
{
	struct walk k = { 0 };
	int r = 0;

	membuf_puts(out, "<g class=\"fg-frames\">\n");
	if (t->n[0].total) {
		k.capstack = 64;
		k.stack = malloc(k.capstack * sizeof(*k.stack));
		if (!k.stack)
			return -ENOMEM;
		k.stack[k.nstack++] = (struct lay){ 0, 0, 0 };
	}
	while (k.nstack && r == 0) {
		struct lay cur = k.stack[--k.nstack];

		if ((double)t->n[cur.node].total * g->scale < g->minw)
			continue;
		svg_frame(out, t, o, g, &cur);
		r = push_children(&k, t, &cur);
	}
	membuf_puts(out, "</g>\n");
	free(k.stack);
	free(k.kids);
	free(k.xs);
	return r;
}

int fg_tree__svg(const struct fg_tree *t, const struct fg_opts *o, struct membuf *out)
{
	struct svg_geom g = { .width = o->width ? o->width : 1200 };
	const char *at = strstr(script_js, "ID");
	size_t maxd;
	int r;

	g.minw = o->min_width_px > 0 ? o->min_width_px : 0.1;
	g.scale = t->n[0].total ? (double)(g.width - 2 * PAD_SIDE) / (double)t->n[0].total : 0;
	sanitize_id(o->id, g.id, sizeof(g.id));
	r = drawn_depth(t, &g, &maxd);
	if (r < 0)
		return r;
	g.height = (unsigned)(PAD_TOP + PAD_BOTTOM + (maxd + 1) * FRAME_H);
	svg_header(out, t, o, &g);
	r = svg_frames(out, t, o, &g);
	if (r < 0)
		return r;
	/* the script, told which drawing is its own */
	membuf_puts(out, "<script type=\"text/ecmascript\"><![CDATA[\n");
	membuf_put(out, script_js, (size_t)(at - script_js));
	membuf_printf(out, "'fg-%s'", g.id);
	membuf_puts(out, at + 2);
	membuf_puts(out, "]]></script>\n</svg>\n");
	return membuf_failed(out) ? -ENOMEM : 0;
}

static int read_file(const char *path, char **ret, size_t *len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	struct stat st;
	char *buf = NULL;
	size_t off = 0;
	int r = 0;

	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0) {
		r = -errno;
		goto out;
	}
	buf = malloc((size_t)st.st_size + 1);
	if (!buf) {
		r = -ENOMEM;
		goto out;
	}
	while (off < (size_t)st.st_size) {
		ssize_t n = read(fd, buf + off, (size_t)st.st_size - off);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			r = -errno;
			goto out;
		}
		if (n == 0)
			break;
		off += (size_t)n;
	}
	buf[off] = 0;
	*ret = buf;
	*len = off;
	buf = NULL;
out:
	free(buf);
	close(fd);
	return r;
}

int flamegraph_file(const char *in_path, const char *out_path, const struct fg_opts *o)
{
	struct membuf out = { 0 };
	struct fg_tree *t = NULL;
	char *text = NULL;
	size_t len = 0;
	int r;

	r = read_file(in_path, &text, &len);
	if (r < 0)
		return r;
	r = fg_tree__parse(text, len, &t);
	if (r < 0)
		goto out;
	membuf_puts(&out, "<?xml version=\"1.0\" standalone=\"no\"?>\n");
	r = fg_tree__svg(t, o, &out);
	if (r < 0)
		goto out;
	r = membuf_write_file(&out, out_path);
out:
	fg_tree__free(t);
	free(text);
	membuf_free(&out);
	return r;
}
