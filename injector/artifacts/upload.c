/* SPDX-License-Identifier: MIT */
/* aiprof upload: an artifact folder to S3, manifest last, nothing lost on failure. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "digest.h"
#include "jsonw.h"
#include "log.h"
#include "s3.h"
#include "s3url.h"
#include "storeput.h"
#include "strbuf.h"
#include "timeutil.h"
#include "termlog.h"
#include "upload.h"

#define MANIFEST "manifest.json"
#define MANIFEST_TMP ".manifest.json.tmp"
#define MAX_DEPTH 16
#define MAX_FILES 100000

void upload_opts__init(struct upload_opts *o)
{
	memset(o, 0, sizeof(*o));
	s3_client_opts__defaults(&o->client);
}

const char upload_options_help[] =
	"  --endpoint-url URL       S3 endpoint (default: AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL,\n"
	"                           else https://s3.REGION.amazonaws.com)\n"
	"  --region NAME            signing region (default: AWS_REGION, AWS_DEFAULT_REGION,\n"
	"                           else us-east-1)\n"
	"  --secret-dir DIR         read credentials from files in DIR (a mounted Secret):\n"
	"                           AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY [, AWS_SESSION_TOKEN]\n"
	"                           (default: AIPROF_S3_SECRET_DIR, else the AWS_* variables)\n"
	"  --ca-bundle FILE         CA certificates for https (default: AWS_CA_BUNDLE, else the\n"
	"                           system's)\n"
	"  --path-style             https://endpoint/bucket/key (default for non-AWS endpoints)\n"
	"  --virtual-hosted         https://bucket.endpoint/key (default on AWS); or set\n"
	"                           AIPROF_S3_ADDRESSING=path|virtual|auto\n"
	"  --part-size SIZE         multipart part size (default 16M; at least 5M)\n"
	"  --multipart-threshold SIZE  files this large go multipart (default 16M)\n"
	"  --parallel N             parts in flight at once (default 4)\n"
	"  --max-attempts N         tries per request (default 6)\n"
	"  --stall-timeout DURATION retry a request that moves no byte for this long (30s)\n"
	"  --connect-timeout DURATION  (default 10s)\n"
	"  --object-timeout DURATION  give up an object (all its parts and tries) not uploaded\n"
	"                           in this long, however slowly bytes still move (15m)\n"
	"  --checksum md5|sha256    Content-MD5 (default) or x-amz-checksum-sha256 on every body\n"
	"  --delete-after           remove the local files once manifest.json is uploaded\n"
	"  --force                  upload every file, even one already there with the same\n"
	"                           size and SHA-256\n";

/* "16M", "16MiB", "512k", "1G", "8388608" -> bytes. */
static int parse_size(const char *s, uint64_t *ret)
{
	static const struct { const char *suffix; uint64_t mult; } units[] = {
		{ "", 1 }, { "B", 1 }, { "k", 1ULL << 10 }, { "K", 1ULL << 10 },
		{ "KiB", 1ULL << 10 }, { "M", 1ULL << 20 }, { "MiB", 1ULL << 20 },
		{ "G", 1ULL << 30 }, { "GiB", 1ULL << 30 },
	};
	char *end;
	unsigned long long v;

	if (!s || *s < '0' || *s > '9')
		return -EINVAL;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno)
		return -EINVAL;
	for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++)
		if (strcmp(end, units[i].suffix) == 0) {
			if (v > UINT64_MAX / units[i].mult)
				return -ERANGE;
			*ret = v * units[i].mult;
			return 0;
		}
	return -EINVAL;
}

static int parse_uint(const char *s, unsigned min, unsigned max, unsigned *ret)
{
	char *end;
	unsigned long v;

	if (!s || *s < '0' || *s > '9')
		return -EINVAL;
	errno = 0;
	v = strtoul(s, &end, 10);
	if (errno || *end || v < min || v > max)
		return -EINVAL;
	*ret = (unsigned)v;
	return 0;
}

