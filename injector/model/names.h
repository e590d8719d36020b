/* SPDX-License-Identifier: MIT */
/* Names the artifacts use for hooked functions, copy kinds and NCCL enums (names.c). */
#ifndef AIPROF_NAMES_H
#define AIPROF_NAMES_H

#include <stddef.h>
#include <stdint.h>
#include "event.h"

const char *api_name(uint16_t api);
const char *memcpy_kind_name(uint32_t kind);
/* "pinned", "pageable", "unknown", or "none" for device-to-device copies */
const char *memcpy_host_memory(const struct aiprof_ev_memcpy *m);
/* "pinned", "pageable", "unknown" or "none" (device to device) for a copy kind and
 * AIPROF_MEMCPY_F_HOST_* flags */
const char *memcpy_host_memory_of(uint32_t kind, uint32_t flags);
const char *nccl_op_name(uint16_t api);
const char *nccl_dtype_name(int32_t dt);
size_t nccl_dtype_size(int32_t dt);
const char *nccl_redop_name(int32_t op);

#endif
