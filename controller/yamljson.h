/* SPDX-License-Identifier: MIT */
/*
 * The first document of a YAML stream as a jansson tree, through libyaml's event parser:
 * mappings become objects (keys must be scalars), sequences arrays, quoted scalars strings,
 * plain scalars null (null, ~, empty), true/false (YAML 1.1 spellings: true/yes/on...) or
 * strings (numbers stay strings: callers convert what they need). Aliases and merge keys are
 * refused (no billion laughs), nesting is capped at YAMLJSON_MAX_DEPTH, and the input at
 * YAMLJSON_MAX_SIZE. Duplicate keys: the last one wins, as in Go's yaml-to-JSON.
 * Outside input: fuzzed by tests/fuzz/fuzz_kubeconfig.c.
 */
#ifndef AIPROF_YAMLJSON_H
#define AIPROF_YAMLJSON_H

#include <stdbool.h>
#include <stddef.h>
#include <jansson.h>

#define YAMLJSON_MAX_DEPTH 64
#define YAMLJSON_MAX_SIZE (4u << 20)

/*
 * Returns 0 and *ret (caller json_decref()s; a JSON null for an empty stream), or -EINVAL
 * (not YAML; msg says where), -ENOTSUP (alias, merge key, non-scalar key), -E2BIG (too
 * large or too deep), -ENOMEM. msg may be NULL.
 */
int yaml_to_json(const char *buf, size_t len, json_t **ret, char *msg, size_t msglen);

/* A string or boolean value read as a boolean: "true"/"false" (any case). */
bool json_truthy(const json_t *v);

#endif
