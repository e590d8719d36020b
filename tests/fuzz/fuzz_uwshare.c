/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for the shared unwind cache's files (injector/target/uwshare.c): a rules
 * file and a CFI image in the cache directory, as a damaged disk or an older injector may
 * leave them (only aiprof writes there, but a reader must not trust a slot it did not
 * check). The input is the rules file's first bytes (its header made valid when the first
 * byte is even, so that the slots are read) and, after a 0xff 0xfe marker, an image file.
 * Every rule read back is in range; nothing is read or written outside the mapping.
 * FUZZ_SOURCES: injector/target/uwshare.c common/u64map.c common/readfile.c
 * FUZZ_ARGS: -max_len=16384
 */
#include <fcntl.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "target/uwshare.h"

#define CHECK(x) do { if (!(x)) __builtin_trap(); } while (0)
#define FILE_BYTES (64 + (size_t)UWS_SLOTS * 64)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char dir[64];

static void name_of(const uint8_t d[UWS_DIGEST_LEN], const char *suffix, char *out, size_t len)
{
	int n = snprintf(out, len, "%s/", dir);

	for (int i = 0; i < UWS_DIGEST_LEN; i++)
		n += snprintf(out + n, len - (size_t)n, "%02x", d[i]);
	snprintf(out + n, len - (size_t)n, "%s", suffix);
}

static void put_file(const char *path, const void *buf, size_t len, size_t total)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);

	if (fd < 0)
		return;
	if (len)
		CHECK(pwrite(fd, buf, len, 0) == (ssize_t)len);
	if (total > len)
		CHECK(ftruncate(fd, (off_t)total) == 0);
	close(fd);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const uint8_t digest[UWS_DIGEST_LEN] = { 0xaa, 1 }, idigest[UWS_DIGEST_LEN] = { 0xbb };
	const uint8_t *mark = size > 2 ? memmem(data, size, "\xff\xfe", 2) : NULL;
	size_t rlen = mark ? (size_t)(mark - data) : size, ilen = mark ? size - rlen - 2 : 0;
	char rules[160], image[160], why[256];
	uint8_t *buf = calloc(1, rlen > 64 ? rlen : 64);
	struct uws_stats st;
	struct uws_dir *d;
	struct uws_file *f;
	size_t img_len = 0;
	const uint8_t *img;

	if (!buf)
		return 0;
	if (!dir[0])
		snprintf(dir, sizeof(dir), "/tmp/fuzz-uwshare-%d", (int)getpid());
	mkdir(dir, 0700);         /* made and removed by each run: nothing is left behind */
	memcpy(buf, data, rlen);
	if (rlen == 0 || (data[0] & 1) == 0) {
		/* a header that holds: magic, version 1, the slot count, this file's digest */
		uint32_t v = 1, n = UWS_SLOTS;

		memcpy(buf, "AIPRUWS1", 8);
		memcpy(buf + 8, &v, 4);
		memcpy(buf + 12, &n, 4);
		memcpy(buf + 24, digest, UWS_DIGEST_LEN);
	}
	name_of(digest, ".uws", rules, sizeof(rules));
	name_of(idigest, ".cfi", image, sizeof(image));
	put_file(rules, buf, rlen > 64 ? rlen : 64, (rlen & 2) ? rlen : FILE_BYTES);
	put_file(image, mark ? mark + 2 : NULL, ilen, ilen);
	CHECK(uws_dir__open(dir, &d, why, sizeof(why)) == 0);
	f = uws_dir__file(d, digest);
	if (f) {
		/* the keys the file holds, and a few of our own */
		for (size_t at = 64; at + 8 <= rlen; at += 64) {
			uint64_t key;
			struct uws_rule r;

			memcpy(&key, buf + at, 8);
			if (key && uws_file__get(d, f, key - 1, &r))
				CHECK(uws_rule_valid(&r));
		}
		for (uint64_t a = 0; a < 64; a++) {
			struct uws_rule r = { .flags = UWS_NO_CFI }, got;

			uws_file__put(d, f, a * 4099, &r);
			if (uws_file__get(d, f, a * 4099, &got))
				CHECK(uws_rule_valid(&got));
		}
	}
	img = uws_dir__image(d, idigest, -1, NULL, 0, &img_len);
	if (img)
		CHECK(img_len == ilen && img_len >= 64 && memcmp(img, "\x7f" "ELF", 4) == 0);
	uws_dir__stats(d, &st);
	CHECK(st.files <= 1 && st.images <= 1);
	uws_dir__free(d);
	unlink(rules);
	unlink(image);
	rmdir(dir);
	free(buf);
	return 0;
}