int upload_opts__parse_option(struct upload_opts *o, int opt, const char *arg, char *msg,
			      size_t msglen)
{
	uint64_t v;

	switch (opt) {
	case UPLOAD_OPT_ENDPOINT:
		o->s3.endpoint_url = arg;
		return 0;
	case UPLOAD_OPT_REGION:
		o->s3.region = arg;
		return 0;
	case UPLOAD_OPT_SECRET_DIR:
		o->s3.secret_dir = arg;
		return 0;
	case UPLOAD_OPT_CA_BUNDLE:
		o->s3.ca_bundle = arg;
		return 0;
	case UPLOAD_OPT_PATH_STYLE:
		o->s3.addressing = S3_ADDRESSING_PATH;
		return 0;
	case UPLOAD_OPT_VIRTUAL_HOSTED:
		o->s3.addressing = S3_ADDRESSING_VIRTUAL;
		return 0;
	case UPLOAD_OPT_PART_SIZE:
		if (parse_size(arg, &v) < 0 || v < S3_MIN_PART_SIZE || v > S3_MAX_PART_SIZE) {
			snprintf(msg, msglen, "--part-size %s: give a size from 5M to 5G", arg);
			return -EINVAL;
		}
		o->client.part_size = v;
		return 0;
	case UPLOAD_OPT_THRESHOLD:
		if (parse_size(arg, &v) < 0 || v < 1 || v > S3_MAX_PART_SIZE) {
			snprintf(msg, msglen, "--multipart-threshold %s: give a size up to 5G, such as "
				 "64M", arg);
			return -EINVAL;
		}
		o->client.multipart_threshold = v;
		return 0;
	case UPLOAD_OPT_PARALLEL:
		if (parse_uint(arg, 1, 64, &o->client.parallel) < 0) {
			snprintf(msg, msglen, "--parallel %s: give a number from 1 to 64", arg);
			return -EINVAL;
		}
		return 0;
	case UPLOAD_OPT_MAX_ATTEMPTS:
		if (parse_uint(arg, 1, 100, &o->client.retry.max_attempts) < 0) {
			snprintf(msg, msglen, "--max-attempts %s: give a number from 1 to 100", arg);
			return -EINVAL;
		}
		return 0;
	case UPLOAD_OPT_STALL_TIMEOUT:
	case UPLOAD_OPT_CONNECT_TIMEOUT:
	case UPLOAD_OPT_OBJECT_TIMEOUT:
		if (parse_duration_ns(arg, &v) < 0 || v < NSEC_PER_SEC) {
			snprintf(msg, msglen, "--%s %s: give a duration of at least 1s, such as 30s",
				 opt == UPLOAD_OPT_STALL_TIMEOUT ? "stall-timeout" :
				 opt == UPLOAD_OPT_OBJECT_TIMEOUT ? "object-timeout" : "connect-timeout",
				 arg);
			return -EINVAL;
		}
		if (opt == UPLOAD_OPT_STALL_TIMEOUT)
			o->client.stall_timeout_ns = v;
		else if (opt == UPLOAD_OPT_OBJECT_TIMEOUT)
			o->client.object_timeout_ns = v;
		else
			o->client.connect_timeout_ns = v;
		return 0;
	case UPLOAD_OPT_CHECKSUM:
		if (strcmp(arg, "md5") == 0) {
			o->client.checksum = S3_CHECKSUM_MD5;
		} else if (strcmp(arg, "sha256") == 0) {
			o->client.checksum = S3_CHECKSUM_SHA256;
		} else {
			snprintf(msg, msglen, "--checksum %s: use md5 or sha256", arg);
			return -EINVAL;
		}
		return 0;
	case UPLOAD_OPT_DELETE_AFTER:
		o->delete_after = true;
		return 0;
	case UPLOAD_OPT_FORCE:
		o->skip_existing = false;
		return 0;
	default:
		return -ENOENT;
	}
}

