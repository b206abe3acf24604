/*
 * test_http_client.c - lib/http_client.c against real servers on loopback sockets started by
 * the test (a thread per connection that reads the request and answers what the test chose):
 * status, body, type and the request as sent; the size cap (announced and chunked answers);
 * a server that never answers (the timeout, waited for as the client's verdict, not measured);
 * a redirect that is not followed; a unix socket and a missing one; a refused connection's
 * sentence; the public-address check; protocols; streaming and its stop; abort; header, URL
 * and method injection; http_escape and http_url_host.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <cmocka.h>

#include "lib/http_client.h"

/* One listening socket and the one connection a test makes to it. */
struct srv {
	int lfd;
	int port;
	char path[108];       /* a unix socket's, or "" */
	const char *reply;    /* sent after the request, then the connection is closed */
	size_t reply_len;
	bool hang;            /* read the request, then answer nothing until released */
	int release[2];       /* a pipe: the test writes to it when the client gave up */
	char got[16384];      /* the request as it arrived */
	size_t got_len;
	int have_request;     /* set (atomically) once the whole request arrived */
	pthread_t th;
};

/* srv_read_request - the head, and the body its Content-Length announces */
static void srv_read_request(struct srv *s, int fd)
{
	size_t want = 0;
	bool head = false;
	while (s->got_len < sizeof(s->got) - 1) {
		ssize_t n = read(fd, s->got + s->got_len, sizeof(s->got) - 1 - s->got_len);
		if (n <= 0)
			break;
		s->got_len += (size_t)n;
		s->got[s->got_len] = '\0';
		char *end = strstr(s->got, "\r\n\r\n");
		if (end && !head) {
			head = true;
			const char *cl = strcasestr(s->got, "\r\nContent-Length:");
			want = (size_t)(end + 4 - s->got) + (cl && cl < end ? strtoul(cl + 17, NULL, 10) : 0);
		}
		if (head && s->got_len >= want)
			break;
	}
}

static void *srv_main(void *arg)
{
	struct srv *s = arg;
	int fd = accept(s->lfd, NULL, NULL);
	if (fd < 0)
		return NULL;
	srv_read_request(s, fd);
	__atomic_store_n(&s->have_request, 1, __ATOMIC_SEQ_CST);
	if (s->hang) {
		/* wait for the test's word, never for a time */
		struct pollfd pf = { .fd = s->release[0], .events = POLLIN };
		while (poll(&pf, 1, -1) < 0 && errno == EINTR)
			;
	} else if (s->reply) {
		size_t off = 0;
		while (off < s->reply_len) {
			ssize_t n = send(fd, s->reply + off, s->reply_len - off, MSG_NOSIGNAL);
			if (n <= 0)
				break;
			off += (size_t)n;
		}
	}
	close(fd);
	return NULL;
}

/* srv_listen - a loopback TCP listener (or, with path, a unix one); not yet accepting */
static void srv_listen(struct srv *s, const char *path)
{
	memset(s, 0, sizeof(*s));
	assert_int_equal(pipe(s->release), 0);
	if (path) {
		struct sockaddr_un a = { .sun_family = AF_UNIX };
		snprintf(a.sun_path, sizeof(a.sun_path), "%s", path);
		snprintf(s->path, sizeof(s->path), "%s", path);
		unlink(path);
		s->lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		assert_int_equal(bind(s->lfd, (struct sockaddr *)&a, sizeof(a)), 0);
	} else {
		struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
		socklen_t al = sizeof(a);
		s->lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		assert_int_equal(bind(s->lfd, (struct sockaddr *)&a, sizeof(a)), 0);
		assert_int_equal(getsockname(s->lfd, (struct sockaddr *)&a, &al), 0);
		s->port = ntohs(a.sin_port);
	}
	assert_int_equal(listen(s->lfd, 4), 0);
}

