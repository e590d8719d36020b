/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for injector/artifacts/framename.c, what threads_dump prints of a name the
 * target chose (a thread's comm, a frame's name): its kind, and its text for a terminal,
 * which is valid UTF-8 without a control character, DEL or C1 control, and quoted, where no
 * double quote inside ends the quotes.
 * FUZZ_SOURCES: injector/artifacts/framename.c common/utf8.c
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "artifacts/framename.h"
#include "utf8.h"

#define CHECK(x) do { if (!(x)) __builtin_trap(); } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *name = malloc(size + 1), *text = NULL;
	size_t len = 0, n;
	FILE *f;

	if (!name)
		return 0;
	memcpy(name, data, size);
	name[size] = 0;
	frame_kind_of(name, &n);
	CHECK(n <= strlen(name));
	f = open_memstream(&text, &len);
	if (f) {
		frame_name_fprint(f, name, size);
		fclose(f);
		CHECK(utf8_valid(text, len));
		for (size_t i = 0; i < len; i++) {
			unsigned char c = (unsigned char)text[i];

			CHECK(c >= 0x20 && c != 0x7f);
			CHECK(!(c == 0xc2 && i + 1 < len && (unsigned char)text[i + 1] < 0xa0));
		}
		free(text);
	}
	/* quoted (a Python thread's name): nothing inside closes the quotes */
	text = NULL;
	f = open_memstream(&text, &len);
	if (f) {
		frame_name_fprint_quoted(f, name, size);
		fclose(f);
		CHECK(len >= 2 && text[0] == '"' && text[len - 1] == '"');
		size_t i = 1;

		while (i + 1 < len) {
			CHECK(text[i] != '"');
			i += text[i] == '\\' ? 2 : 1;   /* an escape: the next byte is its */
		}
		CHECK(i == len - 1);                  /* and the closing quote is not escaped */
		free(text);
	}
	free(name);
	return 0;
}
