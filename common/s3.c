/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>
#include <curl/curl.h>
#include "digest.h"
#include "readfile.h"
#include "s3.h"
#include "s3xml.h"
#include "sigv4.h"
#include "strbuf.h"
#include "timeutil.h"

#ifndef AIPROF_VERSION
#define AIPROF_VERSION "0.1.0"
#endif

#define RESP_BODY_MAX (64 * 1024)

/* ======================================================================================
 * configuration
 * ==================================================================================== */

static const char *env_nonempty(const char *name)
{
	const char *v = getenv(name);

	return v && *v ? v : NULL;
}

/* Reads a small secret file: contents with trailing whitespace (and a leading BOM-less
 * whitespace run) trimmed. 0, -ENOENT when absent, -EINVAL when empty or too large. */
static int read_secret_file(const char *dir, const char *name, char **ret)
{
	char path[4096], *buf = NULL;
	size_t len = 0, n, start = 0;
	int err;

	if ((size_t)snprintf(path, sizeof(path), "%s/%s", dir, name) >= sizeof(path))
		return -ENAMETOOLONG;
	err = readfile(path, 4095, 0, &buf, &len);   /* wiped by readfile on failure */
	if (err < 0)
		return err;
	n = len;
	while (n && (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' ' ||
		     buf[n - 1] == '\t'))
		n--;
	while (start < n && (buf[start] == ' ' || buf[start] == '\t' || buf[start] == '\n'))
		start++;
	if (start == n) {
		err = -ENODATA;
		goto out;
	}
	for (size_t i = start; i < n; i++)
		if ((unsigned char)buf[i] < 0x20 || buf[i] == 0x7f) {
			err = -EINVAL;
			goto out;
		}
	*ret = strndup(buf + start, n - start);
	if (!*ret)
		err = -ENOMEM;
out:
	explicit_bzero(buf, len);
	free(buf);
	return err;
}

/* First of the names present in dir. -ENOENT when none is. */
static int read_secret_any(const char *dir, const char *const *names, char **ret,
			   const char **ret_name)
{
	for (; *names; names++) {
		int r = read_secret_file(dir, *names, ret);

		*ret_name = *names;
		if (r != -ENOENT)
			return r;
	}
	return -ENOENT;
}

static bool valid_token(const char *s, size_t max)
{
	size_t n = strlen(s);

	if (!n || n > max)
		return false;
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)s[i] <= 0x20 || s[i] == 0x7f)
			return false;
	return true;
}

static bool valid_region(const char *r)
{
	size_t n = strlen(r);

	if (!n || n > 64)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!((r[i] >= 'a' && r[i] <= 'z') || (r[i] >= 'A' && r[i] <= 'Z') ||
		      (r[i] >= '0' && r[i] <= '9') || r[i] == '-' || r[i] == '_'))
			return false;
	return true;
}

void s3_config__clear(struct s3_config *c)
{
	if (!c)
		return;
	free(c->endpoint_url);
	s3_endpoint__clear(&c->endpoint);
	free(c->region);
	free(c->access_key_id);
	if (c->secret_access_key) {
		explicit_bzero(c->secret_access_key, strlen(c->secret_access_key));
		free(c->secret_access_key);
	}
	if (c->session_token) {
		explicit_bzero(c->session_token, strlen(c->session_token));
		free(c->session_token);
	}
	free(c->ca_bundle);
	memset(c, 0, sizeof(*c));
}

static int load_credentials(struct s3_config *c, const char *dir, char *msg, size_t msglen)
{
	static const char *const id_names[] = { "AWS_ACCESS_KEY_ID", "access_key_id", NULL };
	static const char *const key_names[] = { "AWS_SECRET_ACCESS_KEY", "secret_access_key", NULL };
	static const char *const tok_names[] = { "AWS_SESSION_TOKEN", "session_token", NULL };
	const char *name = NULL;
	struct stat st;
	int r;

	if (!dir) {
		const char *id = env_nonempty("AWS_ACCESS_KEY_ID");
		const char *key = env_nonempty("AWS_SECRET_ACCESS_KEY");
		const char *tok = env_nonempty("AWS_SESSION_TOKEN");

		if (!id || !key) {
			snprintf(msg, msglen, "no S3 credentials: set AWS_ACCESS_KEY_ID and "
				 "AWS_SECRET_ACCESS_KEY, or give a secret folder (--secret-dir DIR or "
				 "AIPROF_S3_SECRET_DIR) holding files AWS_ACCESS_KEY_ID and "
				 "AWS_SECRET_ACCESS_KEY");
			return -ENOENT;
		}
		snprintf(c->creds_source, sizeof(c->creds_source), "environment");
		c->access_key_id = strdup(id);
		c->secret_access_key = strdup(key);
		c->session_token = tok ? strdup(tok) : NULL;
		if (!c->access_key_id || !c->secret_access_key || (tok && !c->session_token))
			return -ENOMEM;
	} else {
		if (stat(dir, &st) < 0 || !S_ISDIR(st.st_mode)) {
			r = errno ? -errno : -ENOTDIR;
			snprintf(msg, msglen, "secret folder %s: %s", dir,
				 stat(dir, &st) < 0 ? strerror(-r) : "not a folder");
			return r == -ENOTDIR ? -EINVAL : r;
		}
		snprintf(c->creds_source, sizeof(c->creds_source), "secret folder %.280s", dir);
		r = read_secret_any(dir, id_names, &c->access_key_id, &name);
		if (r == 0)
			r = read_secret_any(dir, key_names, &c->secret_access_key, &name);
		if (r == 0) {
			r = read_secret_any(dir, tok_names, &c->session_token, &name);
			if (r == -ENOENT)
				r = 0;
		}
		if (r == -ENOENT) {
			snprintf(msg, msglen, "secret folder %s has no %s file (nor %s)", dir,
				 name == id_names[1] ? id_names[0] : name == key_names[1] ?
				 key_names[0] : tok_names[0], name);
			return r;
		}
		if (r == -ENODATA || r == -EINVAL || r == -EFBIG) {
			snprintf(msg, msglen, "secret folder %s: file %s is %s", dir, name,
				 r == -ENODATA ? "empty" : r == -EFBIG ? "too large (over 4 KiB)" :
				 "not a single line of printable text");
			return -EINVAL;
		}
		if (r < 0) {
			snprintf(msg, msglen, "secret folder %s: cannot read %s: %s", dir, name,
				 strerror(-r));
			return r;
		}
	}
	if (!valid_token(c->access_key_id, 256)) {
		snprintf(msg, msglen, "the access key id from the %s is not printable text without "
			 "spaces", c->creds_source);
		return -EINVAL;
	}
	if (!valid_token(c->secret_access_key, 1024)) {
		snprintf(msg, msglen, "the secret access key from the %s is not printable text "
			 "without spaces", c->creds_source);
		return -EINVAL;
	}
	if (c->session_token && !valid_token(c->session_token, 8192)) {
		snprintf(msg, msglen, "the session token from the %s is not printable text without "
			 "spaces", c->creds_source);
		return -EINVAL;
	}
	return 0;
}

