/* SPDX-License-Identifier: MIT */
/* libfixture_early.so: loaded RTLD_LAZY before any module defines cudaMemset (no
 * DT_NEEDED on the fixture), so its GOT slot still points at its PLT stub. */
#include <cuda_runtime_api.h>

int fixture_early_memset(void *p, size_t n)
{
	return cudaMemset(p, 0, n);
}
