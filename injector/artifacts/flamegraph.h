/* SPDX-License-Identifier: MIT */
/*
 * Flame graphs: folded stacks ("root;caller;callee COUNT" per line, as stackcollapse and
 * aiprof's stacks.folded write them) -> a self-contained interactive SVG in the manner of
 * flamegraph.pl: hover shows a frame's count and share, click zooms into a frame, "Search"
 * highlights frames matching a regular expression with the matched share, "Reset Zoom"
 * goes back. Colours are a function of the frame name (same name, same colour, every run).
 * Frame names come from the target process: everything is escaped, invalid UTF-8 and
 * control characters are replaced.
 *
 * The SVG's script finds its elements through the root element's id, so several graphs can
 * be inlined into one HTML page.
 */
#ifndef AIPROF_FLAMEGRAPH_H
#define AIPROF_FLAMEGRAPH_H

#include <stddef.h>
#include <stdint.h>

struct membuf;
struct fg_tree;

enum fg_palette {
	FG_HOT = 0,      /* on-CPU: red/orange/yellow; kernel frames orange, Python green */
	FG_BLUE,         /* off-CPU: blues */
	FG_GPU,          /* GPU launches: greens, kernels purple */
};

struct fg_opts {
	const char *id;          /* DOM id suffix, [A-Za-z0-9_-] (others are dropped) */
	const char *title;
	const char *subtitle;    /* NULL for none */
	const char *unit;        /* what a count is: "samples", "us", "launches" */
	enum fg_palette palette;
	unsigned width;          /* px; 0 = 1200 */
	double min_width_px;     /* frames narrower are left out; 0 = 0.1 */
};

/* Limits that bound memory on hostile input. */
#define FG_MAX_DEPTH 1024    /* frames per stack kept (deeper ones are cut) */
#define FG_MAX_NODES 2000000 /* tree nodes; later stacks that need more are skipped */

struct fg_stats {
	uint64_t lines, stacks, bad_lines, truncated, skipped, total;
	size_t nodes, max_depth;
};

/*
 * Parses folded stacks. Lines that do not end in a count are skipped (counted in
 * bad_lines). *ret is freed with fg_tree__free(). 0 or -ENOMEM.
 */
int fg_tree__parse(const char *text, size_t len, struct fg_tree **ret);
void fg_tree__free(struct fg_tree *t);   /* NULL-safe */
void fg_tree__stats(const struct fg_tree *t, struct fg_stats *ret);

/* Appends the SVG to out. 0, or -ENOMEM when out failed. */
int fg_tree__svg(const struct fg_tree *t, const struct fg_opts *o, struct membuf *out);

/* Reads folded stacks from in_path and writes out_path. 0 or -errno (-ENOENT: no input). */
int flamegraph_file(const char *in_path, const char *out_path, const struct fg_opts *o);

#endif