/* ---- the folder ---------------------------------------------------------------------- */

struct artifact {
	char *rel;                 /* path under dir, '/'-separated */
	char *key;                 /* object key */
	uint64_t size;
	struct timespec mtime;
	char sha256[SHA256_HEX_LEN + 1];
};

struct artifacts {
	struct artifact *v;
	size_t n, cap;
};

static void artifacts__clear(struct artifacts *a)
{
	for (size_t i = 0; i < a->n; i++) {
		free(a->v[i].rel);
		free(a->v[i].key);
	}
	free(a->v);
	memset(a, 0, sizeof(*a));
}

static int cmp_artifact(const void *x, const void *y)
{
	return strcmp(((const struct artifact *)x)->rel, ((const struct artifact *)y)->rel);
}

/* Collects the regular files under dir/rel into *a. Symbolic links and special files are
 * skipped (said at debug level); so are names starting with '.' and dir/manifest.json. */
static int scan(const char *dir, const char *rel, int depth, struct artifacts *a)
{
	char path[PATH_MAX];
	DIR *d = NULL;
	struct dirent *de;
	int err = 0;

	if (depth > MAX_DEPTH)
		return -ELOOP;
	if ((size_t)snprintf(path, sizeof(path), "%s%s%s", dir, rel[0] ? "/" : "", rel) >=
	    sizeof(path))
		return -ENAMETOOLONG;
	d = opendir(path);
	if (!d)
		return -errno;
	while ((errno = 0, de = readdir(d))) {
		char sub[PATH_MAX], full[PATH_MAX];
		struct stat st;

		if (de->d_name[0] == '.')
			continue;
		if (!rel[0] && strcmp(de->d_name, MANIFEST) == 0)
			continue;
		if ((size_t)snprintf(sub, sizeof(sub), "%s%s%s", rel, rel[0] ? "/" : "",
				     de->d_name) >= sizeof(sub) ||
		    (size_t)snprintf(full, sizeof(full), "%s/%s", dir, sub) >= sizeof(full)) {
			err = -ENAMETOOLONG;
			goto out;
		}
		if (lstat(full, &st) < 0) {
			err = -errno;
			goto out;
		}
		if (S_ISDIR(st.st_mode)) {
			err = scan(dir, sub, depth + 1, a);
			if (err < 0)
				goto out;
		} else if (S_ISREG(st.st_mode)) {
			struct artifact *f;

			if (a->n >= MAX_FILES) {
				err = -EMFILE;
				goto out;
			}
			if (a->n == a->cap) {
				size_t cap = a->cap ? a->cap * 2 : 16;
				struct artifact *v = realloc(a->v, cap * sizeof(*v));

				if (!v) {
					err = -ENOMEM;
					goto out;
				}
				a->v = v;
				a->cap = cap;
			}
			f = &a->v[a->n];
			memset(f, 0, sizeof(*f));
			f->rel = strdup(sub);
			if (!f->rel) {
				err = -ENOMEM;
				goto out;
			}
			a->n++;
		} else {
			log_debug("not uploading %s: not a regular file", full);
		}
	}
	if (errno)
		err = -errno;
out:
	closedir(d);
	return err;
}

static const char *content_type_for(const char *name)
{
	static const struct { const char *ext, *type; } types[] = {
		{ ".json", "application/json" }, { ".gz", "application/gzip" },
		{ ".svg", "image/svg+xml" }, { ".html", "text/html; charset=utf-8" },
		{ ".folded", "text/plain; charset=utf-8" }, { ".txt", "text/plain; charset=utf-8" },
		{ ".log", "text/plain; charset=utf-8" },
	};
	size_t n = strlen(name);

	for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
		size_t m = strlen(types[i].ext);

		if (n > m && strcmp(name + n - m, types[i].ext) == 0)
			return types[i].type;
	}
	return "application/octet-stream";
}

