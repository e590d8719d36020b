/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for reading S3's XML answers (error codes, upload ids).
 * FUZZ_SOURCES: common/s3xml.c
 */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include "s3xml.h"

#define CHECK(x) do { if (!(x)) __builtin_trap(); } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char *const tags[] = { "Code", "Message", "UploadId", "ETag", "Error" };
	const char *body = (const char *)data;   /* not NUL-terminated: the parser gets len */

	for (size_t i = 0; i < sizeof(tags) / sizeof(tags[0]); i++) {
		char out[64];
		int r = s3xml_text(body, size, tags[i], out, sizeof(out));

		CHECK(r == 0 || r == -ENOENT || r == -ENOBUFS);
		CHECK(strlen(out) < sizeof(out));
		for (size_t k = 0; out[k]; k++)
			CHECK((unsigned char)out[k] >= 0x20 && out[k] != 0x7f);
	}
	(void)s3xml_is_error(body, size);
	return 0;
}
