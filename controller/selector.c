/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "selector.h"

void label_selector__clear(struct label_selector *s)
{
	if (!s)
		return;
	for (size_t i = 0; i < s->n_labels; i++) {
		free(s->keys[i]);
		free(s->values[i]);
	}
	free(s->keys);
	free(s->values);
	for (size_t i = 0; i < s->n_exprs; i++) {
		free(s->exprs[i].key);
		for (size_t k = 0; k < s->exprs[i].n_values; k++)
			free(s->exprs[i].values[k]);
		free(s->exprs[i].values);
	}
	free(s->exprs);
	memset(s, 0, sizeof(*s));
}

bool label_selector__empty(const struct label_selector *s)
{
	return s->n_labels == 0 && s->n_exprs == 0;
}

int label_selector__parse(const json_t *j, struct label_selector *ret, char *msg, size_t msglen)
{
	struct label_selector s = { 0 };
	const json_t *ml, *me, *v;
	const char *k;
	size_t i;
	int err = -ENOMEM;

	if (!json_is_object(j)) {
		snprintf(msg, msglen, "selector is not an object");
		return -EINVAL;
	}
	ml = json_object_get(j, "matchLabels");
	me = json_object_get(j, "matchExpressions");
	if ((ml && !json_is_object(ml) && !json_is_null(ml)) ||
	    (me && !json_is_array(me) && !json_is_null(me))) {
		snprintf(msg, msglen, "selector: matchLabels must be an object and matchExpressions "
			 "a list");
		return -EINVAL;
	}
	if (json_is_object(ml) && json_object_size(ml)) {
		s.keys = calloc(json_object_size(ml), sizeof(char *));
		s.values = calloc(json_object_size(ml), sizeof(char *));
		if (!s.keys || !s.values)
			goto fail;
		json_object_foreach((json_t *)ml, k, v) {
			if (!json_is_string(v)) {
				snprintf(msg, msglen, "selector: matchLabels.%.60s is not a string", k);
				err = -EINVAL;
				goto fail;
			}
			s.keys[s.n_labels] = strdup(k);
			s.values[s.n_labels] = strdup(json_string_value(v));
			s.n_labels++;
			if (!s.keys[s.n_labels - 1] || !s.values[s.n_labels - 1])
				goto fail;
		}
	}
	if (json_is_array(me) && json_array_size(me)) {
		s.exprs = calloc(json_array_size(me), sizeof(*s.exprs));
		if (!s.exprs)
			goto fail;
		json_array_foreach(me, i, v) {
			struct sel_expr *e = &s.exprs[s.n_exprs];
			const json_t *vals = json_object_get(v, "values"), *x;
			const char *key = json_string_value(json_object_get(v, "key"));
			const char *op = json_string_value(json_object_get(v, "operator"));
			size_t n;

			if (!key || !op) {
				snprintf(msg, msglen, "selector: matchExpressions[%zu] needs a key and an "
					 "operator", i);
				err = -EINVAL;
				goto fail;
			}
			s.n_exprs++;
			if (!(e->key = strdup(key)))
				goto fail;
			if (strcmp(op, "In") == 0)
				e->op = SEL_IN;
			else if (strcmp(op, "NotIn") == 0)
				e->op = SEL_NOT_IN;
			else if (strcmp(op, "Exists") == 0)
				e->op = SEL_EXISTS;
			else if (strcmp(op, "DoesNotExist") == 0)
				e->op = SEL_DOES_NOT_EXIST;
			else {
				snprintf(msg, msglen, "selector: unknown operator '%.30s'", op);
				err = -EINVAL;
				goto fail;
			}
			n = json_is_array(vals) ? json_array_size(vals) : 0;
			if ((e->op == SEL_IN || e->op == SEL_NOT_IN) != (n > 0) ||
			    (vals && !json_is_array(vals) && !json_is_null(vals))) {
				snprintf(msg, msglen, "selector: operator %s %s values", op,
					 e->op == SEL_IN || e->op == SEL_NOT_IN ? "needs" : "takes no");
				err = -EINVAL;
				goto fail;
			}
			if (n) {
				size_t xi;

				e->values = calloc(n, sizeof(char *));
				if (!e->values)
					goto fail;
				json_array_foreach(vals, xi, x) {
					if (!json_is_string(x)) {
						snprintf(msg, msglen, "selector: values must be strings");
						err = -EINVAL;
						goto fail;
					}
					e->values[e->n_values] = strdup(json_string_value(x));
					if (!e->values[e->n_values++])
						goto fail;
				}
			}
		}
	}
	*ret = s;
	return 0;
fail:
	label_selector__clear(&s);
	return err;
}

static const char *label_get(const struct kv *labels, size_t n, const char *key)
{
	for (size_t i = 0; i < n; i++)
		if (strcmp(labels[i].key, key) == 0)
			return labels[i].value;
	return NULL;
}

bool label_selector__matches(const struct label_selector *s, const struct kv *labels, size_t n)
{
	for (size_t i = 0; i < s->n_labels; i++) {
		const char *v = label_get(labels, n, s->keys[i]);

		if (!v || strcmp(v, s->values[i]) != 0)
			return false;
	}
	for (size_t i = 0; i < s->n_exprs; i++) {
		const struct sel_expr *e = &s->exprs[i];
		const char *v = label_get(labels, n, e->key);
		bool in = false;

		for (size_t k = 0; v && k < e->n_values; k++)
			in |= strcmp(v, e->values[k]) == 0;
		switch (e->op) {
		case SEL_IN:
			if (!in)
				return false;
			break;
		case SEL_NOT_IN:
			if (in)
				return false;
			break;
		case SEL_EXISTS:
			if (!v)
				return false;
			break;
		case SEL_DOES_NOT_EXIST:
			if (v)
				return false;
			break;
		}
	}
	return true;
}
