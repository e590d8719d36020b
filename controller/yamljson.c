/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <yaml.h>
#include "yamljson.h"

struct frame {
	json_t *node;           /* object or array being filled */
	char *key;              /* pending key of an object (malloc'd), or NULL */
};

static json_t *plain_scalar(const char *v, size_t len)
{
	static const char *const trues[] = { "true", "yes", "on", "y" };
	static const char *const falses[] = { "false", "no", "off", "n" };

	if (len == 0 || (len == 1 && v[0] == '~') || strcasecmp(v, "null") == 0)
		return json_null();
	for (size_t i = 0; i < sizeof(trues) / sizeof(trues[0]); i++)
		if (strcasecmp(v, trues[i]) == 0 && strlen(trues[i]) > 1)
			return json_true();
	for (size_t i = 0; i < sizeof(falses) / sizeof(falses[0]); i++)
		if (strcasecmp(v, falses[i]) == 0 && strlen(falses[i]) > 1)
			return json_false();
	return json_stringn(v, len);
}

/* Hands v (a new reference) to the innermost container, or makes it the root. */
static int attach(struct frame *st, int depth, json_t **root, json_t *v)
{
	struct frame *f;
	int r;

	if (!v)
		return -ENOMEM;
	if (depth == 0) {
		if (*root) {
			json_decref(v);
			return -EINVAL;
		}
		*root = v;
		return 0;
	}
	f = &st[depth - 1];
	if (json_is_array(f->node))
		return json_array_append_new(f->node, v) < 0 ? -ENOMEM : 0;
	if (!f->key) {                  /* v is a key */
		if (!json_is_string(v)) {
			json_decref(v);
			return -ENOTSUP;
		}
		if (strcmp(json_string_value(v), "<<") == 0) {
			json_decref(v);
			return -ENOTSUP;
		}
		f->key = strdup(json_string_value(v));
		json_decref(v);
		return f->key ? 0 : -ENOMEM;
	}
	r = json_object_set_new(f->node, f->key, v) < 0 ? -ENOMEM : 0;
	free(f->key);
	f->key = NULL;
	return r;
}

int yaml_to_json(const char *buf, size_t len, json_t **ret, char *msg, size_t msglen)
{
	struct frame st[YAMLJSON_MAX_DEPTH] = { { 0 } };
	yaml_parser_t parser;
	yaml_event_t ev;
	json_t *root = NULL;
	int depth = 0, err = 0;
	bool parser_ok = false, done = false, in_doc = false;
	char dummy[1];

	if (!msg) {
		msg = dummy;
		msglen = sizeof(dummy);
	}
	msg[0] = '\0';
	if (len > YAMLJSON_MAX_SIZE) {
		snprintf(msg, msglen, "larger than %u bytes", YAMLJSON_MAX_SIZE);
		return -E2BIG;
	}
	if (!yaml_parser_initialize(&parser))
		return -ENOMEM;
	parser_ok = true;
	yaml_parser_set_input_string(&parser, (const unsigned char *)buf, len);

	while (!done) {
		json_t *v = NULL;

		if (!yaml_parser_parse(&parser, &ev)) {
			snprintf(msg, msglen, "line %zu: %s", parser.problem_mark.line + 1,
				 parser.problem ? parser.problem : "syntax error");
			err = -EINVAL;
			goto fail;
		}
		switch (ev.type) {
		case YAML_STREAM_END_EVENT:
			done = true;
			break;
		case YAML_DOCUMENT_START_EVENT:
			in_doc = true;
			break;
		case YAML_DOCUMENT_END_EVENT:
			done = in_doc;   /* only the first document */
			break;
		case YAML_ALIAS_EVENT:
			snprintf(msg, msglen, "line %zu: YAML aliases are not supported",
				 ev.start_mark.line + 1);
			err = -ENOTSUP;
			break;
		case YAML_SCALAR_EVENT:
			if (ev.data.scalar.style == YAML_PLAIN_SCALAR_STYLE && !ev.data.scalar.tag)
				v = plain_scalar((const char *)ev.data.scalar.value,
						 ev.data.scalar.length);
			else
				v = json_stringn((const char *)ev.data.scalar.value,
						 ev.data.scalar.length);
			err = attach(st, depth, &root, v);
			if (err == -ENOTSUP)
				snprintf(msg, msglen, "line %zu: merge keys are not supported",
					 ev.start_mark.line + 1);
			break;
		case YAML_SEQUENCE_START_EVENT:
		case YAML_MAPPING_START_EVENT:
			if (depth >= YAMLJSON_MAX_DEPTH) {
				snprintf(msg, msglen, "nested deeper than %d", YAMLJSON_MAX_DEPTH);
				err = -E2BIG;
				break;
			}
			v = ev.type == YAML_SEQUENCE_START_EVENT ? json_array() : json_object();
			if (!v) {
				err = -ENOMEM;
				break;
			}
			/* a container as a key is refused when it is attached */
			if (depth > 0 && json_is_object(st[depth - 1].node) && !st[depth - 1].key) {
				json_decref(v);
				snprintf(msg, msglen, "line %zu: only scalar keys are supported",
					 ev.start_mark.line + 1);
				err = -ENOTSUP;
				break;
			}
			st[depth].node = v;
			st[depth].key = NULL;
			depth++;
			break;
		case YAML_SEQUENCE_END_EVENT:
		case YAML_MAPPING_END_EVENT:
			depth--;
			v = st[depth].node;
			st[depth].node = NULL;
			free(st[depth].key);
			st[depth].key = NULL;
			err = attach(st, depth, &root, v);
			break;
		default:
			break;
		}
		yaml_event_delete(&ev);
		if (err < 0)
			goto fail;
	}
	if (!root)
		root = json_null();
	*ret = root;
	root = NULL;
fail:
	for (int i = 0; i < depth; i++) {
		json_decref(st[i].node);
		free(st[i].key);
	}
	json_decref(root);
	if (parser_ok)
		yaml_parser_delete(&parser);
	return err;
}

bool json_truthy(const json_t *v)
{
	if (json_is_boolean(v))
		return json_is_true(v);
	if (json_is_string(v))
		return strcasecmp(json_string_value(v), "true") == 0;
	return false;
}
