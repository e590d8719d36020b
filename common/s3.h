/* SPDX-License-Identifier: MIT */
/*
 * A small S3 client for the uploads aiprof does: PutObject, multipart upload with parts in
 * parallel, HeadObject. Anything that speaks the S3 API with SigV4 (AWS S3, Ceph RGW, MinIO,
 * OSS) is a target. libcurl carries the requests; common/sigv4.c signs them, always with the
 * real payload SHA-256 in X-Amz-Content-Sha256; every body also carries a checksum the
 * server verifies (Content-MD5 by default, or x-amz-checksum-sha256).
 *
 * Failures are retried with exponential backoff and jitter when another try can help (5xx,
 * SlowDown, RequestTimeout, a body the server saw corrupted, a reset or stalled connection)
 * and fail at once when it cannot (403, 404, other 4xx, a TLS certificate problem).
 * The policy is pure and sits behind s3_classify()/s3_backoff_ns()/s3_retry_run(), which
 * take an injectable clock, sleep and random source (struct s3_hooks) so tests can drive
 * them with a fake clock.
 *
 * Library code: nothing here logs. Retries are reported through s3_hooks.notify. Nothing
 * here ever formats a secret key or a session token into a message.
 */
#ifndef AIPROF_S3_H
#define AIPROF_S3_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>
#include "s3url.h"

/* ---- configuration ------------------------------------------------------------------ */

enum s3_addressing {
	S3_ADDRESSING_AUTO = 0,  /* virtual-hosted on AWS for DNS-compatible buckets, else path */
	S3_ADDRESSING_PATH,      /* https://endpoint/bucket/key (Ceph, MinIO defaults) */
	S3_ADDRESSING_VIRTUAL,   /* https://bucket.endpoint/key */
};

/* Settings given explicitly (command-line flags); NULL / 0 means "not given". */
struct s3_settings {
	const char *endpoint_url;   /* over AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL */
	const char *region;         /* over AWS_REGION, AWS_DEFAULT_REGION */
	const char *secret_dir;     /* over AIPROF_S3_SECRET_DIR */
	const char *ca_bundle;      /* over AWS_CA_BUNDLE */
	enum s3_addressing addressing; /* over AIPROF_S3_ADDRESSING=path|virtual|auto */
};

struct s3_config {
	char *endpoint_url;          /* "" when the AWS default for the region is used */
	struct s3_endpoint endpoint; /* parsed endpoint_url or https://s3.REGION.amazonaws.com */
	char *region;
	char *access_key_id;
	char *secret_access_key;     /* never printed */
	char *session_token;         /* NULL unless temporary credentials; never printed */
	char *ca_bundle;             /* NULL: the system's CA store */
	enum s3_addressing addressing;
	char creds_source[300];      /* "environment" or "secret folder /path", for messages */
};

/*
 * Fills *c from s, the secret folder and the environment (in that order of precedence; the
 * variables are listed in struct s3_settings and `aiprof upload --help`). Credentials come from the secret folder when one is given (files
 * AWS_ACCESS_KEY_ID / access_key_id, AWS_SECRET_ACCESS_KEY / secret_access_key, optional
 * AWS_SESSION_TOKEN / session_token; trailing whitespace is trimmed), else from
 * AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY / AWS_SESSION_TOKEN.
 * Returns 0, or -EINVAL / -ENOENT / -EACCES with msg saying what is missing or wrong (never
 * a secret's value); -ENOMEM. On failure *c holds nothing to free.
 */
int s3_config__load(struct s3_config *c, const struct s3_settings *s, char *msg, size_t msglen);
/* Frees and wipes. NULL-safe. */
void s3_config__clear(struct s3_config *c);

/* The addressing used for bucket under c (AUTO resolved). */
enum s3_addressing s3_config__addressing_for(const struct s3_config *c, const char *bucket);

/* ---- retry policy (pure) ------------------------------------------------------------ */

enum s3_net {
	S3_NET_OK = 0,       /* a response arrived (look at the status) */
	S3_NET_CONNECT,      /* could not connect */
	S3_NET_DNS,          /* could not resolve the host */
	S3_NET_TIMEOUT,      /* connect timeout, or the transfer stalled */
	S3_NET_RESET,        /* the connection was reset or closed mid-request */
	S3_NET_TLS,          /* TLS handshake or certificate verification failed */
	S3_NET_OTHER,
};

/* The kind of transport failure a libcurl result code (CURLcode) is. */
enum s3_net s3_net_of_curl(int curl_code);

/* What one try of a request ended with. */
struct s3_attempt {
	long status;            /* HTTP status; 0 if no response */
	enum s3_net net;
	char code[64];          /* S3 error code from the response body, "" if none */
	char detail[256];       /* the server's <Message> or the transport's words */
};

enum s3_verdict { S3_DONE, S3_RETRY, S3_FAIL };

/* DONE for a 2xx without an error code; RETRY or FAIL as the file comment says. */
enum s3_verdict s3_classify(const struct s3_attempt *a);

/* Negative errno for a failed attempt: -EACCES (403), -ENOENT (404), -ETIMEDOUT,
 * -ECONNRESET, -ECONNREFUSED, -EHOSTUNREACH, -EPROTO (TLS, other 4xx), -EBUSY (throttled),
 * -EBADMSG (corrupted in transit), -ENXIO (3xx: wrong region or endpoint), -EIO (5xx). */
int s3_attempt_errno(const struct s3_attempt *a);

struct s3_retry_policy {
	unsigned max_attempts;  /* tries per request, >= 1 */
	uint64_t base_ns;       /* backoff ceiling after the first failure */
	uint64_t cap_ns;        /* largest backoff */
};
#define S3_RETRY_DEFAULT { 6, 250 * 1000000ULL, 20 * 1000000000ULL }

