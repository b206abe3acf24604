/*
 * test_http_headers.c - the HTTP transport's parsers of untrusted header values (master/http.c):
 * Origin split into scheme, host and port exactly; Accept media ranges with wildcards and q=0;
 * Content-Type; and the fixed label sets of /metrics (master/pool.c).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "master/pool.h"

static void test_origin_exact(void **st)
{
	(void)st;
	char scheme[8], host[64];
	long port;
	assert_true(http_origin_parse("http://localhost:8080", scheme, sizeof(scheme), host, sizeof(host), &port));
	assert_string_equal(scheme, "http");
	assert_string_equal(host, "localhost");
	assert_int_equal(port, 8080);
	assert_true(http_origin_parse("HTTPS://[::1]", scheme, sizeof(scheme), host, sizeof(host), &port));
	assert_string_equal(scheme, "https");
	assert_string_equal(host, "[::1]");
	assert_int_equal(port, 443);
	assert_true(http_origin_parse("http://LocalHost", scheme, sizeof(scheme), host, sizeof(host), &port));
	assert_string_equal(host, "localhost");
	assert_int_equal(port, 80);
}

static void test_origin_refused(void **st)
{
	(void)st;
	static const char *const bad[] = {
		"http://localhost:1@evil.example", "http://localhost@evil.example", "http://localhost:80/",
		"http://localhost:80/x", "http://localhost?x", "http://localhost#x", "http://localhost:",
		"http://localhost:0", "http://localhost:65536", "http://localhost:123456", "http://localhost:8a",
		"http://:80", "http://", "://localhost", "localhost:80", "null", "", "http//localhost",
		"http://[::1", "http://[::1]x", "h~p://localhost", "http://local host", "http://a\\@b",
		"http://localhost:80:80",
	};
	char scheme[8], host[64];
	long port;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		if (http_origin_parse(bad[i], scheme, sizeof(scheme), host, sizeof(host), &port))
			fail_msg("accepted \"%s\" as scheme %s host %s port %ld", bad[i], scheme, host, port);
	/* too long for the caller's buffers: refused, not cut */
	assert_false(http_origin_parse("verylongscheme://localhost", scheme, sizeof(scheme), host, sizeof(host), &port));
	char longhost[200] = "http://";
	memset(longhost + 7, 'a', 150);
	assert_false(http_origin_parse(longhost, scheme, sizeof(scheme), host, sizeof(host), &port));
}

static void test_accept(void **st)
{
	(void)st;
	assert_true(http_media_admits("application/json, text/event-stream", "application/json"));
	assert_true(http_media_admits("application/json, text/event-stream", "text/event-stream"));
	assert_true(http_media_admits("*/*", "application/json"));
	assert_true(http_media_admits("application/*;q=0.5", "application/json"));
	assert_true(http_media_admits("  APPLICATION/JSON ; charset=utf-8", "application/json"));
	assert_false(http_media_admits("text/event-stream", "application/json"));
	assert_false(http_media_admits("application/json;q=0", "application/json"));
	assert_false(http_media_admits("application/json; q=0.0, text/html", "application/json"));
	assert_false(http_media_admits("application/jsonx", "application/json"));
	assert_false(http_media_admits("application", "application/json"));
	assert_false(http_media_admits("text/*", "application/json"));
	assert_false(http_media_admits("", "application/json"));
	assert_false(http_media_admits(",,,", "application/json"));
}

static void test_content_type(void **st)
{
	(void)st;
	assert_true(http_content_type_json("application/json"));
	assert_true(http_content_type_json("application/json; charset=utf-8"));
	assert_true(http_content_type_json("Application/JSON"));
	assert_false(http_content_type_json(NULL));
	assert_false(http_content_type_json("application/jsonp"));
	assert_false(http_content_type_json("text/plain"));
	assert_false(http_content_type_json("application/json-seq"));
}

static struct ipc_bytes b(const char *s)
{
	return (struct ipc_bytes){ s, strlen(s) };
}

static void test_metric_labels(void **st)
{
	(void)st;
	assert_string_equal(pool_label_tool(b("execute_go_code")), "execute_go_code");
	assert_string_equal(pool_label_tool(b("execute_go_code2")), "other");
	assert_string_equal(pool_label_tool(b("execute_go")), "other");
	assert_string_equal(pool_label_kind(b("ok")), "ok");
	assert_string_equal(pool_label_kind(b("build_error")), "build_error");
	assert_string_equal(pool_label_kind(b("okay")), "other");
	assert_string_equal(pool_label_kind(b("ok\"} 1\nfake{x=\"")), "other");
	assert_string_equal(pool_label_kind((struct ipc_bytes){ "ok\0x", 4 }), "other");
	assert_string_equal(pool_label_kind((struct ipc_bytes){ NULL, 0 }), "other");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_origin_exact),   cmocka_unit_test(test_origin_refused),
		cmocka_unit_test(test_accept),         cmocka_unit_test(test_content_type),
		cmocka_unit_test(test_metric_labels),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
