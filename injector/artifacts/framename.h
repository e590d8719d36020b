/* SPDX-License-Identifier: MIT */
/*
 * Frame and thread names as `aiprof stacks` prints them. The names are the target's to
 * choose (prctl(PR_SET_NAME), a Python function's qualname, a module's symbols): what kind
 * of frame a name is, and the name made safe for a terminal (no control character, no
 * escape sequence, nothing that is not UTF-8).
 */
#ifndef AIPROF_FRAMENAME_H
#define AIPROF_FRAMENAME_H

#include <stddef.h>
#include <stdio.h>

enum frame_kind { FK_NATIVE, FK_PYTHON, FK_KERNEL, FK_CUT };

/* The kind of the frame name (NUL-terminated) and, in *ret_len, the length of its name
 * without the kernel frames' "_[k]" mark. */
enum frame_kind frame_kind_of(const char *name, size_t *ret_len);

/* name[0..n) onto out for a terminal: control characters, DEL and bytes that are not UTF-8
 * as \xNN (and a backslash as \\), everything else as it is. */
void frame_name_fprint(FILE *out, const char *name, size_t n);
/* The same between double quotes, a double quote in it as \" (a Python thread's name:
 * nothing in it can seem to close the quotes and say more). */
void frame_name_fprint_quoted(FILE *out, const char *name, size_t n);

#endif
