/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for the controller's HTTP endpoint as a client reaches it (controller/
 * httpd.c on libwebsockets): the input, after its first byte, is sent as it is over a
 * loopback TCP connection to a real httpd (no service thread: the fuzzer turns the service
 * loop itself, httpd__service()), then the connection's write side is shut and the answer
 * read until the server closes. What it reaches: the request line and headers (libwebsockets'
 * parser), every route (/healthz, /readyz, /metrics, /ws/sessions, PUT /v1/artifacts/...),
 * the bearer token, Content-Length and X-Aiprof-Sha256 of an upload, its body, the
 * websocket upgrade and the frames a client sends after it (masking, lengths, control
 * frames, close), parked requests whose client goes (their review or upload is dropped from
 * the queue). The first byte picks the server: bit 0 set, --http-auth kubernetes (reviews
 * and uploads are queued for workers that never run: nothing leaves the machine); else
 * none. A websocket message is broadcast with each input. Any crash, leak or hang fails.
 * FUZZ_SOURCES: controller/httpd.c controller/httpauth.c controller/artupload.c controller/artstore.c controller/kubeclient.c controller/kubeconfig.c controller/yamljson.c controller/b64.c common/storeurl.c common/s3url.c common/digest.c common/strbuf.c common/timeutil.c common/readfile.c
 * FUZZ_LIBS: -lwebsockets -ljansson -lcurl -lcrypto -lyaml -lpthread
 * FUZZ_ARGS: -max_len=8192 -timeout=20
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include "controller/httpd.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define TURNS 400               /* service turns for one input at most */

static struct httpd *servers[2];
static struct kube_config kube = {
	.server = "https://127.0.0.1:9", .namespace = "default", .source = "fuzz_httpd",
};

static bool ready(void *ctx, char *why, size_t whylen)
{
	(void)ctx;
	(void)why;
	(void)whylen;
	return true;
}

static void metrics(void *ctx, struct strbuf *b)
{
	(void)ctx;
	strbuf_adds(b, "aiprof_fuzz 1\n");
}

static void snapshot(void *ctx, struct strbuf *b)
{
	(void)ctx;
	strbuf_adds(b, "{\"type\":\"session\",\"session\":{\"metadata\":{\"namespace\":\"train\","
		    "\"name\":\"s1\"}}}\n");
}

static void quiet(void *ctx, int level, const char *msg)
{
	(void)ctx;
	(void)level;
	(void)msg;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	struct httpd_handlers h = { .ready = ready, .metrics = metrics, .snapshot = snapshot,
				    .log = quiet };

	(void)argc;
	(void)argv;
	for (int i = 0; i < 2; i++) {
		struct httpd_config cfg = {
			.addr = "127.0.0.1:0", .auth = i ? HTTPD_AUTH_KUBERNETES : HTTPD_AUTH_NONE,
			.kube = &kube, .max_ws_clients = 8, .max_connections = 32,
			.store_max_file = 1 << 16, .store_max_session = 1 << 17,
			.store_upload_timeout_ms = 2000,
		};

		if (httpd__new(&cfg, &h, &servers[i]) < 0)
			abort();
	}
	return 0;
}

static int dial(int port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd < 0)
		abort();
	if (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0 && errno != EINPROGRESS)
		abort();
	return fd;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct httpd *h;
	size_t sent = 0;
	bool shut = false;
	char buf[4096];
	int fd;

	if (size < 1)
		return 0;
	h = servers[data[0] & 1];
	data++;
	size--;
	fd = dial(httpd__port(h));
	httpd__broadcast(h, "{\"type\":\"session\",\"session\":{\"metadata\":{\"namespace\":\"train\"}}}",
			 61);
	for (int turn = 0; turn < TURNS; turn++) {
		ssize_t n;

		if (httpd__service(h) < 0)
			abort();
		if (sent < size) {
			n = send(fd, data + sent, size - sent, MSG_NOSIGNAL);
			if (n > 0)
				sent += (size_t)n;
			else if (n < 0 && errno != EAGAIN && errno != ENOTCONN)
				break;  /* the server closed first */
		}
		if (sent == size && !shut) {
			shutdown(fd, SHUT_WR);
			shut = true;
		}
		n = recv(fd, buf, sizeof(buf), 0);
		if (n == 0 || (n < 0 && errno != EAGAIN))
			break;          /* answered and closed */
	}
	close(fd);
	for (int turn = 0; turn < 8; turn++)    /* the server sees the close */
		httpd__service(h);
	return 0;
}