int s3_config__load(struct s3_config *c, const struct s3_settings *s, char *msg, size_t msglen)
{
	static const struct s3_settings none;
	const char *endpoint, *region, *dir, *ca, *addr;
	char def[128];
	int r;

	if (!s)
		s = &none;
	memset(c, 0, sizeof(*c));
	msg[0] = '\0';

	region = s->region ? s->region : env_nonempty("AWS_REGION");
	if (!region)
		region = env_nonempty("AWS_DEFAULT_REGION");
	if (!region)
		region = "us-east-1";
	if (!valid_region(region)) {
		snprintf(msg, msglen, "region '%.64s' is not a region name (letters, digits, '-')",
			 region);
		r = -EINVAL;
		goto fail;
	}
	c->region = strdup(region);

	endpoint = s->endpoint_url ? s->endpoint_url : env_nonempty("AWS_ENDPOINT_URL_S3");
	if (!endpoint)
		endpoint = env_nonempty("AWS_ENDPOINT_URL");
	c->endpoint_url = strdup(endpoint ? endpoint : "");
	if (!c->region || !c->endpoint_url) {
		r = -ENOMEM;
		goto fail;
	}
	if (!endpoint) {
		snprintf(def, sizeof(def), "https://s3.%s.amazonaws.com", c->region);
		endpoint = def;
	}
	r = s3_endpoint__parse(endpoint, &c->endpoint);
	if (r < 0) {
		if (r == -EINVAL && strchr(endpoint, '@'))
			/* not echoed: it may hold a password */
			snprintf(msg, msglen, "the endpoint URL has a user:password@ part: "
				 "credentials do not go into URLs; give http[s]://host[:port]");
		else if (r == -EINVAL)
			snprintf(msg, msglen, "endpoint URL '%.200s' is not http[s]://host[:port] "
				 "(no path, no user:password@)", endpoint);
		goto fail;
	}

	addr = env_nonempty("AIPROF_S3_ADDRESSING");
	c->addressing = s->addressing;
	if (!c->addressing && addr) {
		if (strcmp(addr, "path") == 0)
			c->addressing = S3_ADDRESSING_PATH;
		else if (strcmp(addr, "virtual") == 0)
			c->addressing = S3_ADDRESSING_VIRTUAL;
		else if (strcmp(addr, "auto") != 0) {
			snprintf(msg, msglen, "AIPROF_S3_ADDRESSING='%.32s': use path, virtual or auto",
				 addr);
			r = -EINVAL;
			goto fail;
		}
	}
	if (c->addressing == S3_ADDRESSING_VIRTUAL && c->endpoint.host[0] == '[') {
		snprintf(msg, msglen, "virtual-hosted addressing needs a host name, not the address "
			 "%s: use path-style addressing", c->endpoint.host);
		r = -EINVAL;
		goto fail;
	}

	ca = s->ca_bundle ? s->ca_bundle : env_nonempty("AWS_CA_BUNDLE");
	if (ca) {
		if (access(ca, R_OK) < 0) {
			r = -errno;
			snprintf(msg, msglen, "CA bundle %.200s: %s", ca, strerror(errno));
			goto fail;
		}
		c->ca_bundle = strdup(ca);
		if (!c->ca_bundle) {
			r = -ENOMEM;
			goto fail;
		}
	}

	dir = s->secret_dir ? s->secret_dir : env_nonempty("AIPROF_S3_SECRET_DIR");
	r = load_credentials(c, dir, msg, msglen);
	if (r < 0)
		goto fail;
	return 0;
fail:
	if (r == -ENOMEM && !msg[0])
		snprintf(msg, msglen, "out of memory");
	s3_config__clear(c);
	return r;
}

static bool is_aws_host(const char *host)
{
	size_t n = strlen(host), m = strlen(".amazonaws.com");

	return n > m && strcmp(host + n - m, ".amazonaws.com") == 0;
}

enum s3_addressing s3_config__addressing_for(const struct s3_config *c, const char *bucket)
{
	if (c->addressing != S3_ADDRESSING_AUTO)
		return c->addressing;
	/* Custom endpoints (Ceph, MinIO) rarely have wildcard DNS: path-style there. AWS wants
	 * virtual-hosted, but a bucket with dots breaks its TLS wildcard certificate. */
	if (is_aws_host(c->endpoint.host) && s3_bucket_dns_compatible(bucket) &&
	    !(c->endpoint.https && strchr(bucket, '.')))
		return S3_ADDRESSING_VIRTUAL;
	return S3_ADDRESSING_PATH;
}

/* ======================================================================================
 * retry policy
 * ==================================================================================== */

static bool code_in(const char *code, const char *const *list)
{
	for (; *list; list++)
		if (strcmp(code, *list) == 0)
			return true;
	return false;
}

static const char *const retry_codes[] = {
	"SlowDown", "RequestTimeout", "InternalError", "ServiceUnavailable", "Throttling",
	"ThrottlingException", "RequestThrottled", "BadDigest", "XAmzContentSHA256Mismatch",
	"IncompleteBody", "OperationAborted", NULL,
};
static const char *const throttle_codes[] = {
	"SlowDown", "Throttling", "ThrottlingException", "RequestThrottled", NULL,
};

enum s3_verdict s3_classify(const struct s3_attempt *a)
{
	if (a->net != S3_NET_OK)
		return a->net == S3_NET_TLS ? S3_FAIL : S3_RETRY;
	if (a->code[0] && code_in(a->code, retry_codes))
		return S3_RETRY;
	if (a->status >= 200 && a->status < 300)
		return a->code[0] ? S3_FAIL : S3_DONE;
	if (a->status == 429 || a->status >= 500)
		return S3_RETRY;
	return S3_FAIL;
}

static bool throttled(const struct s3_attempt *a)
{
	return a->net == S3_NET_OK &&
	       (a->status == 429 || a->status == 503 || code_in(a->code, throttle_codes));
}

int s3_attempt_errno(const struct s3_attempt *a)
{
	switch (a->net) {
	case S3_NET_OK: break;
	case S3_NET_CONNECT: return -ECONNREFUSED;
	case S3_NET_DNS: return -EHOSTUNREACH;
	case S3_NET_TIMEOUT: return -ETIMEDOUT;
	case S3_NET_RESET: return -ECONNRESET;
	case S3_NET_TLS: return -EPROTO;
	default: return -EIO;
	}
	if (strcmp(a->code, "BadDigest") == 0 || strcmp(a->code, "XAmzContentSHA256Mismatch") == 0)
		return -EBADMSG;
	if (throttled(a))
		return -EBUSY;
	if (strcmp(a->code, "InternalError") == 0)
		return -EIO;
	if (strcmp(a->code, "RequestTimeout") == 0)
		return -ETIMEDOUT;
	if (a->status == 403)
		return -EACCES;
	if (a->status == 404)
		return -ENOENT;
	if (a->status >= 300 && a->status < 400)
		return -ENXIO;
	if (a->status >= 500)
		return -EIO;
	return -EPROTO;
}

uint64_t s3_backoff_ns(const struct s3_retry_policy *p, unsigned attempt, bool throttle,
		       uint64_t rnd)
{
	uint64_t c = p->base_ns;
	unsigned shifts = (attempt ? attempt - 1 : 0) + (throttle ? 1 : 0);

	for (unsigned i = 0; i < shifts && c < p->cap_ns; i++)
		c = c > UINT64_MAX / 2 ? UINT64_MAX : c * 2;
	if (c > p->cap_ns)
		c = p->cap_ns;
	if (c < 2)
		return c;
	return c / 2 + rnd % (c - c / 2 + 1);
}

static void default_sleep(void *ctx, uint64_t ns)
{
	(void)ctx;
	sleep_ns(ns);
}

static uint64_t default_random(void *ctx)
{
	uint64_t v = 0;

	(void)ctx;
	if (getrandom(&v, sizeof(v), 0) != (ssize_t)sizeof(v))
		v = now_monotonic_ns() * 6364136223846793005ULL;
	return v;
}

static time_t default_now(void *ctx)
{
	(void)ctx;
	return time(NULL);
}

