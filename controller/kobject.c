/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "kobject.h"

int kobject__patch(struct kube_client *kc, const char *path, const char *rv, json_t *patch,
		   json_t **ret, struct kube_status *st)
{
	json_t *meta = json_object_get(patch, "metadata");
	char *body, *out = NULL;
	size_t len = 0;
	int r;

	*st = (struct kube_status){ .message = "out of memory" };
	if (!meta) {
		meta = json_object();
		if (!meta || json_object_set_new(patch, "metadata", meta))
			return -ENOMEM;
	}
	if (json_object_set_new(meta, "resourceVersion", json_string(rv)))
		return -ENOMEM;
	body = json_dumps(patch, JSON_COMPACT);
	if (!body)
		return -ENOMEM;
	r = kube_client__request(kc, "PATCH", path, "application/merge-patch+json", body,
				 strlen(body), &out, &len, st);
	free(body);
	if (r < 0) {
		free(out);
		return r;
	}
	*ret = json_loadb(out, len, 0, NULL);
	free(out);
	return 0;
}

int kobject__get(struct kube_client *kc, const char *path, struct informer *inf,
		 int (*decode)(const json_t *obj, void **ret), void **ret)
{
	struct kube_status st;
	char *out = NULL;
	size_t len = 0;
	void *obj = NULL;
	json_t *j;
	int r;

	r = kube_client__request(kc, "GET", path, NULL, NULL, 0, &out, &len, &st);
	if (r < 0)
		return r;
	j = json_loadb(out, len, 0, NULL);
	free(out);
	if (!j || decode(j, &obj) < 0) {
		json_decref(j);
		return -EBADMSG;
	}
	informer__update(inf, j);
	json_decref(j);
	*ret = obj;
	return 0;
}

int kobject__create(struct kube_client *kc, const char *path, const json_t *obj,
		    struct informer *inf, struct kube_status *st)
{
	char *body = json_dumps(obj, JSON_COMPACT), *out = NULL;
	size_t len = 0;
	int r;

	*st = (struct kube_status){ .message = "out of memory" };
	if (!body)
		return -ENOMEM;
	r = kube_client__request(kc, "POST", path, NULL, body, strlen(body), &out, &len, st);
	free(body);
	if (r == 0 && inf) {
		json_t *j = json_loadb(out, len, 0, NULL);

		if (j)
			informer__update(inf, j);
		json_decref(j);
	}
	free(out);
	return r;
}