static int open_artifact(const char *dir, const struct artifact *f, int *ret_fd)
{
	char path[PATH_MAX];
	int fd;

	if ((size_t)snprintf(path, sizeof(path), "%s/%s", dir, f->rel) >= sizeof(path))
		return -ENAMETOOLONG;
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY);
	if (fd < 0)
		return -errno;
	*ret_fd = fd;
	return 0;
}

static int hash_artifact(const char *dir, struct artifact *f)
{
	uint8_t d[SHA256_LEN];
	struct stat st;
	int fd = -1, err;

	err = open_artifact(dir, f, &fd);
	if (err < 0)
		return err;
	if (fstat(fd, &st) < 0) {
		err = -errno;
		goto out;
	}
	err = sha256_fd(fd, d, &f->size);
	if (err < 0)
		goto out;
	if ((uint64_t)st.st_size != f->size) {
		err = -ESTALE;
		goto out;
	}
	f->mtime = st.st_mtim;
	hex_encode(d, sizeof(d), f->sha256);
out:
	close(fd);
	return err;
}

static int sink_strbuf(void *ctx, const char *buf, size_t len)
{
	struct strbuf *b = ctx;

	strbuf_add(b, buf, len);
	return strbuf_err(b);
}

/* location ends in '/'; an artifact's URL is location + its name */
static int build_manifest(const char *location, const struct artifacts *a, struct strbuf *out)
{
	struct jsonw *w = jsonw__new(sink_strbuf, out);
	char created[32];
	time_t now = time(NULL);
	struct tm tm;
	uint64_t total = 0;
	int err;

	if (!w)
		return -ENOMEM;
	gmtime_r(&now, &tm);
	strftime(created, sizeof(created), "%Y-%m-%dT%H:%M:%SZ", &tm);
	jsonw_obj_open(w);
	jsonw_kv_str(w, "schema", "aiprof.manifest/v1");
	jsonw_kv_str(w, "created", created);
	jsonw_kv_str(w, "location", location);
	jsonw_key(w, "artifacts");
	jsonw_arr_open(w);
	for (size_t i = 0; i < a->n; i++) {
		const struct artifact *f = &a->v[i];
		struct strbuf url = STRBUF_INIT;

		strbuf_addf(&url, "%s%s", location, f->rel);
		jsonw_newline(w);
		jsonw_obj_open(w);
		jsonw_kv_str(w, "name", f->rel);
		jsonw_kv_str(w, "key", f->key);
		jsonw_kv_str(w, "url", url.s ? url.s : "");
		jsonw_kv_uint(w, "size", f->size);
		jsonw_kv_str(w, "sha256", f->sha256);
		jsonw_kv_str(w, "content_type", content_type_for(f->rel));
		jsonw_obj_close(w);
		strbuf__release(&url);
		total += f->size;
	}
	jsonw_arr_close(w);
	jsonw_kv_uint(w, "total_bytes", total);
	jsonw_obj_close(w);
	err = jsonw__finish(w);
	if (!err)
		strbuf_addc(out, '\n');
	return err ? err : strbuf_err(out);
}

/* Writes dir/manifest.json by rename, so a reader never sees half of one. */
static int write_manifest(const char *dir, const struct strbuf *m)
{
	char tmp[PATH_MAX], path[PATH_MAX];
	size_t off = 0;
	int fd, err = 0;

	if ((size_t)snprintf(tmp, sizeof(tmp), "%s/" MANIFEST_TMP, dir) >= sizeof(tmp) ||
	    (size_t)snprintf(path, sizeof(path), "%s/" MANIFEST, dir) >= sizeof(path))
		return -ENAMETOOLONG;
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0644);
	if (fd < 0)
		return -errno;
	while (off < m->len) {
		ssize_t n = write(fd, m->s + off, m->len - off);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			err = -errno;
			break;
		}
		off += (size_t)n;
	}
	if (!err && fsync(fd) < 0)
		err = -errno;
	if (close(fd) < 0 && !err)
		err = -errno;
	if (!err && rename(tmp, path) < 0)
		err = -errno;
	if (err)
		unlink(tmp);
	return err;
}