static void describe_attempt(const struct s3_attempt *a, char *buf, size_t len)
{
	static const char *const net_words[] = {
		[S3_NET_CONNECT] = "could not connect", [S3_NET_DNS] = "could not resolve the host",
		[S3_NET_TIMEOUT] = "timed out", [S3_NET_RESET] = "connection reset",
		[S3_NET_TLS] = "TLS failure", [S3_NET_OTHER] = "transfer failed",
	};

	if (a->net != S3_NET_OK)
		snprintf(buf, len, "%s (%s)", net_words[a->net], a->detail);
	else if (a->code[0])
		snprintf(buf, len, "HTTP %ld %s%s%s%s", a->status, a->code,
			 a->detail[0] ? " (" : "", a->detail, a->detail[0] ? ")" : "");
	else
		snprintf(buf, len, "HTTP %ld", a->status);
}

int s3_retry_run(const struct s3_retry_policy *p, const struct s3_hooks *h, s3_try_fn fn,
		 void *ctx, struct s3_error *err)
{
	unsigned max = p->max_attempts ? p->max_attempts : 1;

	err->attempts = 0;
	err->local_err = 0;
	for (unsigned n = 1;; n++) {
		struct s3_attempt a;
		enum s3_verdict v;
		uint64_t wait;
		char why[400], msg[700], d[32];
		int r;

		memset(&a, 0, sizeof(a));
		r = fn(ctx, &a);
		err->attempts = n;
		err->last = a;
		if (r < 0) {
			err->local_err = r;
			return r;
		}
		v = s3_classify(&a);
		if (v == S3_DONE)
			return 0;
		if (v == S3_FAIL || n >= max)
			return s3_attempt_errno(&a);
		wait = s3_backoff_ns(p, n, throttled(&a),
				     h && h->random ? h->random(h->ctx) : default_random(NULL));
		if (h && h->notify) {
			describe_attempt(&a, why, sizeof(why));
			snprintf(msg, sizeof(msg), "%s: %s; retrying in %s (try %u of %u)", err->op,
				 why, format_duration(d, sizeof(d), wait), n + 1, max);
			h->notify(h->ctx, msg);
		}
		if (h && h->sleep_ns)
			h->sleep_ns(h->ctx, wait);
		else
			default_sleep(NULL, wait);
	}
}

static void sanitize(char *s)
{
	for (; *s; s++)
		if ((unsigned char)*s < 0x20 || *s == 0x7f)
			*s = '?';
}

void s3_error__describe(const struct s3_error *e, const struct s3_config *c, char *buf,
			size_t len)
{
	const struct s3_attempt *a = &e->last;
	const char *code = a->code, *endpoint = c && c->endpoint_url[0] ? c->endpoint_url :
			   "the AWS endpoint";
	const char *src = c ? c->creds_source : "configuration";
	char what[400], hint[600], tries[48] = "";

	if (e->local_err == -ESTALE) {
		snprintf(buf, len, "%s: the file changed size while it was being uploaded: let "
			 "whatever writes it finish, then upload again", e->op);
		sanitize(buf);
		return;
	}
	if (e->local_err == -ETIMEDOUT) {
		snprintf(buf, len, "%s: %s (%u tr%s): the server at %s answers too slowly (a "
			 "byte now and then keeps a request from stalling): check its health and "
			 "the network path, or raise --object-timeout", e->op, a->detail,
			 e->attempts, e->attempts == 1 ? "y" : "ies", endpoint);
		sanitize(buf);
		return;
	}
	if (e->local_err) {
		snprintf(buf, len, "%s: %s", e->op, strerror(-e->local_err));
		sanitize(buf);
		return;
	}
	describe_attempt(a, what, sizeof(what));
	if (e->attempts > 1)
		snprintf(tries, sizeof(tries), " after %u tries", e->attempts);

	if (a->net == S3_NET_CONNECT)
		snprintf(hint, sizeof(hint), "check the endpoint URL %s (--endpoint-url, "
			 "AWS_ENDPOINT_URL_S3) and that the server is up and reachable", endpoint);
	else if (a->net == S3_NET_DNS)
		snprintf(hint, sizeof(hint), "check the host name of the endpoint %s and DNS",
			 endpoint);
	else if (a->net == S3_NET_TIMEOUT)
		snprintf(hint, sizeof(hint), "no progress on the connection: check the network "
			 "path to %s (proxies, firewalls, MTU) and the server's health, or raise "
			 "--stall-timeout", endpoint);
	else if (a->net == S3_NET_RESET || a->net == S3_NET_OTHER)
		snprintf(hint, sizeof(hint), "the connection to %s kept failing: check the network "
			 "path and the server's logs", endpoint);
	else if (a->net == S3_NET_TLS)
		snprintf(hint, sizeof(hint), "check the CA bundle (--ca-bundle, AWS_CA_BUNDLE) and "
			 "that the certificate of %s is valid for its host name", endpoint);
	else if (!strcmp(code, "SignatureDoesNotMatch"))
		snprintf(hint, sizeof(hint), "the server computed another signature: check that "
			 "the secret access key (from the %s) belongs to the access key id, and the "
			 "region (%s)", src, c ? c->region : "?");
	else if (!strcmp(code, "InvalidAccessKeyId"))
		snprintf(hint, sizeof(hint), "the server does not know this access key id: check "
			 "the credentials (from the %s) and that %s is the right service", src,
			 endpoint);
	else if (!strcmp(code, "RequestTimeTooSkewed"))
		snprintf(hint, sizeof(hint), "this machine's clock differs from the server's by "
			 "more than 15 minutes: fix the clock (NTP)");
	else if (!strcmp(code, "ExpiredToken") || !strcmp(code, "InvalidToken") ||
		 !strcmp(code, "TokenRefreshRequired"))
		snprintf(hint, sizeof(hint), "the session token (from the %s) expired or is "
			 "invalid: refresh the temporary credentials", src);
	else if (!strcmp(code, "AccessDenied") || !strcmp(code, "AllAccessDisabled"))
		snprintf(hint, sizeof(hint), "the credentials (from the %s) are not allowed to "
			 "write to bucket '%s': check the user's permissions and the bucket policy "
			 "(s3:PutObject, s3:AbortMultipartUpload)", src, e->bucket);
	else if (a->status == 403)
		snprintf(hint, sizeof(hint), "access denied: check the credentials (from the %s) "
			 "and the permissions on bucket '%s'", src, e->bucket);
	else if (!strcmp(code, "NoSuchBucket"))
		snprintf(hint, sizeof(hint), "bucket '%s' does not exist at %s: create it, or "
			 "check the bucket name, the endpoint and the region (%s)", e->bucket,
			 endpoint, c ? c->region : "?");
	else if (!strcmp(code, "NoSuchUpload"))
		snprintf(hint, sizeof(hint), "the server dropped the multipart upload (aborted or "
			 "expired): run the upload again");
	else if (a->status == 404)
		snprintf(hint, sizeof(hint), "not found: check the bucket name '%s', the endpoint "
			 "%s and the addressing style (--path-style / --virtual-hosted)", e->bucket,
			 endpoint);
	else if (a->status >= 300 && a->status < 400)
		snprintf(hint, sizeof(hint), "the bucket is served by another region or endpoint: "
			 "check --region / AWS_REGION (now %s) and the endpoint %s",
			 c ? c->region : "?", endpoint);
	else if (!strcmp(code, "AuthorizationHeaderMalformed") ||
		 !strcmp(code, "IllegalLocationConstraintException"))
		snprintf(hint, sizeof(hint), "the region in the signature is wrong for this "
			 "bucket: check --region / AWS_REGION (now %s)", c ? c->region : "?");
	else if (!strcmp(code, "BadDigest") || !strcmp(code, "XAmzContentSHA256Mismatch"))
		snprintf(hint, sizeof(hint), "the server kept receiving bytes that differ from "
			 "those sent: something on the network path alters data");
	else if (a->status == 429 || a->status == 503 || code_in(code, throttle_codes))
		snprintf(hint, sizeof(hint), "the server kept throttling: it is overloaded; try "
			 "again later or lower --parallel");
	else if (a->status >= 500)
		snprintf(hint, sizeof(hint), "the server kept failing: check its health and logs "
			 "and try again later");
	else
		snprintf(hint, sizeof(hint), "the server rejected the request");
	snprintf(buf, len, "%s: %s%s: %s", e->op, what, tries, hint);
	sanitize(buf);
}