/* srv_start - answer one connection with reply (a C string), or hang */
static void srv_start(struct srv *s, const char *reply, bool hang)
{
	s->reply = reply;
	s->reply_len = reply ? strlen(reply) : 0;
	s->hang = hang;
	assert_int_equal(pthread_create(&s->th, NULL, srv_main, s), 0);
}

static void srv_stop(struct srv *s)
{
	assert_int_equal(write(s->release[1], "x", 1), 1);
	pthread_join(s->th, NULL);
	close(s->lfd);
	close(s->release[0]);
	close(s->release[1]);
	if (s->path[0])
		unlink(s->path);
}

/* srv_untouched - nobody connected to the listener */
static bool srv_untouched(struct srv *s)
{
	int fl = fcntl(s->lfd, F_GETFL);
	fcntl(s->lfd, F_SETFL, fl | O_NONBLOCK);
	int fd = accept(s->lfd, NULL, NULL);
	bool none = fd < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
	if (fd >= 0)
		close(fd);
	fcntl(s->lfd, F_SETFL, fl);
	return none;
}

static void test_status_body(void **state)
{
	(void)state;
	struct srv s;
	srv_listen(&s, NULL);
	srv_start(&s, "HTTP/1.1 201 Created\r\nContent-Type: text/plain; charset=utf-8\r\n"
		      "X-Thing: seven\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello", false);
	char url[128];
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/things?x=1", s.port);
	const char *hdr[] = { "Content-Type: application/json", "X-Extra: yes", NULL };
	const char *want[] = { "X-Absent", "X-Thing", NULL };
	struct http_request q = { .url = url, .method = "PUT", .body = "{\"a\":1}", .body_len = 7,
				  .headers = hdr, .bearer = "tok-123", .timeout_ms = 10000,
				  .max_bytes = 100, .want_headers = want };
	struct http_response r;
	assert_int_equal(http_perform(&q, &r), 0);
	srv_stop(&s);
	assert_int_equal(r.status, 201);
	assert_string_equal(r.body.data, "hello");
	assert_int_equal(r.body.len, 5);
	assert_string_equal(r.content_type, "text/plain; charset=utf-8");
	assert_int_equal(r.content_length, 5);
	assert_string_equal(r.header[0], "");
	assert_string_equal(r.header[1], "seven");
	assert_int_equal(r.fail, HTTP_FAIL_NONE);
	/* the request as sent */
	assert_non_null(strstr(s.got, "PUT /things?x=1 HTTP/1.1\r\n"));
	assert_non_null(strstr(s.got, "\r\nAuthorization: Bearer tok-123\r\n"));
	assert_non_null(strstr(s.got, "\r\nX-Extra: yes\r\n"));
	assert_non_null(strstr(s.got, "\r\nUser-Agent: kode-gopher/"));
	assert_non_null(strstr(s.got, "\r\n\r\n{\"a\":1}"));
	http_response_free(&r);

	/* an empty answer is "" (not NULL); a GET without body; Basic auth */
	srv_listen(&s, NULL);
	srv_start(&s, "HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n", false);
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/", s.port);
	struct http_request q2 = { .url = url, .user = "id", .pass = "se:cret", .timeout_ms = 10000 };
	assert_int_equal(http_perform(&q2, &r), 0);
	srv_stop(&s);
	assert_int_equal(r.status, 204);
	assert_non_null(r.body.data);
	assert_string_equal(r.body.data, "");
	assert_string_equal(r.content_type, "");
	assert_non_null(strstr(s.got, "GET / HTTP/1.1\r\n"));
	assert_non_null(strstr(s.got, "\r\nAuthorization: Basic aWQ6c2U6Y3JldA==\r\n"));
	http_response_free(&r);
}

