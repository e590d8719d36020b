/* SPDX-License-Identifier: MIT */
/* Frame names for a terminal; see framename.h. */
#include <stdbool.h>
#include <string.h>

#include "framename.h"
#include "utf8.h"

enum frame_kind frame_kind_of(const char *name, size_t *ret_len)
{
	size_t n = strlen(name);

	*ret_len = n;
	if (n > 4 && strcmp(name + n - 4, "_[k]") == 0) {
		*ret_len = n - 4;
		return FK_KERNEL;
	}
	/* "qualname (file.py:line)" */
	if (n > 2 && name[n - 1] == ')' && strstr(name, ".py:"))
		return FK_PYTHON;
	/* "[... N Python frames not shown]": a mark of what the stack does not show */
	if (n > 5 && strncmp(name, "[... ", 5) == 0 && name[n - 1] == ']')
		return FK_CUT;
	return FK_NATIVE;
}

/* Whether the character at s[0..k) (a valid sequence) is a C1 control (U+0080..U+009F):
 * a terminal takes some of them (CSI) as an escape. */
static int c1_control(const unsigned char *s, size_t k)
{
	return k == 2 && s[0] == 0xc2 && s[1] < 0xa0;
}

static void fprint_escaped(FILE *out, const char *name, size_t n, bool quoted)
{
	const unsigned char *s = (const unsigned char *)name;

	for (size_t i = 0; i < n;) {
		size_t k = utf8_seq_len(name + i, n - i);

		if (k == 1 && s[i] >= 0x20 && s[i] != 0x7f && s[i] != '\\' &&
		    !(quoted && s[i] == '"')) {
			fputc(s[i], out);
		} else if (k == 1 && (s[i] == '\\' || s[i] == '"')) {
			fputc('\\', out);
			fputc(s[i], out);
		} else if (k > 1 && !c1_control(s + i, k)) {
			fwrite(s + i, 1, k, out);
		} else {
			/* a control, DEL, a C1 control or a byte that starts nothing valid */
			for (size_t j = 0; j < (k ? k : 1); j++)
				fprintf(out, "\\x%02x", s[i + j]);
			k = k ? k : 1;
		}
		i += k;
	}
}

void frame_name_fprint(FILE *out, const char *name, size_t n)
{
	fprint_escaped(out, name, n, false);
}

void frame_name_fprint_quoted(FILE *out, const char *name, size_t n)
{
	fputc('"', out);
	fprint_escaped(out, name, n, true);
	fputc('"', out);
}