/* ======================================================================================
 * the client
 * ==================================================================================== */

void s3_client_opts__defaults(struct s3_client_opts *o)
{
	static const struct s3_retry_policy retry = S3_RETRY_DEFAULT;

	memset(o, 0, sizeof(*o));
	o->part_size = 16ULL << 20;
	o->multipart_threshold = 16ULL << 20;
	o->parallel = 4;
	o->connect_timeout_ns = 10 * NSEC_PER_SEC;
	o->stall_timeout_ns = 30 * NSEC_PER_SEC;
	o->object_timeout_ns = 15 * 60 * NSEC_PER_SEC;
	o->checksum = S3_CHECKSUM_MD5;
	o->retry = retry;
}

struct s3_client {
	const struct s3_config *cfg;
	struct s3_client_opts o;
	struct s3_hooks h;
	CURL *curl;             /* the calling thread's handle; part workers have their own */
	bool curl_inited;
	uint64_t deadline_ns;   /* CLOCK_MONOTONIC: the operation on the current object ends
				 * by then (set before part workers start; 0: none) */
};

/* The operation on one object starts now: its deadline (object_timeout_ns). */
static void begin_object(struct s3_client *c)
{
	c->deadline_ns = c->o.object_timeout_ns ? now_monotonic_ns() + c->o.object_timeout_ns : 0;
}

static bool overdue(const struct s3_client *c)
{
	return c->deadline_ns && now_monotonic_ns() >= c->deadline_ns;
}

/* The attempt a, cut short by the object's deadline. */
static void set_overdue(const struct s3_client *c, struct s3_attempt *a)
{
	char d[32];

	a->net = S3_NET_TIMEOUT;
	snprintf(a->detail, sizeof(a->detail), "not done within the object's deadline of %s",
		 format_duration(d, sizeof(d), c->o.object_timeout_ns));
}

struct s3_client *s3_client__new(const struct s3_config *cfg, const struct s3_client_opts *o,
				 const struct s3_hooks *h)
{
	struct s3_client *c = calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	c->cfg = cfg;
	if (o)
		c->o = *o;
	else
		s3_client_opts__defaults(&c->o);
	if (h)
		c->h = *h;
	if (!c->h.sleep_ns)
		c->h.sleep_ns = default_sleep;
	if (!c->h.random)
		c->h.random = default_random;
	if (!c->h.now)
		c->h.now = default_now;
	if (c->o.parallel < 1)
		c->o.parallel = 1;
	if (c->o.parallel > 64)
		c->o.parallel = 64;
	if (c->o.part_size < S3_MIN_PART_SIZE)
		c->o.part_size = S3_MIN_PART_SIZE;
	if (c->o.part_size > S3_MAX_PART_SIZE)
		c->o.part_size = S3_MAX_PART_SIZE;
	if (!c->o.multipart_threshold || c->o.multipart_threshold > S3_MAX_PART_SIZE)
		c->o.multipart_threshold = S3_MAX_PART_SIZE;  /* S3's largest single PUT */
	if (c->o.retry.max_attempts < 1)
		c->o.retry.max_attempts = 1;
	if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
		free(c);
		return NULL;
	}
	c->curl_inited = true;
	c->curl = curl_easy_init();
	if (!c->curl) {
		s3_client__free(c);
		return NULL;
	}
	return c;
}

void s3_client__free(struct s3_client *c)
{
	if (!c)
		return;
	if (c->curl)
		curl_easy_cleanup(c->curl);
	if (c->curl_inited)
		curl_global_cleanup();
	free(c);
}

/* One request, described for signing and sending. */
struct req {
	const char *method;
	const char *bucket;
	const char *key;
	const struct sigv4_kv *query;
	size_t n_query;
	const uint8_t *body;
	size_t len;
	const char *sha256_hex;        /* of body */
	const char *md5_b64;           /* Content-MD5, or NULL */
	const char *checksum_b64;      /* x-amz-checksum-sha256, or NULL */
	const char *content_type;      /* or NULL */
	const struct sigv4_kv *extra;  /* more signed headers */
	size_t n_extra;
};

struct resp {
	char etag[130];
	uint64_t content_length;
	bool have_length;
	char meta_sha256[65];
	struct strbuf body;
	size_t body_max;           /* bytes of body kept; 0: RESP_BODY_MAX (error documents) */
	bool truncated;            /* the body was longer than that */
};

struct body_reader {
	const uint8_t *p;
	size_t len, off;
};

static size_t on_read(char *buf, size_t size, size_t n, void *ud)
{
	struct body_reader *r = ud;
	size_t want = size * n, left = r->len - r->off;

	if (want > left)
		want = left;
	memcpy(buf, r->p + r->off, want);
	r->off += want;
	return want;
}

static int on_seek(void *ud, curl_off_t off, int origin)
{
	struct body_reader *r = ud;

	if (origin != SEEK_SET || off < 0 || (uint64_t)off > r->len)
		return CURL_SEEKFUNC_CANTSEEK;
	r->off = (size_t)off;
	return CURL_SEEKFUNC_OK;
}

static size_t on_body(char *buf, size_t size, size_t n, void *ud)
{
	struct resp *r = ud;
	size_t len = size * n, max = r->body_max ? r->body_max : RESP_BODY_MAX;

	if (r->body.len + len > max)
		r->truncated = true;
	if (r->body.len < max)
		strbuf_add(&r->body, buf, len < max - r->body.len ? len : max - r->body.len);
	return len;
}

static void header_value(const char *buf, size_t len, size_t skip, char *out, size_t outlen)
{
	size_t s = skip, e = len, n;

	while (s < e && (buf[s] == ' ' || buf[s] == '\t'))
		s++;
	while (e > s && (buf[e - 1] == '\r' || buf[e - 1] == '\n' || buf[e - 1] == ' '))
		e--;
	n = e - s < outlen - 1 ? e - s : outlen - 1;
	memcpy(out, buf + s, n);
	out[n] = '\0';
}

static size_t on_header(char *buf, size_t size, size_t n, void *ud)
{
	struct resp *r = ud;
	size_t len = size * n;
	char v[32];

	if (len >= 5 && memcmp(buf, "HTTP/", 5) == 0) {
		/* a new response (after "100 Continue"): forget the previous one's headers */
		r->etag[0] = r->meta_sha256[0] = '\0';
		r->have_length = false;
	} else if (len > 5 && strncasecmp(buf, "etag:", 5) == 0) {
		header_value(buf, len, 5, r->etag, sizeof(r->etag));
	} else if (len > 15 && strncasecmp(buf, "content-length:", 15) == 0) {
		header_value(buf, len, 15, v, sizeof(v));
		r->content_length = strtoull(v, NULL, 10);
		r->have_length = true;
	} else if (len > 18 && strncasecmp(buf, "x-amz-meta-sha256:", 18) == 0) {
		header_value(buf, len, 18, r->meta_sha256, sizeof(r->meta_sha256));
	}
	return len;
}

/* A request that moves no byte either way for stall_ns is aborted. curl's own low-speed
 * check averages over a window of seconds and so notices a stall several seconds late. */
struct progress {
	uint64_t stall_ns;        /* 0: no stall bound */
	uint64_t deadline_ns;     /* 0: none */
	uint64_t last_ns;
	curl_off_t ul, dl;
	bool stalled, overdue;
};