/* Removes the uploaded files, then folders that became empty, then dir if it is empty. */
static void delete_local(const char *dir, const struct artifacts *a)
{
	char path[PATH_MAX];

	for (size_t i = 0; i < a->n; i++) {
		if ((size_t)snprintf(path, sizeof(path), "%s/%s", dir, a->v[i].rel) < sizeof(path))
			unlink(path);
	}
	if ((size_t)snprintf(path, sizeof(path), "%s/" MANIFEST, dir) < sizeof(path))
		unlink(path);
	/* sub-folders, deepest first: the sorted list has parents before children */
	for (size_t i = a->n; i-- > 0;) {
		char rel[PATH_MAX], *slash;

		snprintf(rel, sizeof(rel), "%s", a->v[i].rel);
		while ((slash = strrchr(rel, '/'))) {
			*slash = '\0';
			if ((size_t)snprintf(path, sizeof(path), "%s/%s", dir, rel) < sizeof(path))
				rmdir(path);
		}
	}
	rmdir(dir);
}

/* dir as one shell word, for the resume command. */
static void shell_quote(const char *s, char *out, size_t len)
{
	struct strbuf b = STRBUF_INIT;
	bool plain = *s != '\0';

	for (const char *p = s; *p; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
		      (*p >= '0' && *p <= '9') || strchr("_./:@%+=,-", *p)))
			plain = false;
	if (plain) {
		snprintf(out, len, "%s", s);
		return;
	}
	strbuf_addc(&b, '\'');
	for (const char *p = s; *p; p++) {
		if (*p == '\'')
			strbuf_adds(&b, "'\\''");
		else
			strbuf_addc(&b, (unsigned char)*p < 0x20 ? '?' : *p);
	}
	strbuf_addc(&b, '\'');
	snprintf(out, len, "%s", b.s ? b.s : "''");
	strbuf__release(&b);
}

static void notify_log(void *ctx, const char *msg)
{
	(void)ctx;
	log_warning("%s", msg);
}

static const char *human_bytes(uint64_t n, char *buf, size_t len)
{
	if (n >= (1ULL << 30))
		snprintf(buf, len, "%.1f GiB", (double)n / (1ULL << 30));
	else if (n >= (1ULL << 20))
		snprintf(buf, len, "%.1f MiB", (double)n / (1ULL << 20));
	else if (n >= (1ULL << 10))
		snprintf(buf, len, "%.1f KiB", (double)n / (1ULL << 10));
	else
		snprintf(buf, len, "%" PRIu64 " B", n);
	return buf;
}

/* One upload under way: where to, what, and the first failure's text. */
struct upload_job {
	const char *dir;
	const struct upload_opts *o;
	bool store;                     /* -o http(s)://: the in-cluster store, else S3 */
	struct store_dest dest;
	char location[1200];            /* where they go, ending in '/' */
	struct s3_location loc;
	struct s3_config cfg;
	struct artifacts arts;
	struct strbuf manifest;
	char manifest_key[S3_KEY_MAX + 1], manifest_sha[SHA256_HEX_LEN + 1];
	struct s3_client *client;
	struct s3_hooks hooks;
	uint64_t total;                 /* bytes of the artifacts */
	unsigned sent, skipped;
	bool nothing_to_resume;         /* a failure that a retry of the same command won't fix */
	char what[1024];
};

