/* SPDX-License-Identifier: MIT */
/*
 * metav1.LabelSelector: matchLabels and matchExpressions (In, NotIn, Exists, DoesNotExist),
 * parsed from JSON and matched against a pod's labels. An empty selector matches everything,
 * as in Kubernetes; callers that must not select a whole namespace check
 * label_selector__empty().
 */
#ifndef AIPROF_SELECTOR_H
#define AIPROF_SELECTOR_H

#include <stdbool.h>
#include <stddef.h>
#include <jansson.h>

struct kv {
	const char *key;
	const char *value;
};

enum sel_op { SEL_IN, SEL_NOT_IN, SEL_EXISTS, SEL_DOES_NOT_EXIST };

struct sel_expr {
	char *key;
	enum sel_op op;
	char **values;
	size_t n_values;
};

struct label_selector {
	char **keys, **values;   /* matchLabels */
	size_t n_labels;
	struct sel_expr *exprs;
	size_t n_exprs;
};

/* Returns 0 and fills *ret (clear with label_selector__clear()), -EINVAL with msg set (not an
 * object, unknown operator, values where none belong...), -ENOMEM. */
int label_selector__parse(const json_t *j, struct label_selector *ret, char *msg, size_t msglen);
void label_selector__clear(struct label_selector *s);
bool label_selector__empty(const struct label_selector *s);
bool label_selector__matches(const struct label_selector *s, const struct kv *labels, size_t n);

#endif
