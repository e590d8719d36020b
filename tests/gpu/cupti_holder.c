/* SPDX-License-Identifier: MIT */
/*
 * cupti_holder: a second CUPTI tool, loaded the way Nsight Systems and DCGM load theirs:
 * CUDA_INJECTION64_PATH names this library, and the CUDA driver calls
 * InitializeInjection() from cuInit, before the program's first CUDA call returns. It
 * subscribes to CUPTI and records kernel activity for the life of the process, so the
 * subscriber slot is taken when aiprof attaches. At exit it prints
 * "cupti_holder: subscribed=1 kernels=N" on stderr: N keeps growing only if aiprof left its
 * subscription alone.
 */
#include <cupti.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#define BUF_BYTES (1u << 20)

static CUpti_SubscriberHandle g_sub;
static int g_subscribed;
static atomic_ullong g_kernels;

static void CUPTIAPI on_callback(void *u, CUpti_CallbackDomain d, CUpti_CallbackId id,
				 const void *data)
{
	(void)u; (void)d; (void)id; (void)data;
}

static void CUPTIAPI buf_requested(uint8_t **buf, size_t *size, size_t *max_records)
{
	*buf = aligned_alloc(8, BUF_BYTES);
	*size = *buf ? BUF_BYTES : 0;
	*max_records = 0;
}

static void CUPTIAPI buf_completed(CUcontext ctx, uint32_t stream, uint8_t *buf, size_t size,
				   size_t valid)
{
	CUpti_Activity *rec = NULL;

	(void)ctx; (void)stream; (void)size;
	while (cuptiActivityGetNextRecord(buf, valid, &rec) == CUPTI_SUCCESS)
		if (rec->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL)
			atomic_fetch_add(&g_kernels, 1);
	free(buf);
}

static void report(void)
{
	if (g_subscribed)
		cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
	fprintf(stderr, "cupti_holder: subscribed=%d kernels=%llu\n", g_subscribed,
		(unsigned long long)atomic_load(&g_kernels));
}

int InitializeInjection(void)
{
	CUptiResult r = cuptiSubscribe(&g_sub, on_callback, NULL);

	if (r != CUPTI_SUCCESS) {
		fprintf(stderr, "cupti_holder: cuptiSubscribe failed: %d\n", (int)r);
		return 0;
	}
	g_subscribed = 1;
	if (cuptiActivityRegisterCallbacks(buf_requested, buf_completed) != CUPTI_SUCCESS ||
	    cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) != CUPTI_SUCCESS)
		fprintf(stderr, "cupti_holder: enabling kernel activity failed\n");
	atexit(report);
	fprintf(stderr, "cupti_holder: subscribed\n");
	return 1;
}