static void test_max_bytes(void **state)
{
	(void)state;
	char big[400];
	/* announced: refused by its Content-Length */
	snprintf(big, sizeof(big), "HTTP/1.1 200 OK\r\nContent-Length: 100\r\nConnection: close\r\n\r\n"
		 "%0100d", 0);
	/* not announced (chunked): refused as the bytes arrive */
	char chunked[400];
	snprintf(chunked, sizeof(chunked), "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n"
		 "Connection: close\r\n\r\n8\r\n12345678\r\n8\r\n12345678\r\n0\r\n\r\n");
	const char *replies[] = { big, chunked };
	for (int i = 0; i < 2; i++) {
		struct srv s;
		srv_listen(&s, NULL);
		srv_start(&s, replies[i], false);
		char url[128];
		snprintf(url, sizeof(url), "http://127.0.0.1:%d/big", s.port);
		struct http_request q = { .url = url, .max_bytes = 10, .timeout_ms = 10000 };
		struct http_response r;
		assert_int_equal(http_perform(&q, &r), -EFBIG);
		srv_stop(&s);
		assert_int_equal(r.fail, HTTP_FAIL_TOO_BIG);
		assert_non_null(strstr(r.err, "GET http://127.0.0.1:"));
		assert_non_null(strstr(r.err, "/big: the answer is larger than 10 bytes (after "));
		http_response_free(&r);
	}
	/* exactly at the cap is fine */
	struct srv s;
	srv_listen(&s, NULL);
	srv_start(&s, "HTTP/1.1 200 OK\r\nContent-Length: 10\r\nConnection: close\r\n\r\n0123456789",
		  false);
	char url[128];
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/", s.port);
	struct http_request q = { .url = url, .max_bytes = 10, .timeout_ms = 10000 };
	struct http_response r;
	assert_int_equal(http_perform(&q, &r), 0);
	srv_stop(&s);
	assert_string_equal(r.body.data, "0123456789");
	http_response_free(&r);
}

static void test_timeout(void **state)
{
	(void)state;
	struct srv s;
	srv_listen(&s, NULL);
	srv_start(&s, NULL, true); /* reads the request, answers nothing */
	char url[128];
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/slow", s.port);
	struct http_request q = { .url = url, .timeout_ms = 200, .connect_timeout_ms = 5000 };
	struct http_response r;
	assert_int_equal(http_perform(&q, &r), -ETIMEDOUT);
	srv_stop(&s);
	assert_int_equal(r.fail, HTTP_FAIL_TIMEOUT);
	assert_int_equal(r.status, 0);
	assert_non_null(strstr(r.err, "/slow: no answer within 200 ms (after "));
	http_response_free(&r);
}

/* stall_main - answer a head and one chunk, then send nothing until released */
static void *stall_main(void *arg)
{
	struct srv *s = arg;
	int fd = accept(s->lfd, NULL, NULL);
	if (fd < 0)
		return NULL;
	srv_read_request(s, fd);
	const char *head = "HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\n"
			   "Transfer-Encoding: chunked\r\n\r\n3\r\n{}\n\r\n";
	if (send(fd, head, strlen(head), MSG_NOSIGNAL) < 0)
		fd = -fd;
	struct pollfd pf = { .fd = s->release[0], .events = POLLIN };
	while (poll(&pf, 1, -1) < 0 && errno == EINTR)
		;
	close(fd < 0 ? -fd : fd);
	return NULL;
}

struct stream_seen {
	size_t bytes, calls;
	long status;
	char ctype[128];
	int stop_with;
};

static int on_piece(void *ctx, const struct http_response *r, const char *p, size_t n)
{
	(void)p;
	struct stream_seen *v = ctx;
	v->bytes += n;
	v->calls++;
	v->status = r->status;
	snprintf(v->ctype, sizeof(v->ctype), "%s", r->content_type);
	return v->stop_with;
}

