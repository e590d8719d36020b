/* SPDX-License-Identifier: MIT */
/* libfixture_late.so (lazy PLT) / libfixture_noplt.so (-fno-plt: GLOB_DAT): dlopened
 * after libaiprof; their calls must be hooked too. */
#include <cuda_runtime_api.h>

#include "fixture.h"

int fixture_late_launch(const void *func)
{
	dim3 one = { 1, 1, 1 };

	return cudaLaunchKernel(func, one, one, NULL, 0, NULL);
}