/* The folder and the configuration, checked before anything is read or sent. */
static int check_job(struct upload_job *j)
{
	char cmsg[512] = "";
	struct stat st;
	int err;

	if (stat(j->dir, &st) < 0 || !S_ISDIR(st.st_mode)) {
		err = stat(j->dir, &st) < 0 ? -errno : -ENOTDIR;
		snprintf(j->what, sizeof(j->what), "artifact folder %s: %s", j->dir, strerror(-err));
		j->nothing_to_resume = true;
		return err;
	}
	if (j->store)
		return 0;
	err = s3_config__load(&j->cfg, &j->o->s3, cmsg, sizeof(cmsg));
	if (err < 0) {
		snprintf(j->what, sizeof(j->what), "S3 configuration: %s", cmsg);
		return err == -ENOENT ? -ENOKEY : err == -ENOMEM ? err : -EINVAL;
	}
	if (s3_config__addressing_for(&j->cfg, j->loc.bucket) == S3_ADDRESSING_VIRTUAL &&
	    (!s3_bucket_dns_compatible(j->loc.bucket) || (j->cfg.endpoint.host[0] != '[' &&
	     s3_host_is_literal(j->cfg.endpoint.host) &&
	     strcmp(j->cfg.endpoint.host, "localhost")))) {
		snprintf(j->what, sizeof(j->what), "virtual-hosted addressing needs a bucket name "
			 "that is a DNS label and an endpoint with a host name (bucket '%s', "
			 "endpoint %s): use --path-style", j->loc.bucket, j->cfg.endpoint.host);
		return -EINVAL;
	}
	return 0;
}

/* Every file's key and SHA-256, and manifest.json written into the folder. */
static int prepare_manifest(struct upload_job *j)
{
	const char *prefix = j->store ? "" : j->loc.prefix, *slash = prefix[0] ? "/" : "";
	uint8_t d[SHA256_LEN];
	int err;

	err = scan(j->dir, "", 0, &j->arts);
	if (err < 0) {
		snprintf(j->what, sizeof(j->what), "reading the artifact folder %s: %s", j->dir,
			 strerror(-err));
		return err;
	}
	if (j->arts.n == 0) {
		snprintf(j->what, sizeof(j->what), "the artifact folder %s has no files to upload",
			 j->dir);
		j->nothing_to_resume = true;
		return -ENODATA;
	}
	qsort(j->arts.v, j->arts.n, sizeof(*j->arts.v), cmp_artifact);
	for (size_t i = 0; i < j->arts.n; i++) {
		struct artifact *f = &j->arts.v[i];
		struct strbuf k = STRBUF_INIT;

		strbuf_addf(&k, "%s%s%s", prefix, slash, f->rel);
		f->key = strbuf__steal(&k);
		if (!f->key) {
			snprintf(j->what, sizeof(j->what), "out of memory");
			return -ENOMEM;
		}
		if (j->store && !store_name_ok(f->key)) {
			snprintf(j->what, sizeof(j->what), "%s is not a name the store takes (at "
				 "most %d of A-Z a-z 0-9 . _ - /)", f->rel, STORE_NAME_MAX);
			j->nothing_to_resume = true;
			return -EINVAL;
		}
		if (strlen(f->key) > S3_KEY_MAX) {
			snprintf(j->what, sizeof(j->what), "object key for %s is longer than %d bytes",
				 f->rel, S3_KEY_MAX);
			return -ENAMETOOLONG;
		}
		err = hash_artifact(j->dir, f);
		if (err < 0) {
			snprintf(j->what, sizeof(j->what), "reading %s/%s: %s", j->dir, f->rel,
				 err == -ESTALE ? "it changed while being read" : strerror(-err));
			return err;
		}
		j->total += f->size;
	}
	snprintf(j->manifest_key, sizeof(j->manifest_key), "%s%s" MANIFEST, prefix, slash);
	err = build_manifest(j->location, &j->arts, &j->manifest);
	if (err == 0)
		err = write_manifest(j->dir, &j->manifest);
	if (err < 0) {
		snprintf(j->what, sizeof(j->what), "writing %s/" MANIFEST ": %s", j->dir,
			 strerror(-err));
		return err;
	}
	sha256(j->manifest.s, j->manifest.len, d);
	hex_encode(d, sizeof(d), j->manifest_sha);
	return 0;
}