static void test_stall_stream_stop(void **state)
{
	(void)state;
	/* a stream that stops sending ends after stall_s, with its head and piece seen */
	struct srv s;
	srv_listen(&s, NULL);
	assert_int_equal(pthread_create(&s.th, NULL, stall_main, &s), 0);
	char url[128];
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/stream", s.port);
	struct stream_seen v = { 0 };
	struct http_request q = { .url = url, .stall_s = 1, .on_data = on_piece, .ctx = &v };
	struct http_response r;
	assert_int_equal(http_perform(&q, &r), -ETIMEDOUT);
	srv_stop(&s);
	assert_int_equal(r.fail, HTTP_FAIL_TIMEOUT);
	assert_int_equal(v.status, 200);
	assert_string_equal(v.ctype, "application/x-ndjson");
	assert_int_equal(v.bytes, 3);
	assert_null(r.body.data); /* streamed, not collected */
	assert_non_null(strstr(r.err, "nothing arrived for 1 s"));
	http_response_free(&r);

	/* the reader stops it: its verdict is the answer */
	srv_listen(&s, NULL);
	assert_int_equal(pthread_create(&s.th, NULL, stall_main, &s), 0);
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/stream", s.port);
	struct stream_seen v2 = { .stop_with = -EPROTO };
	q.ctx = &v2;
	q.stall_s = 60;
	assert_int_equal(http_perform(&q, &r), -EPROTO);
	srv_stop(&s);
	assert_int_equal(r.fail, HTTP_FAIL_STOPPED);
	assert_int_equal(v2.calls, 1);
	http_response_free(&r);
}

/* abort_when_sent - end the transfer once the server holds the whole request (a transfer that
 * is under way, waiting for an answer that never comes) */
static bool abort_when_sent(void *ctx)
{
	struct srv *s = ctx;
	return __atomic_load_n(&s->have_request, __ATOMIC_SEQ_CST) != 0;
}

static void test_abort(void **state)
{
	(void)state;
	struct srv s;
	srv_listen(&s, NULL);
	srv_start(&s, NULL, true);
	char url[128];
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/", s.port);
	struct http_request q = { .url = url, .abort = abort_when_sent, .ctx = &s };
	struct http_response r;
	assert_int_equal(http_perform(&q, &r), -ECANCELED);
	srv_stop(&s);
	assert_int_equal(r.fail, HTTP_FAIL_ABORTED);
	assert_non_null(strstr(s.got, "GET / HTTP/1.1\r\n"));
	assert_non_null(strstr(r.err, ": cancelled (after "));
	http_response_free(&r);
}

static void test_redirect_not_followed(void **state)
{
	(void)state;
	struct srv target, s;
	srv_listen(&target, NULL); /* where the redirect points: must see no connection */
	srv_listen(&s, NULL);
	char reply[256], url[128];
	snprintf(reply, sizeof(reply), "HTTP/1.1 302 Found\r\nLocation: http://127.0.0.1:%d/stolen\r\n"
		 "Content-Length: 5\r\nConnection: close\r\n\r\nmoved", target.port);
	srv_start(&s, reply, false);
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/login", s.port);
	struct http_request q = { .url = url, .bearer = "secret-token", .timeout_ms = 10000 };
	struct http_response r;
	assert_int_equal(http_perform(&q, &r), 0);
	srv_stop(&s);
	assert_int_equal(r.status, 302);
	assert_string_equal(r.body.data, "moved");
	assert_true(srv_untouched(&target));
	close(target.lfd);
	close(target.release[0]);
	close(target.release[1]);
	http_response_free(&r);
}