static int on_progress(void *ud, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
		       curl_off_t ulnow)
{
	struct progress *p = ud;
	uint64_t now = now_monotonic_ns();

	(void)dltotal;
	(void)ultotal;
	/* bytes that trickle in keep a transfer from stalling, not from ending */
	if (p->deadline_ns && now >= p->deadline_ns) {
		p->overdue = true;
		return 1;
	}
	if (!p->last_ns || ulnow != p->ul || dlnow != p->dl) {
		p->ul = ulnow;
		p->dl = dlnow;
		p->last_ns = now;
		return 0;
	}
	if (p->stall_ns && now - p->last_ns >= p->stall_ns) {
		p->stalled = true;
		return 1;
	}
	return 0;
}

enum s3_net s3_net_of_curl(int code)
{
	switch ((CURLcode)code) {
	case CURLE_OK: return S3_NET_OK;
	case CURLE_COULDNT_CONNECT: return S3_NET_CONNECT;
	case CURLE_COULDNT_RESOLVE_HOST: return S3_NET_DNS;
	case CURLE_OPERATION_TIMEDOUT: return S3_NET_TIMEOUT;
	case CURLE_SEND_ERROR:
	case CURLE_RECV_ERROR:
	case CURLE_GOT_NOTHING:
	case CURLE_PARTIAL_FILE:
	case CURLE_SSL_CONNECT_ERROR:
		return S3_NET_RESET;
	case CURLE_PEER_FAILED_VERIFICATION:
	case CURLE_SSL_CACERT_BADFILE:
	case CURLE_SSL_CERTPROBLEM:
	case CURLE_SSL_CIPHER:
	case CURLE_SSL_ISSUER_ERROR:
	case CURLE_SSL_PINNEDPUBKEYNOTMATCH:
		return S3_NET_TLS;
	default:
		return S3_NET_OTHER;
	}
}

/* Builds "scheme://host/path?query" and the Host header for r. */
static int build_target(const struct s3_client *c, const struct req *r, struct strbuf *url,
			struct strbuf *host, struct strbuf *path)
{
	const struct s3_endpoint *ep = &c->cfg->endpoint;

	if (s3_config__addressing_for(c->cfg, r->bucket) == S3_ADDRESSING_VIRTUAL) {
		strbuf_addf(host, "%s.%s", r->bucket, ep->host_header);
		strbuf_addf(path, "/%s", r->key);
	} else {
		strbuf_adds(host, ep->host_header);
		strbuf_addf(path, "/%s/%s", r->bucket, r->key);
	}
	if (strbuf_err(host) || strbuf_err(path))
		return -ENOMEM;
	strbuf_addf(url, "%s://%s", ep->https ? "https" : "http", host->s);
	{
		size_t n = sigv4_uri_encode(NULL, 0, path->s, path->len, true);

		if (strbuf_reserve(url, n) == 0) {
			sigv4_uri_encode(url->s + url->len, n + 1, path->s, path->len, true);
			url->len += n;
		}
	}
	for (size_t i = 0; i < r->n_query; i++) {
		const char *k = r->query[i].key, *v = r->query[i].value;
		size_t kn = sigv4_uri_encode(NULL, 0, k, strlen(k), false);

		strbuf_addc(url, i ? '&' : '?');
		if (strbuf_reserve(url, kn) == 0) {
			sigv4_uri_encode(url->s + url->len, kn + 1, k, strlen(k), false);
			url->len += kn;
		}
		if (v) {
			size_t vn = sigv4_uri_encode(NULL, 0, v, strlen(v), false);

			strbuf_addc(url, '=');
			if (strbuf_reserve(url, vn) == 0) {
				sigv4_uri_encode(url->s + url->len, vn + 1, v, strlen(v), false);
				url->len += vn;
			}
		}
	}
	return strbuf_err(url);
}

static struct curl_slist *add_header(struct curl_slist *l, const char *name, const char *value,
				     int *err)
{
	struct strbuf b = STRBUF_INIT;
	struct curl_slist *n;

	if (*err)
		return l;
	strbuf_addf(&b, "%s: %s", name, value);
	if (strbuf_err(&b)) {
		*err = -ENOMEM;
		return l;
	}
	n = curl_slist_append(l, b.s);
	strbuf__release(&b);
	if (!n) {
		*err = -ENOMEM;
		return l;
	}
	return n;
}

/*
 * One try of r on handle h: signs with the hook clock, sends, fills *a and *out. Returns 0
 * when a response or a transport failure was seen (see *a), or -ENOMEM.
 */
static int request_once(struct s3_client *c, CURL *h, const struct req *r, struct resp *out,
			struct s3_attempt *a)
{
	struct strbuf url = STRBUF_INIT, host = STRBUF_INIT, path = STRBUF_INIT;
	struct sigv4_kv hdr[16];
	struct sigv4_result sig = { 0 };
	struct sigv4_request sreq;
	struct sigv4_credentials cred = {
		c->cfg->access_key_id, c->cfg->secret_access_key, c->cfg->session_token,
	};
	struct body_reader rd = { r->body, r->len, 0 };
	struct curl_slist *list = NULL;
	struct progress prog = { .stall_ns = c->o.stall_timeout_ns, .deadline_ns = c->deadline_ns };
	char date[17], errbuf[CURL_ERROR_SIZE] = "";
	size_t nh = 0;
	time_t now;
	CURLcode rc;
	long status = 0;
	int err = 0;

	if (r->n_extra > 8)
		return -EINVAL;
	out->etag[0] = out->meta_sha256[0] = '\0';
	out->have_length = false;
	out->content_length = 0;
	strbuf__release(&out->body);

	err = build_target(c, r, &url, &host, &path);
	if (err < 0)
		goto fail;
	now = c->h.now(c->h.ctx);
	sigv4_format_date(now, date);
	hdr[nh++] = (struct sigv4_kv){ "Host", host.s };
	hdr[nh++] = (struct sigv4_kv){ "x-amz-date", date };
	hdr[nh++] = (struct sigv4_kv){ "x-amz-content-sha256", r->sha256_hex };
	if (cred.session_token)
		hdr[nh++] = (struct sigv4_kv){ "x-amz-security-token", cred.session_token };
	if (r->md5_b64)
		hdr[nh++] = (struct sigv4_kv){ "Content-MD5", r->md5_b64 };
	if (r->checksum_b64)
		hdr[nh++] = (struct sigv4_kv){ "x-amz-checksum-sha256", r->checksum_b64 };
	if (r->content_type)
		hdr[nh++] = (struct sigv4_kv){ "Content-Type", r->content_type };
	for (size_t i = 0; i < r->n_extra; i++)
		hdr[nh++] = r->extra[i];

	sreq = (struct sigv4_request){
		.method = r->method, .path = path.s, .query = r->query, .n_query = r->n_query,
		.headers = hdr, .n_headers = nh, .payload_hash = r->sha256_hex,
		.normalize_path = false,
	};
	err = sigv4__sign(&sreq, &cred, c->cfg->region, "s3", now, &sig);
	if (err < 0)
		goto fail;
	for (size_t i = 0; i < nh; i++)
		list = add_header(list, hdr[i].key, hdr[i].value, &err);
	list = add_header(list, "Authorization", sig.authorization, &err);
	if (err < 0)
		goto fail;