/* Is f already in the bucket with its SHA-256 (--skip-existing)? 1, 0, or a negative errno. */
static int already_there(struct upload_job *j, const struct artifact *f)
{
	struct s3_object_info info;
	struct s3_error e;
	int err;

	err = s3_client__head(j->client, j->loc.bucket, f->key, &info, &e);
	if (err == 0 && info.size == f->size && strcmp(info.sha256_hex, f->sha256) == 0)
		return 1;
	/* No read permission (403) or not there (404): send it. A transport failure would fail
	 * the PUT the same way, so stop here. */
	if (err < 0 && e.last.net != S3_NET_OK) {
		s3_error__describe(&e, &j->cfg, j->what, sizeof(j->what));
		return err;
	}
	return 0;
}

/* One file to the bucket, checked unchanged after it was sent. */
static int send_one(struct upload_job *j, const struct artifact *f)
{
	struct s3_object_meta meta = { content_type_for(f->rel), f->sha256 };
	struct s3_put_stats stats = { 0 };
	uint64_t t1 = now_monotonic_ns();
	struct s3_error e;
	struct stat st;
	char hb[32];
	int fd = -1, err;

	err = open_artifact(j->dir, f, &fd);
	if (err < 0) {
		snprintf(j->what, sizeof(j->what), "opening %s/%s: %s", j->dir, f->rel,
			 strerror(-err));
		return err;
	}
	if (j->store) {
		err = store_put(&j->dest, f->key, fd, NULL, f->size, f->sha256,
				&j->o->client.retry, &j->hooks, &e);
		if (err < 0)
			store_error__describe(&e, err, j->what, sizeof(j->what));
	} else {
		err = s3_client__put_file(j->client, j->loc.bucket, f->key, fd, f->size, &meta,
					  &stats, &e);
		if (err < 0)
			s3_error__describe(&e, &j->cfg, j->what, sizeof(j->what));
	}
	/* the manifest must describe what was sent */
	if (err == 0 && (fstat(fd, &st) < 0 || (uint64_t)st.st_size != f->size ||
		 st.st_mtim.tv_sec != f->mtime.tv_sec || st.st_mtim.tv_nsec != f->mtime.tv_nsec)) {
		err = -ESTALE;
		snprintf(j->what, sizeof(j->what), "%s/%s changed during the upload", j->dir, f->rel);
	}
	close(fd);
	if (err < 0)
		return err;
	if (!j->o->quiet) {
		double s = (double)(now_monotonic_ns() - t1) / 1e9;
		char extra[64] = "";

		if (stats.parts || stats.retries)
			snprintf(extra, sizeof(extra), " [%u parts, %u retries]", stats.parts,
				 stats.retries);
		log_info("  %s: %s in %.2fs (%.1f MiB/s)%s", f->rel,
			 human_bytes(f->size, hb, sizeof(hb)), s,
			 s > 0 ? (double)f->size / (1 << 20) / s : 0.0, extra);
	}
	return 0;
}