static void test_unix_socket(void **state)
{
	(void)state;
	char dir[] = "/tmp/kg-http-XXXXXX", path[128];
	assert_non_null(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/agent.sock", dir);
	struct srv s;
	srv_listen(&s, path);
	srv_start(&s, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok", false);
	struct http_request q = { .url = "http://localhost/health", .unix_socket = path,
				  .timeout_ms = 10000 };
	struct http_response r;
	assert_int_equal(http_perform(&q, &r), 0);
	srv_stop(&s);
	assert_int_equal(r.status, 200);
	assert_string_equal(r.body.data, "ok");
	assert_non_null(strstr(s.got, "GET /health HTTP/1.1\r\n"));
	http_response_free(&r);

	/* gone: its own errno and words */
	assert_int_equal(http_perform(&q, &r), -ENOENT);
	assert_int_equal(r.fail, HTTP_FAIL_CONNECT);
	char want[256];
	snprintf(want, sizeof(want), "GET http://localhost/health via %s: no such socket (after ", path);
	assert_non_null(strstr(r.err, want));
	http_response_free(&r);
	rmdir(dir);
}

static void test_refused_error_text(void **state)
{
	(void)state;
	/* a port nobody listens on: bind one, and close it */
	struct srv s;
	srv_listen(&s, NULL);
	int port = s.port;
	close(s.lfd);
	close(s.release[0]);
	close(s.release[1]);
	char url[128], want[128];
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/x?token=hidden", port);
	struct http_request q = { .url = url, .method = "DELETE", .timeout_ms = 5000 };
	struct http_response r;
	assert_int_equal(http_perform(&q, &r), -ECONNREFUSED);
	assert_int_equal(r.fail, HTTP_FAIL_CONNECT);
	assert_int_equal(r.os_errno, ECONNREFUSED);
	snprintf(want, sizeof(want), "DELETE http://127.0.0.1:%d/x: connection refused (after ", port);
	assert_true(strncmp(r.err, want, strlen(want)) == 0);
	assert_null(strstr(r.err, "hidden")); /* no query in a sentence */
	assert_true(r.detail[0] != '\0');
	http_response_free(&r);

	/* no URL */
	struct http_request none = { 0 };
	assert_int_equal(http_perform(&none, &r), -EINVAL);
	assert_int_equal(r.fail, HTTP_FAIL_SETUP);
	http_response_free(&r);
}

static void test_public_only_and_protocols(void **state)
{
	(void)state;
	struct srv s;
	srv_listen(&s, NULL);
	char url[128];
	/* loopback, by address and by a name that resolves to it */
	const char *hosts[] = { "127.0.0.1", "localhost" };
	for (int i = 0; i < 2; i++) {
		snprintf(url, sizeof(url), "http://%s:%d/doc", hosts[i], s.port);
		struct http_request q = { .url = url, .public_only = true, .timeout_ms = 5000 };
		struct http_response r;
		int e = http_perform(&q, &r);
		assert_int_equal(e, -EACCES);
		assert_int_equal(r.fail, HTTP_FAIL_ADDRESS);
		assert_non_null(strstr(r.err, "a non-public address"));
		http_response_free(&r);
	}
	assert_true(srv_untouched(&s));
	/* an http:// URL where only https is allowed is not sent */
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/", s.port);
	struct http_request q = { .url = url, .protocols = "https", .timeout_ms = 5000 };
	struct http_response r;
	assert_int_equal(http_perform(&q, &r), -EINVAL);
	assert_int_equal(r.fail, HTTP_FAIL_SETUP);
	assert_non_null(strstr(r.err, "only https is allowed here"));
	http_response_free(&r);
	/* nor another scheme at all */
	struct http_request f = { .url = "file:///etc/passwd", .timeout_ms = 5000 };
	assert_int_equal(http_perform(&f, &r), -EINVAL);
	assert_null(r.body.data);
	http_response_free(&r);
	assert_true(srv_untouched(&s));
	close(s.lfd);
	close(s.release[0]);
	close(s.release[1]);
}

/* the address check itself: public_only refuses every address this calls not public */
static void test_addr_public(void **state)
{
	(void)state;
	struct { const char *a; bool pub; } cases[] = {
		{ "8.8.8.8", true }, { "142.250.74.46", true }, { "2a00:1450:4001:80b::200e", true },
		{ "127.0.0.1", false }, { "127.200.1.1", false }, { "10.1.2.3", false }, { "172.16.0.1", false },
		{ "172.31.255.255", false }, { "172.32.0.1", true }, { "192.168.1.1", false }, { "169.254.169.254", false },
		{ "100.64.0.1", false }, { "0.0.0.0", false }, { "224.0.0.1", false }, { "255.255.255.255", false },
		{ "::1", false }, { "::", false }, { "::ffff:127.0.0.1", false }, { "::ffff:169.254.169.254", false },
		{ "::ffff:8.8.8.8", true }, { "64:ff9b::a00:1", false }, { "fc00::1", false }, { "fd12::1", false },
		{ "fe80::1", false }, { "ff02::1", false }, { "2001:db8::1", false }, { "fd00::1", false },
		{ "2a00:1450:4001::1", true },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct sockaddr_storage ss = { 0 };
		if (strchr(cases[i].a, ':')) {
			struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&ss;
			a6->sin6_family = AF_INET6;
			assert_int_equal(inet_pton(AF_INET6, cases[i].a, &a6->sin6_addr), 1);
		} else {
			struct sockaddr_in *a4 = (struct sockaddr_in *)&ss;
			a4->sin_family = AF_INET;
			assert_int_equal(inet_pton(AF_INET, cases[i].a, &a4->sin_addr), 1);
		}
		if (http_addr_public((struct sockaddr *)&ss) != cases[i].pub)
			fail_msg("%s should be %s", cases[i].a, cases[i].pub ? "public" : "refused");
	}
}

static void test_injection_refused(void **state)
{
	(void)state;
	struct srv s;
	srv_listen(&s, NULL);
	char url[128];
	snprintf(url, sizeof(url), "http://127.0.0.1:%d/", s.port);
	const char *bad_hdr[] = { "X-A: 1\r\nX-Injected: 2", NULL };
	const char *bad_lf[] = { "X-A: 1\nHost: elsewhere", NULL };
	char bad_url[160];
	snprintf(bad_url, sizeof(bad_url), "http://127.0.0.1:%d/a\r\nX-Injected: 1", s.port);
	struct http_request qs[] = {
		{ .url = url, .headers = bad_hdr },
		{ .url = url, .headers = bad_lf },
		{ .url = url, .bearer = "tok\r\nX-Injected: 1" },
		{ .url = url, .method = "GET /other HTTP/1.1\r\nX:" },
		{ .url = url, .method = "get" },
		{ .url = url, .method = "" },
		{ .url = bad_url },
	};
	for (size_t i = 0; i < sizeof(qs) / sizeof(qs[0]); i++) {
		struct http_response r;
		qs[i].timeout_ms = 5000;
		assert_int_equal(http_perform(&qs[i], &r), -EINVAL);
		assert_int_equal(r.fail, HTTP_FAIL_SETUP);
		assert_non_null(strstr(r.err, "control character"));
		assert_null(strstr(r.err, "Injected"));
		http_response_free(&r);
	}
	assert_true(srv_untouched(&s));
	close(s.lfd);
	close(s.release[0]);
	close(s.release[1]);
}

static void test_escape_host(void **state)
{
	(void)state;
	char *e = http_escape("a b&c=d/é");
	assert_string_equal(e, "a%20b%26c%3Dd%2F%C3%A9");
	free(e);
	e = http_escape("");
	assert_string_equal(e, "");
	free(e);
	char host[64];
	http_url_host("https://user:pw@oauth2.example.com:8443/token?x=secret", host, sizeof(host));
	assert_string_equal(host, "oauth2.example.com");
	http_url_host("not a url", host, sizeof(host));
	assert_string_equal(host, "?");
}

int main(void)
{
	assert_int_equal(http_global_init(), 0);
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_status_body),
		cmocka_unit_test(test_max_bytes),
		cmocka_unit_test(test_timeout),
		cmocka_unit_test(test_stall_stream_stop),
		cmocka_unit_test(test_abort),
		cmocka_unit_test(test_redirect_not_followed),
		cmocka_unit_test(test_unix_socket),
		cmocka_unit_test(test_refused_error_text),
		cmocka_unit_test(test_public_only_and_protocols),
		cmocka_unit_test(test_addr_public),
		cmocka_unit_test(test_injection_refused),
		cmocka_unit_test(test_escape_host),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
