/* SPDX-License-Identifier: MIT */
/*
 * CLOCK_MONOTONIC for hooks at TSC cost. The kernel's own CLOCK_MONOTONIC is the TSC
 * scaled by a mult/shift that NTP slews; where the clock source is "tsc" we do the same:
 * the control thread anchors (tsc, mono) pairs about once a second and derives the scale
 * from the last interval, so the error between anchors stays in the tens of ns.
 * Parameters are published as immutable blocks in a small rotation: a reader holds a
 * pointer to one block, and a block is rewritten only 8 anchors (seconds) later.
 *
 * AIPROF_CLOCK=vdso in the process's initial environment forces clock_gettime().
 */
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "preload.h"

#define CLK_BLOCKS        8
#define CLK_MIN_INTERVAL  (400ull * 1000 * 1000)   /* ns between re-anchors */

static const struct clk_params g_clk_vdso;        /* mult 0: clock_gettime */
static struct clk_params g_clk_blocks[CLK_BLOCKS];
static unsigned g_clk_next;
const struct clk_params *_Atomic g_clk = &g_clk_vdso;

static bool g_tsc_ok;
static uint64_t g_anchor_tsc, g_anchor_mono;

/* Reads a small file into buf (NUL-terminated). Returns bytes read or -errno. */
static ssize_t read_small(const char *path, char *buf, size_t len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n, total = 0;

	if (fd < 0)
		return -errno;
	while ((size_t)total < len - 1) {
		n = read(fd, buf + total, len - 1 - (size_t)total);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		total += n;
	}
	close(fd);
	buf[total] = '\0';
	return total;
}

/* Whether `key=value` is in the initial environment (getenv races with setenv). */
static bool initial_env_is(const char *key, const char *value)
{
	char buf[16384];
	ssize_t n = read_small("/proc/self/environ", buf, sizeof(buf));
	size_t kl = strlen(key), vl = strlen(value);

	for (ssize_t i = 0; i < n;) {
		const char *e = buf + i;
		size_t l = strnlen(e, (size_t)(n - i));

		if (l == kl + 1 + vl && memcmp(e, key, kl) == 0 && e[kl] == '=' &&
		    memcmp(e + kl + 1, value, vl) == 0)
			return true;
		i += (ssize_t)l + 1;
	}
	return false;
}

/* One (tsc, mono) pair, the TSC read taken at the middle of the clock_gettime(). */
static void clk_sample(uint64_t *tsc, uint64_t *mono)
{
	uint64_t best = UINT64_MAX;

	for (int i = 0; i < 5; i++) {
		uint64_t a = __rdtsc();
		uint64_t m = clk_mono_ns();
		uint64_t b = __rdtsc();

		if (b - a < best) {
			best = b - a;
			*tsc = a + (b - a) / 2;
			*mono = m;
		}
	}
}

void clk__init(void)
{
	char src[64];

	if (read_small("/sys/devices/system/clocksource/clocksource0/current_clocksource",
		       src, sizeof(src)) <= 0 || strcmp(src, "tsc\n") != 0)
		return;
	if (initial_env_is("AIPROF_CLOCK", "vdso"))
		return;
	g_tsc_ok = true;
	clk_sample(&g_anchor_tsc, &g_anchor_mono);
}

void clk__calibrate(void)
{
	uint64_t tsc, mono, dt, dm, mult;
	struct clk_params *p;

	if (!g_tsc_ok)
		return;
	clk_sample(&tsc, &mono);
	if (mono - g_anchor_mono < CLK_MIN_INTERVAL / 8 && g_clk == &g_clk_vdso)
		return;                 /* first calibration needs a few tens of ms */
	if (g_clk != &g_clk_vdso && mono - g_anchor_mono < CLK_MIN_INTERVAL)
		return;
	dt = tsc - g_anchor_tsc;
	dm = mono - g_anchor_mono;
	if (!dt || tsc < g_anchor_tsc)
		goto reanchor;
	mult = (uint64_t)(((unsigned __int128)dm << 32) / dt);
	/* plausible TSC rates only: 100 MHz .. 20 GHz */
	if (mult > (10ull << 32) || mult < (1ull << 32) / 20)
		goto reanchor;
	p = &g_clk_blocks[g_clk_next++ % CLK_BLOCKS];
	p->tsc0 = tsc;
	p->mono0 = mono;
	p->mult = mult;
	atomic_store_explicit(&g_clk, p, memory_order_release);
reanchor:
	g_anchor_tsc = tsc;
	g_anchor_mono = mono;
}