/* Every artifact, then the manifest last: its presence says the upload is complete. */
static int send_all(struct upload_job *j)
{
	struct s3_object_meta meta = { "application/json", j->manifest_sha };
	struct s3_error e;
	char hb[32];
	int err;

	if (j->o->hooks)
		j->hooks = *j->o->hooks;
	if (!j->hooks.notify)
		j->hooks.notify = notify_log;
	j->client = j->store ? NULL : s3_client__new(&j->cfg, &j->o->client, &j->hooks);
	if (!j->store && !j->client) {
		snprintf(j->what, sizeof(j->what), "cannot start the HTTP client (libcurl)");
		return -ENOMEM;
	}
	if (!j->o->quiet)
		log_info("uploading %zu files (%s) from %s to %s", j->arts.n,
			 human_bytes(j->total, hb, sizeof(hb)), j->dir, j->location);
	for (size_t i = 0; i < j->arts.n; i++) {
		const struct artifact *f = &j->arts.v[i];

		err = j->o->skip_existing && !j->store ? already_there(j, f) : 0;
		if (err > 0) {
			if (!j->o->quiet)
				log_info("  %s: already there with the same SHA-256", f->rel);
			j->skipped++;
			continue;
		}
		if (err == 0)
			err = send_one(j, f);
		if (err < 0)
			return err;
		j->sent++;
	}
	if (j->store) {
		err = store_put(&j->dest, MANIFEST, -1, j->manifest.s, j->manifest.len,
				j->manifest_sha, &j->o->client.retry, &j->hooks, &e);
		if (err < 0)
			store_error__describe(&e, err, j->what, sizeof(j->what));
		return err;
	}
	err = s3_client__put_buffer(j->client, j->loc.bucket, j->manifest_key, j->manifest.s,
				    j->manifest.len, &meta, &e);
	if (err < 0)
		s3_error__describe(&e, &j->cfg, j->what, sizeof(j->what));
	return err;
}

int upload_artifacts(const char *dir, const char *s3url, const struct upload_opts *o,
		     char *msg, size_t msglen)
{
	struct upload_opts defaults;
	struct upload_job j = { .dir = dir, .manifest = STRBUF_INIT };
	char qdir[PATH_MAX + 64], qurl[2048], hb[32];
	uint64_t t0 = now_monotonic_ns();
	int err;

	if (!o) {
		upload_opts__init(&defaults);
		o = &defaults;
	}
	j.o = o;
	msg[0] = '\0';
	j.store = store_url_is_store(s3url);
	if (j.store) {
		char why[400];

		err = store_dest__parse(s3url, &j.dest, why, sizeof(why));
		if (err < 0) {
			snprintf(msg, msglen, "%s", err == -ENOMEM ? "out of memory" : why);
			return err;
		}
		snprintf(j.location, sizeof(j.location), "%s/", j.dest.base);
		goto checked;
	}
	err = s3_location__parse(s3url, &j.loc);
	if (err < 0) {
		snprintf(msg, msglen, "'%s' is not s3://bucket[/prefix] (bucket: 3-255 of a-z 0-9 . "
			 "- _; prefix: no empty, '.' or '..' segments, no control characters)",
			 s3url ? s3url : "");
		return err == -ENOMEM ? err : -EINVAL;
	}
	snprintf(j.location, sizeof(j.location), "s3://%s/%s%s", j.loc.bucket, j.loc.prefix,
		 j.loc.prefix[0] ? "/" : "");
checked:
	err = check_job(&j);
	if (err == 0)
		err = prepare_manifest(&j);
	if (err == 0)
		err = send_all(&j);
	if (err < 0 && j.nothing_to_resume) {
		snprintf(msg, msglen, "%s", j.what);
	} else if (err < 0) {
		shell_quote(dir, qdir, sizeof(qdir));
		shell_quote(s3url, qurl, sizeof(qurl));
		snprintf(msg, msglen, "%s. The artifacts are kept in %s; to resume: aiprof upload "
			 "%s %s", j.what, dir, qdir, qurl);
	} else {
		/* only now may local files go */
		if (o->delete_after)
			delete_local(dir, &j.arts);
		snprintf(msg, msglen, "uploaded %u of %zu files (%s%s) and " MANIFEST " to "
			 "%s in %.2fs%s", j.sent, j.arts.n,
			 human_bytes(j.total, hb, sizeof(hb)),
			 j.skipped ? ", the rest already there" : "", j.location,
			 (double)(now_monotonic_ns() - t0) / 1e9,
			 o->delete_after ? "; local copies removed" : "");
	}
	s3_client__free(j.client);
	strbuf__release(&j.manifest);
	artifacts__clear(&j.arts);
	s3_config__clear(&j.cfg);
	s3_location__clear(&j.loc);
	store_dest__clear(&j.dest);
	return err;
}