/* Backoff before try number attempt+1 (attempt >= 1 tries have failed): "equal jitter",
 * uniformly in [c/2, c] where c = min(cap, base * 2^(attempt-1)); rnd is any 64-bit random
 * value. Throttling (SlowDown, 503, 429) doubles c once more. */
uint64_t s3_backoff_ns(const struct s3_retry_policy *p, unsigned attempt, bool throttled,
		       uint64_t rnd);

struct s3_hooks {
	void (*sleep_ns)(void *ctx, uint64_t ns);   /* NULL: really sleep */
	uint64_t (*random)(void *ctx);              /* NULL: getrandom() */
	time_t (*now)(void *ctx);                   /* signing clock; NULL: time(NULL) */
	void (*notify)(void *ctx, const char *msg); /* retries; NULL: silent. Called from the
	                                             * upload threads, never with a secret */
	void *ctx;
};

/* The last failure of a request, for messages. */
struct s3_error {
	char op[160];           /* "PUT s3://bucket/key (part 3 of 16)" */
	char bucket[256];
	struct s3_attempt last;
	unsigned attempts;
	int local_err;          /* a local failure (reading the file, memory), or 0 */
};

/* One try: fill *a (it starts zeroed) and return 0 when a response or a transport failure
 * was seen, or a negative errno for a local failure that ends the request at once. */
typedef int (*s3_try_fn)(void *ctx, struct s3_attempt *a);

/*
 * Runs fn until s3_classify() says DONE or FAIL, or p->max_attempts tries were made, sleeping
 * s3_backoff_ns() through h between tries and telling h->notify why. Returns 0, the local
 * error fn returned, or s3_attempt_errno() of the last try; *err describes the failure.
 */
int s3_retry_run(const struct s3_retry_policy *p, const struct s3_hooks *h, s3_try_fn fn,
		 void *ctx, struct s3_error *err);

/*
 * One line for a person: what failed, the server's answer, and what to check (the secret key,
 * the bucket name, the endpoint, the clock, the CA bundle...). Never contains credentials.
 */
void s3_error__describe(const struct s3_error *e, const struct s3_config *c, char *buf,
			size_t len);

/* ---- the client --------------------------------------------------------------------- */

enum s3_checksum {
	S3_CHECKSUM_MD5 = 0,    /* Content-MD5: every S3 implementation verifies it */
	S3_CHECKSUM_SHA256,     /* x-amz-checksum-sha256 (AWS, MinIO, Ceph >= Reef) */
};

struct s3_client_opts {
	uint64_t part_size;           /* bytes per part; raised so a file has <= 10000 parts */
	uint64_t multipart_threshold; /* files this large or larger go multipart */
	unsigned parallel;            /* parts in flight at once */
	uint64_t connect_timeout_ns;
	uint64_t stall_timeout_ns;    /* a request that moves no byte for this long is retried */
	uint64_t object_timeout_ns;   /* one object's operation (every part and try of a PUT, a
				       * HEAD, a GET) not done in this long fails: a server that
				       * trickles a byte now and then keeps a request alive past
				       * the stall timeout; 0: no bound */
	enum s3_checksum checksum;
	struct s3_retry_policy retry;
};
void s3_client_opts__defaults(struct s3_client_opts *o);

#define S3_MIN_PART_SIZE (5ULL << 20)
#define S3_MAX_PART_SIZE (5ULL << 30)
#define S3_MAX_PARTS 10000

struct s3_client;

/* cfg and h must outlive the client. Returns NULL when out of memory or libcurl fails. */
struct s3_client *s3_client__new(const struct s3_config *cfg, const struct s3_client_opts *o,
				 const struct s3_hooks *h);
void s3_client__free(struct s3_client *c); /* NULL-safe */

struct s3_object_meta {
	const char *content_type;     /* NULL: application/octet-stream */
	const char *sha256_hex;       /* of the whole object, stored as x-amz-meta-sha256 */
};

struct s3_put_stats {
	unsigned parts;               /* 0 for a single PUT */
	unsigned retries;             /* tries beyond the first, over all requests */
};

/*
 * Uploads size bytes of fd (read with pread from offset 0) to bucket/key: one PUT below the
 * multipart threshold, else a multipart upload whose parts go up in parallel, each retried on
 * its own; a failed multipart upload is aborted. Returns 0 once the server confirmed the
 * whole object, or a negative errno with *err filled (-ESTALE: the file changed size).
 */
int s3_client__put_file(struct s3_client *c, const char *bucket, const char *key, int fd,
			uint64_t size, const struct s3_object_meta *m, struct s3_put_stats *stats,
			struct s3_error *err);

/* One PUT of a buffer (small objects: the manifest). */
int s3_client__put_buffer(struct s3_client *c, const char *bucket, const char *key,
			  const void *buf, size_t len, const struct s3_object_meta *m,
			  struct s3_error *err);

struct s3_object_info {
	uint64_t size;
	char sha256_hex[65];          /* x-amz-meta-sha256, "" when absent */
};

/*
 * GetObject into memory: *ret (NUL-terminated, caller frees) and *ret_len. Returns 0, -EFBIG
 * when the object is larger than max bytes, -ENOENT (404), or another error with *err filled.
 */
int s3_client__get_buffer(struct s3_client *c, const char *bucket, const char *key, size_t max,
			  char **ret, size_t *ret_len, struct s3_error *err);

/* HeadObject. Returns 0, -ENOENT when there is no such object (or bucket), or an error. */
int s3_client__head(struct s3_client *c, const char *bucket, const char *key,
		    struct s3_object_info *ret, struct s3_error *err);

#endif