	curl_easy_reset(h);
	curl_easy_setopt(h, CURLOPT_URL, url.s);
	curl_easy_setopt(h, CURLOPT_HTTPHEADER, list);
	curl_easy_setopt(h, CURLOPT_USERAGENT, "aiprof/" AIPROF_VERSION);
	curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
	curl_easy_setopt(h, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
	curl_easy_setopt(h, CURLOPT_PATH_AS_IS, 1L);
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
	curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS,
			 (long)(c->o.connect_timeout_ns / NSEC_PER_MSEC));
	if (prog.stall_ns || prog.deadline_ns) {
		curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
		curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, on_progress);
		curl_easy_setopt(h, CURLOPT_XFERINFODATA, &prog);
	}
	curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
	curl_easy_setopt(h, CURLOPT_UPLOAD_BUFFERSIZE, 512L * 1024);
	if (c->cfg->ca_bundle)
		curl_easy_setopt(h, CURLOPT_CAINFO, c->cfg->ca_bundle);
	curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, on_header);
	curl_easy_setopt(h, CURLOPT_HEADERDATA, out);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, out);
	if (strcmp(r->method, "PUT") == 0) {
		curl_easy_setopt(h, CURLOPT_UPLOAD, 1L);
		curl_easy_setopt(h, CURLOPT_READFUNCTION, on_read);
		curl_easy_setopt(h, CURLOPT_READDATA, &rd);
		curl_easy_setopt(h, CURLOPT_SEEKFUNCTION, on_seek);
		curl_easy_setopt(h, CURLOPT_SEEKDATA, &rd);
		curl_easy_setopt(h, CURLOPT_INFILESIZE_LARGE, (curl_off_t)r->len);
	} else if (strcmp(r->method, "POST") == 0) {
		curl_easy_setopt(h, CURLOPT_POST, 1L);
		curl_easy_setopt(h, CURLOPT_POSTFIELDS, r->body ? (const char *)r->body : "");
		curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)r->len);
	} else if (strcmp(r->method, "HEAD") == 0) {
		curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
	} else {
		curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, r->method);
	}

	rc = curl_easy_perform(h);
	curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
	/* Detach everything that points into this frame before it goes away. */
	curl_easy_setopt(h, CURLOPT_HTTPHEADER, NULL);
	curl_easy_setopt(h, CURLOPT_ERRORBUFFER, NULL);
	a->status = status;
	if (rc == CURLE_ABORTED_BY_CALLBACK && prog.overdue) {
		set_overdue(c, a);
	} else if (rc == CURLE_ABORTED_BY_CALLBACK && prog.stalled) {
		char d[32];

		a->net = S3_NET_TIMEOUT;
		snprintf(a->detail, sizeof(a->detail), "no data moved for %s",
			 format_duration(d, sizeof(d), c->o.stall_timeout_ns));
	} else if (rc != CURLE_OK && !(status >= 300 && out->body.len > 0)) {
		a->net = s3_net_of_curl(rc);
		snprintf(a->detail, sizeof(a->detail), "%s", errbuf[0] ? errbuf :
			 curl_easy_strerror(rc));
	} else {
		/* A final error response counts even if the connection then broke. */
		a->net = S3_NET_OK;
		if (out->body.len && (status >= 300 || s3xml_is_error(out->body.s, out->body.len))) {
			s3xml_text(out->body.s, out->body.len, "Code", a->code, sizeof(a->code));
			s3xml_text(out->body.s, out->body.len, "Message", a->detail,
				   sizeof(a->detail));
			if (status < 300 && !a->code[0])
				snprintf(a->code, sizeof(a->code), "InternalError");
		}
	}
fail:
	curl_slist_free_all(list);
	sigv4_result__clear(&sig);
	strbuf__release(&url);
	strbuf__release(&host);
	strbuf__release(&path);
	return err;
}

/* ---- requests with retries ---------------------------------------------------------- */

struct try_ctx {
	struct s3_client *c;
	CURL *h;
	const struct req *r;
	struct resp *resp;
	const atomic_bool *cancel;     /* stop early when another part failed; may be NULL */
	/* CompleteMultipartUpload: a retry that finds the upload gone checks the object */
	uint64_t expect_size;
	const char *expect_sha256;
};

static int head_once(struct s3_client *c, CURL *h, const char *bucket, const char *key,
		     struct resp *resp, struct s3_attempt *a);

static int try_request(void *ctx, struct s3_attempt *a)
{
	struct try_ctx *t = ctx;
	int r;

	if (t->cancel && atomic_load(t->cancel))
		return -ECANCELED;
	/* past the object's deadline: no (further) try */
	if (overdue(t->c)) {
		set_overdue(t->c, a);
		return -ETIMEDOUT;
	}
	r = request_once(t->c, t->h, t->r, t->resp, a);
	if (r == 0 && a->net != S3_NET_OK && overdue(t->c)) {
		set_overdue(t->c, a);
		return -ETIMEDOUT;
	}
	if (r == 0 && t->expect_sha256 && a->status == 404 &&
	    strcmp(a->code, "NoSuchUpload") == 0) {
		/* An earlier try (ours, or libcurl resending on a fresh connection) completed
		 * the upload but its answer was lost: the object is there if it has our size and
		 * SHA-256. */
		struct s3_attempt ha = { 0 };
		struct resp hr = { .body = STRBUF_INIT };

		if (head_once(t->c, t->h, t->r->bucket, t->r->key, &hr, &ha) == 0 &&
		    ha.net == S3_NET_OK && ha.status == 200 && hr.have_length &&
		    hr.content_length == t->expect_size &&
		    strcmp(hr.meta_sha256, t->expect_sha256) == 0) {
			memset(a, 0, sizeof(*a));
			a->status = 200;
		}
		strbuf__release(&hr.body);
	}
	return r;
}

static void set_op(struct s3_error *e, const char *verb, const char *bucket, const char *key,
		   const char *extra)
{
	snprintf(e->op, sizeof(e->op), "%s s3://%s/%s%s", verb, bucket, key, extra ? extra : "");
	snprintf(e->bucket, sizeof(e->bucket), "%s", bucket);
}

static const char *content_type_of(const struct s3_object_meta *m)
{
	return m && m->content_type ? m->content_type : "application/octet-stream";
}

/* The body's hashes: SHA-256 hex for the signature, and the checksum header. */
struct body_sums {
	char sha256_hex[SHA256_HEX_LEN + 1];
	char md5_b64[25];
	char sha256_b64[45];
};

static void body_sums(const struct s3_client *c, const void *buf, size_t len,
		      struct body_sums *s)
{
	uint8_t d[SHA256_LEN], m[MD5_LEN];

	sha256(buf, len, d);
	hex_encode(d, sizeof(d), s->sha256_hex);
	base64_encode(d, sizeof(d), s->sha256_b64);
	s->md5_b64[0] = '\0';
	if (c->o.checksum == S3_CHECKSUM_MD5) {
		md5(buf, len, m);
		base64_encode(m, sizeof(m), s->md5_b64);
	}
}

static void set_checksum(const struct s3_client *c, struct req *r, const struct body_sums *s)
{
	if (c->o.checksum == S3_CHECKSUM_MD5)
		r->md5_b64 = s->md5_b64;
	else
		r->checksum_b64 = s->sha256_b64;
}

static int put_buffer(struct s3_client *c, CURL *h, const char *bucket, const char *key,
		      const void *buf, size_t len, const struct s3_object_meta *m,
		      struct s3_error *err, unsigned *retries)
{
	struct sigv4_kv meta[1];
	struct body_sums sums;
	struct resp resp = { .body = STRBUF_INIT };
	struct req r = {
		.method = "PUT", .bucket = bucket, .key = key, .body = buf, .len = len,
		.content_type = content_type_of(m), .extra = meta,
	};
	struct try_ctx t = { .c = c, .h = h, .r = &r, .resp = &resp };
	int ret;

	body_sums(c, buf, len, &sums);
	r.sha256_hex = sums.sha256_hex;
	set_checksum(c, &r, &sums);
	if (m && m->sha256_hex)
		meta[r.n_extra++] = (struct sigv4_kv){ "x-amz-meta-sha256", m->sha256_hex };
	ret = s3_retry_run(&c->o.retry, &c->h, try_request, &t, err);
	if (retries && err->attempts > 1)
		*retries += err->attempts - 1;
	strbuf__release(&resp.body);
	return ret;
}

