/* SPDX-License-Identifier: MIT */
#include <stdlib.h>
#include "kworker.h"
#include "timeutil.h"

void kworker__run(struct workqueue *q, kworker_reconcile_fn reconcile, void *ctx,
		  uint64_t slack_ns)
{
	char *key = NULL;

	while (workqueue__get(q, &key) == 0) {
		int64_t at = 0;
		int r = reconcile(ctx, key, &at);

		if (r < 0) {
			(void)workqueue__add_rate_limited(q, key);
		} else {
			int64_t now = (int64_t)now_realtime_ns();

			workqueue__forget(q, key);
			if (at > 0)
				(void)workqueue__add_after(q, key, at > now ?
							   (uint64_t)(at - now) + slack_ns : 1);
		}
		workqueue__done(q, key);
		free(key);
		key = NULL;
	}
}