int s3_client__put_buffer(struct s3_client *c, const char *bucket, const char *key,
			  const void *buf, size_t len, const struct s3_object_meta *m,
			  struct s3_error *err)
{
	set_op(err, "PUT", bucket, key, NULL);
	begin_object(c);
	return put_buffer(c, c->curl, bucket, key, buf, len, m, err, NULL);
}

int s3_client__get_buffer(struct s3_client *c, const char *bucket, const char *key, size_t max,
			  char **ret, size_t *ret_len, struct s3_error *err)
{
	struct resp resp = { .body = STRBUF_INIT, .body_max = max + 1 };
	struct req r = {
		.method = "GET", .bucket = bucket, .key = key, .sha256_hex = SIGV4_EMPTY_SHA256,
	};
	struct try_ctx t = { .c = c, .h = c->curl, .r = &r, .resp = &resp };
	int rc;

	set_op(err, "GET", bucket, key, NULL);
	begin_object(c);
	rc = s3_retry_run(&c->o.retry, &c->h, try_request, &t, err);
	if (rc == 0 && (resp.truncated || resp.body.len > max))
		rc = -EFBIG;
	if (rc == 0 && strbuf_err(&resp.body))
		rc = -ENOMEM;
	if (rc == 0) {
		*ret_len = resp.body.len;
		*ret = resp.body.len ? strbuf__steal(&resp.body) : strdup("");
		if (!*ret)
			rc = -ENOMEM;
	}
	strbuf__release(&resp.body);
	return rc;
}

static int head_once(struct s3_client *c, CURL *h, const char *bucket, const char *key,
		     struct resp *resp, struct s3_attempt *a)
{
	struct req r = {
		.method = "HEAD", .bucket = bucket, .key = key, .sha256_hex = SIGV4_EMPTY_SHA256,
	};

	return request_once(c, h, &r, resp, a);
}

int s3_client__head(struct s3_client *c, const char *bucket, const char *key,
		    struct s3_object_info *ret, struct s3_error *err)
{
	struct resp resp = { .body = STRBUF_INIT };
	struct req r = {
		.method = "HEAD", .bucket = bucket, .key = key, .sha256_hex = SIGV4_EMPTY_SHA256,
	};
	struct try_ctx t = { .c = c, .h = c->curl, .r = &r, .resp = &resp };
	int rc;

	set_op(err, "HEAD", bucket, key, NULL);
	begin_object(c);
	rc = s3_retry_run(&c->o.retry, &c->h, try_request, &t, err);
	if (rc == 0) {
		ret->size = resp.content_length;
		snprintf(ret->sha256_hex, sizeof(ret->sha256_hex), "%s", resp.meta_sha256);
	}
	strbuf__release(&resp.body);
	return rc;
}

/* Reads exactly len bytes at off; -ESTALE if the file is shorter than that now. */
static int pread_full(int fd, void *buf, size_t len, uint64_t off)
{
	size_t got = 0;

	while (got < len) {
		ssize_t n = pread(fd, (char *)buf + got, len - got, (off_t)(off + got));

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (n == 0)
			return -ESTALE;
		got += (size_t)n;
	}
	return 0;
}

static int check_size(int fd, uint64_t size)
{
	struct stat st;

	if (fstat(fd, &st) < 0)
		return -errno;
	return (uint64_t)st.st_size == size ? 0 : -ESTALE;
}

/* ---- multipart ---------------------------------------------------------------------- */

struct mp {
	struct s3_client *c;
	const char *bucket, *key;
	char upload_id[1024];
	int fd;
	uint64_t size, part_size;
	unsigned nparts;
	atomic_uint next;
	atomic_bool failed;
	atomic_uint retries;
	pthread_mutex_t lock;
	int err;                 /* the first failure */
	struct s3_error e;
	char (*etags)[130];
	char (*sums)[45];
};

static void mp_fail(struct mp *m, int err, const struct s3_error *e)
{
	pthread_mutex_lock(&m->lock);
	if (!m->err && err != -ECANCELED) {
		m->err = err;
		if (e)
			m->e = *e;
	}
	atomic_store(&m->failed, true);
	pthread_mutex_unlock(&m->lock);
}

static void *part_worker(void *arg)
{
	struct mp *m = arg;
	struct s3_client *c = m->c;
	CURL *h = curl_easy_init();
	uint8_t *buf = malloc(m->part_size);
	struct resp resp = { .body = STRBUF_INIT };

	if (!h || !buf) {
		struct s3_error e = { .local_err = -ENOMEM };

		set_op(&e, "PUT", m->bucket, m->key, " (a part buffer)");
		mp_fail(m, -ENOMEM, &e);
		goto out;
	}
	for (;;) {
		unsigned i = atomic_fetch_add(&m->next, 1);
		uint64_t off = (uint64_t)i * m->part_size;
		size_t len;
		char pn[16], extra[48];
		struct sigv4_kv q[2];
		struct body_sums sums;
		struct s3_error e = { 0 };
		struct req r = { .method = "PUT", .bucket = m->bucket, .key = m->key };
		struct try_ctx t = { .c = c, .h = h, .r = &r, .resp = &resp, .cancel = &m->failed };
		int rc;

		if (i >= m->nparts || atomic_load(&m->failed))
			break;
		len = (size_t)(m->size - off < m->part_size ? m->size - off : m->part_size);
		snprintf(extra, sizeof(extra), " (part %u of %u)", i + 1, m->nparts);
		set_op(&e, "PUT", m->bucket, m->key, extra);
		rc = pread_full(m->fd, buf, len, off);
		if (rc < 0) {
			e.local_err = rc;
			mp_fail(m, rc, &e);
			break;
		}
		body_sums(c, buf, len, &sums);
		snprintf(pn, sizeof(pn), "%u", i + 1);
		q[0] = (struct sigv4_kv){ "partNumber", pn };
		q[1] = (struct sigv4_kv){ "uploadId", m->upload_id };
		r.query = q;
		r.n_query = 2;
		r.body = buf;
		r.len = len;
		r.sha256_hex = sums.sha256_hex;
		set_checksum(c, &r, &sums);
		rc = s3_retry_run(&c->o.retry, &c->h, try_request, &t, &e);
		if (e.attempts > 1)
			atomic_fetch_add(&m->retries, e.attempts - 1);
		if (rc == 0 && !resp.etag[0]) {
			rc = -EPROTO;
			snprintf(e.last.detail, sizeof(e.last.detail), "no ETag in the answer");
			e.last.code[0] = '\0';
		}
		if (rc < 0) {
			mp_fail(m, rc, &e);
			break;
		}
		memcpy(m->etags[i], resp.etag, sizeof(resp.etag));
		memcpy(m->sums[i], sums.sha256_b64, sizeof(sums.sha256_b64));
	}
out:
	strbuf__release(&resp.body);
	free(buf);
	if (h)
		curl_easy_cleanup(h);
	return NULL;
}

static int mp_create(struct mp *m, const struct s3_object_meta *meta, struct s3_error *err)
{
	struct s3_client *c = m->c;
	struct sigv4_kv q[1] = { { "uploads", NULL } }, extra[2];
	struct resp resp = { .body = STRBUF_INIT };
	struct req r = {
		.method = "POST", .bucket = m->bucket, .key = m->key, .query = q, .n_query = 1,
		.sha256_hex = SIGV4_EMPTY_SHA256, .content_type = content_type_of(meta),
		.extra = extra,
	};
	struct try_ctx t = { .c = c, .h = c->curl, .r = &r, .resp = &resp };
	int rc;

	if (meta && meta->sha256_hex)
		extra[r.n_extra++] = (struct sigv4_kv){ "x-amz-meta-sha256", meta->sha256_hex };
	if (c->o.checksum == S3_CHECKSUM_SHA256)
		extra[r.n_extra++] = (struct sigv4_kv){ "x-amz-checksum-algorithm", "SHA256" };
	set_op(err, "POST", m->bucket, m->key, " (create multipart upload)");
	rc = s3_retry_run(&c->o.retry, &c->h, try_request, &t, err);
	if (err->attempts > 1)
		atomic_fetch_add(&m->retries, err->attempts - 1);
	if (rc == 0 && s3xml_text(resp.body.s, resp.body.len, "UploadId", m->upload_id,
				  sizeof(m->upload_id)) < 0) {
		rc = -EPROTO;
		snprintf(err->last.detail, sizeof(err->last.detail), "no UploadId in the answer");
	}
	if (rc == 0 && !m->upload_id[0])
		rc = -EPROTO;
	strbuf__release(&resp.body);
	return rc;
}

static int mp_complete(struct mp *m, const char *sha256_hex, struct s3_error *err)
{
	struct s3_client *c = m->c;
	struct strbuf x = STRBUF_INIT;
	struct sigv4_kv q[1] = { { "uploadId", m->upload_id } };
	struct resp resp = { .body = STRBUF_INIT };
	struct body_sums sums;
	struct req r = {
		.method = "POST", .bucket = m->bucket, .key = m->key, .query = q, .n_query = 1,
		.content_type = "application/xml",
	};
	struct try_ctx t = {
		.c = c, .h = c->curl, .r = &r, .resp = &resp, .expect_size = m->size,
		.expect_sha256 = sha256_hex,
	};
	int rc;

	strbuf_adds(&x, "<CompleteMultipartUpload xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">");
	for (unsigned i = 0; i < m->nparts; i++) {
		strbuf_addf(&x, "<Part><PartNumber>%u</PartNumber><ETag>", i + 1);
		strbuf_add_xml(&x, m->etags[i]);
		strbuf_adds(&x, "</ETag>");
		if (c->o.checksum == S3_CHECKSUM_SHA256)
			strbuf_addf(&x, "<ChecksumSHA256>%s</ChecksumSHA256>", m->sums[i]);
		strbuf_adds(&x, "</Part>");
	}
	strbuf_adds(&x, "</CompleteMultipartUpload>");
	if (strbuf_err(&x)) {
		err->local_err = -ENOMEM;
		return -ENOMEM;
	}
	body_sums(c, x.s, x.len, &sums);
	r.body = (const uint8_t *)x.s;
	r.len = x.len;
	r.sha256_hex = sums.sha256_hex;
	r.md5_b64 = c->o.checksum == S3_CHECKSUM_MD5 ? sums.md5_b64 : NULL;
	set_op(err, "POST", m->bucket, m->key, " (complete multipart upload)");
	rc = s3_retry_run(&c->o.retry, &c->h, try_request, &t, err);
	if (err->attempts > 1)
		atomic_fetch_add(&m->retries, err->attempts - 1);
	strbuf__release(&resp.body);
	strbuf__release(&x);
	return rc;
}

/* Best effort: parts of an abandoned upload cost storage until a lifecycle rule runs. */
static void mp_abort(struct mp *m)
{
	struct s3_client *c = m->c;
	struct sigv4_kv q[1] = { { "uploadId", m->upload_id } };
	struct resp resp = { .body = STRBUF_INIT };
	struct req r = {
		.method = "DELETE", .bucket = m->bucket, .key = m->key, .query = q, .n_query = 1,
		.sha256_hex = SIGV4_EMPTY_SHA256,
	};
	struct try_ctx t = { .c = c, .h = c->curl, .r = &r, .resp = &resp };
	struct s3_retry_policy p = c->o.retry;
	struct s3_hooks quiet = c->h;
	struct s3_error e = { 0 };

	if (p.max_attempts > 3)
		p.max_attempts = 3;
	quiet.notify = NULL;
	set_op(&e, "DELETE", m->bucket, m->key, " (abort multipart upload)");
	begin_object(c);          /* a bound of its own, also after the upload's ran out */
	s3_retry_run(&p, &quiet, try_request, &t, &e);
	strbuf__release(&resp.body);
}

static int put_multipart(struct s3_client *c, const char *bucket, const char *key, int fd,
			 uint64_t size, const struct s3_object_meta *meta,
			 struct s3_put_stats *stats, struct s3_error *err)
{
	struct mp m = { .c = c, .bucket = bucket, .key = key, .fd = fd, .size = size };
	pthread_t tid[64];
	unsigned nthreads, started = 0;
	uint64_t part = c->o.part_size, min_part = (size + S3_MAX_PARTS - 1) / S3_MAX_PARTS;
	int rc;

	if (part < min_part)
		part = (min_part + (1 << 20) - 1) & ~(uint64_t)((1 << 20) - 1);
	if (part > S3_MAX_PART_SIZE) {
		set_op(err, "PUT", bucket, key, NULL);
		err->local_err = -EFBIG;
		return -EFBIG;
	}
	m.part_size = part;
	m.nparts = (unsigned)((size + part - 1) / part);
	m.etags = calloc(m.nparts, sizeof(*m.etags));
	m.sums = calloc(m.nparts, sizeof(*m.sums));
	if (!m.etags || !m.sums) {
		free(m.etags);
		free(m.sums);
		set_op(err, "PUT", bucket, key, NULL);
		err->local_err = -ENOMEM;
		return -ENOMEM;
	}
	pthread_mutex_init(&m.lock, NULL);
	atomic_init(&m.next, 0);
	atomic_init(&m.failed, false);
	atomic_init(&m.retries, 0);

	rc = mp_create(&m, meta, err);
	if (rc < 0)
		goto out;

	nthreads = c->o.parallel < m.nparts ? c->o.parallel : m.nparts;
	for (unsigned i = 0; i < nthreads; i++) {
		if (pthread_create(&tid[i], NULL, part_worker, &m) != 0)
			break;
		started++;
	}
	if (!started)
		part_worker(&m);
	for (unsigned i = 0; i < started; i++)
		pthread_join(tid[i], NULL);

	if (m.err) {
		rc = m.err;
		*err = m.e;
	} else if ((rc = check_size(fd, size)) < 0) {
		set_op(err, "PUT", bucket, key, NULL);
		err->local_err = rc;
	} else {
		rc = mp_complete(&m, meta ? meta->sha256_hex : NULL, err);
	}
	if (rc < 0)
		mp_abort(&m);
out:
	if (stats) {
		stats->parts = m.nparts;
		stats->retries += atomic_load(&m.retries);
	}
	pthread_mutex_destroy(&m.lock);
	free(m.etags);
	free(m.sums);
	return rc;
}

int s3_client__put_file(struct s3_client *c, const char *bucket, const char *key, int fd,
			uint64_t size, const struct s3_object_meta *m, struct s3_put_stats *stats,
			struct s3_error *err)
{
	uint8_t *buf;
	unsigned retries = 0;
	int rc;

	memset(err, 0, sizeof(*err));
	if (stats)
		memset(stats, 0, sizeof(*stats));
	begin_object(c);
	if (size >= c->o.multipart_threshold && size > 0)
		return put_multipart(c, bucket, key, fd, size, m, stats, err);

	set_op(err, "PUT", bucket, key, NULL);
	buf = malloc(size ? (size_t)size : 1);
	if (!buf) {
		err->local_err = -ENOMEM;
		return -ENOMEM;
	}
	rc = pread_full(fd, buf, (size_t)size, 0);
	if (rc == 0)
		rc = check_size(fd, size);
	if (rc < 0) {
		err->local_err = rc;
		free(buf);
		return rc;
	}
	rc = put_buffer(c, c->curl, bucket, key, buf, (size_t)size, m, err, &retries);
	if (stats)
		stats->retries = retries;
	free(buf);
	return rc;
}
