/*
 * test_metadata.c - unit tests for the metadata-server emulator (agent/metadata.c and
 * agent/metadata_server.c): the request -> response function on every path the libraries ask,
 * the refusals (no Metadata-Flavor, X-Forwarded-For, other paths and methods, broken
 * encodings), the run's view and its token cache, and the listener with a real HTTP client
 * (lib/http_client.c), including a token fetched from "the worker" through the event channel.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "agent/metadata.h"
#include "lib/http_client.h"

#define CLOUD "https://www.googleapis.com/auth/cloud-platform"

/* view - a view with a token for the default scopes that has `left` seconds at now=1000 */
static void view(struct metadata_view *v, bool id_tokens, int left)
{
	json_t *c = json_pack("{s:s, s:s, s:s, s:s, s:[s], s:b, s:s, s:s, s:i}", "mode", "metadata",
			      "email", "sa@p.iam.gserviceaccount.com", "project_id", "p",
			      "numeric_project_id", "123", "scopes", CLOUD, "id_tokens", id_tokens,
			      "access_token", "ya29.token", "token_type", "Bearer", "expires_in", left);
	char err[256];
	assert_int_equal(metadata_view_from_json(c, 1000, v, err, sizeof(err)), 0);
	json_decref(c);
}

/* ask - one GET with the flavor header */
static void ask(const struct metadata_view *v, const char *target, struct metadata_response *r)
{
	struct metadata_request rq = { .method = "GET", .target = target,
				       .target_len = strlen(target), .flavor = "Google" };
	assert_int_equal(metadata_answer(v, &rq, 1000, METADATA_MIN_LIFETIME, r), 0);
}

/* expect - status and body of one GET */
static void expect(const struct metadata_view *v, const char *target, int status, const char *body)
{
	struct metadata_response r;
	ask(v, target, &r);
	assert_int_equal(r.need, METADATA_NEED_NONE);
	assert_int_equal(r.status, status);
	if (body)
		assert_string_equal(r.body, body);
	metadata_response_free(&r);
}

static void test_refusals(void **st)
{
	(void)st;
	struct metadata_view v;
	view(&v, false, 3600);
	struct metadata_response r;
	const char *t = "/computeMetadata/v1/project/project-id";
	struct metadata_request rq = { .method = "GET", .target = t, .target_len = strlen(t) };
	assert_int_equal(metadata_answer(&v, &rq, 1000, 240, &r), 0);
	assert_int_equal(r.status, 403);
	assert_non_null(strstr(r.body, "Metadata-Flavor"));
	metadata_response_free(&r);
	rq.flavor = "google"; /* the value is exact */
	metadata_answer(&v, &rq, 1000, 240, &r);
	assert_int_equal(r.status, 403);
	metadata_response_free(&r);
	rq.flavor = "Google";
	rq.forwarded = true;
	metadata_answer(&v, &rq, 1000, 240, &r);
	assert_int_equal(r.status, 403);
	assert_non_null(strstr(r.body, "X-Forwarded-For"));
	metadata_response_free(&r);
	rq.forwarded = false;
	rq.method = "POST";
	metadata_answer(&v, &rq, 1000, 240, &r);
	assert_int_equal(r.status, 405);
	metadata_response_free(&r);
	/* a forwarded request is refused even on a path that does not exist */
	rq.method = "GET";
	rq.forwarded = true;
	rq.target = "/nope";
	rq.target_len = 5;
	metadata_answer(&v, &rq, 1000, 240, &r);
	assert_int_equal(r.status, 403);
	metadata_response_free(&r);
	metadata_view_free(&v);
}

static void test_paths(void **st)
{
	(void)st;
	struct metadata_view v;
	view(&v, false, 3600);
	expect(&v, "/", 200, "computeMetadata/\n");
	expect(&v, "/computeMetadata/v1/project/project-id", 200, "p");
	expect(&v, "/computeMetadata/v1/project/numeric-project-id", 200, "123");
	expect(&v, "/computeMetadata/v1/universe/universe-domain", 200, "googleapis.com");
	expect(&v, "/computeMetadata/v1/universe/universe_domain", 200, "googleapis.com");
	expect(&v, "/computeMetadata/v1/instance/service-accounts/", 200,
	       "default/\nsa@p.iam.gserviceaccount.com/\n");
	expect(&v, "/computeMetadata/v1/instance/service-accounts", 200, NULL);
	expect(&v, "/computeMetadata/v1/instance/service-accounts/default/", 200,
	       "aliases\nemail\nscopes\ntoken\n");
	expect(&v, "/computeMetadata/v1/instance/service-accounts/default/email", 200,
	       "sa@p.iam.gserviceaccount.com");
	expect(&v, "/computeMetadata/v1/instance/service-accounts/sa@p.iam.gserviceaccount.com/email",
	       200, "sa@p.iam.gserviceaccount.com");
	expect(&v, "/computeMetadata/v1/instance/service-accounts/default/scopes", 200, CLOUD "\n");
	expect(&v, "/computeMetadata/v1/instance/service-accounts/default/aliases", 200, "default\n");
	/* and nothing else */
	expect(&v, "/computeMetadata/v1/instance/service-accounts/other@x/email", 404, NULL);
	expect(&v, "/computeMetadata/v1/instance/zone", 404, NULL);
	expect(&v, "/computeMetadata/v1/project/project-id/", 404, NULL);
	expect(&v, "/computeMetadata/v1/", 404, NULL);
	expect(&v, "/computeMetadata/v2/project/project-id", 404, NULL);
	expect(&v, "/metadata/v1/project/project-id", 404, NULL);
	expect(&v, "/computeMetadata/v1/project/project-id%00", 400, NULL);
	expect(&v, "/computeMetadata/v1/project/project%2", 400, NULL);
	expect(&v, "no-slash", 400, NULL);
	/* percent-encoding in the path is decoded */
	expect(&v, "/computeMetadata/v1/project/project%2Did", 200, "p");
	metadata_view_free(&v);
}

static void test_recursive(void **st)
{
	(void)st;
	struct metadata_view v;
	view(&v, true, 3600);
	struct metadata_response r;
	ask(&v, "/computeMetadata/v1/instance/service-accounts/?recursive=true", &r);
	assert_int_equal(r.status, 200);
	assert_string_equal(r.content_type, "application/json");
	json_t *j = json_loads(r.body, 0, NULL);
	json_t *d = json_object_get(j, "default");
	assert_string_equal(json_string_value(json_object_get(d, "email")),
			    "sa@p.iam.gserviceaccount.com");
	assert_string_equal(json_string_value(json_array_get(json_object_get(d, "aliases"), 0)),
			    "default");
	assert_string_equal(json_string_value(json_array_get(json_object_get(d, "scopes"), 0)), CLOUD);
	assert_non_null(json_object_get(j, "sa@p.iam.gserviceaccount.com"));
	json_decref(j);
	metadata_response_free(&r);
	ask(&v, "/computeMetadata/v1/instance/service-accounts/default/?recursive=true&alt=json", &r);
	j = json_loads(r.body, 0, NULL);
	assert_string_equal(json_string_value(json_object_get(j, "email")),
			    "sa@p.iam.gserviceaccount.com");
	assert_null(json_object_get(j, "token")); /* a listing never carries the token */
	json_decref(j);
	metadata_response_free(&r);
	expect(&v, "/computeMetadata/v1/instance/service-accounts/default/", 200,
	       "aliases\nemail\nidentity\nscopes\ntoken\n");
	metadata_view_free(&v);
}

static void test_token(void **st)
{
	(void)st;
	struct metadata_view v;
	view(&v, false, 3600);
	struct metadata_response r;
	ask(&v, "/computeMetadata/v1/instance/service-accounts/default/token", &r);
	assert_int_equal(r.status, 200);
	assert_string_equal(r.content_type, "application/json");
	json_t *j = json_loads(r.body, 0, NULL);
	assert_string_equal(json_string_value(json_object_get(j, "access_token")), "ya29.token");
	assert_string_equal(json_string_value(json_object_get(j, "token_type")), "Bearer");
	assert_int_equal(json_integer_value(json_object_get(j, "expires_in")), 3600);
	json_decref(j);
	metadata_response_free(&r);

	/* counted down */
	struct metadata_request rq = { .method = "GET",
				       .target = "/computeMetadata/v1/instance/service-accounts/default/token",
				       .flavor = "Google" };
	rq.target_len = strlen(rq.target);
	metadata_answer(&v, &rq, 1100.5, 240, &r);
	j = json_loads(r.body, 0, NULL);
	assert_int_equal(json_integer_value(json_object_get(j, "expires_in")), 3499);
	json_decref(j);
	metadata_response_free(&r);

	/* the same scopes in another order and spelling are the same token */
	ask(&v, "/computeMetadata/v1/instance/service-accounts/default/token?scopes="
		"https%3A%2F%2Fwww.googleapis.com%2Fauth%2Fcloud-platform", &r);
	assert_int_equal(r.status, 200);
	metadata_response_free(&r);

	/* other scopes: fetch them */
	ask(&v, "/computeMetadata/v1/instance/service-accounts/default/token?scopes=b,a,b", &r);
	assert_int_equal(r.need, METADATA_NEED_ACCESS);
	assert_string_equal(r.need_scopes, "a,b");
	metadata_response_free(&r);
	assert_int_equal(metadata_view_add_token(&v, "a,b", "ya29.ab", NULL, 2000), 0);
	ask(&v, "/computeMetadata/v1/instance/service-accounts/default/token?scopes=a+b", &r);
	assert_int_equal(r.status, 200);
	assert_non_null(strstr(r.body, "ya29.ab"));
	metadata_response_free(&r);
	expect(&v, "/computeMetadata/v1/instance/service-accounts/default/token?scopes=", 400, NULL);
	expect(&v, "/computeMetadata/v1/instance/service-accounts/default/token?scopes=%01", 400, NULL);
	metadata_view_free(&v);

	/* a token about to expire is fetched anew */
	view(&v, false, 100);
	ask(&v, "/computeMetadata/v1/instance/service-accounts/default/token", &r);
	assert_int_equal(r.need, METADATA_NEED_ACCESS);
	assert_string_equal(r.need_scopes, CLOUD);
	metadata_response_free(&r);
	metadata_view_free(&v);
}

static void test_identity(void **st)
{
	(void)st;
	struct metadata_view v;
	view(&v, false, 3600);
	expect(&v, "/computeMetadata/v1/instance/service-accounts/default/identity?audience=x", 404,
	       NULL);
	metadata_view_free(&v);
	view(&v, true, 3600);
	expect(&v, "/computeMetadata/v1/instance/service-accounts/default/identity", 400,
	       "non-empty audience parameter required\n");
	expect(&v, "/computeMetadata/v1/instance/service-accounts/default/identity?audience=a&format=x",
	       400, NULL);
	struct metadata_response r;
	ask(&v, "/computeMetadata/v1/instance/service-accounts/default/identity?audience="
		"https%3A%2F%2Fsvc.example.com&format=full&licenses=TRUE", &r);
	assert_int_equal(r.need, METADATA_NEED_IDENTITY);
	assert_string_equal(r.need_audience, "https://svc.example.com");
	assert_true(r.need_full);
	assert_true(r.need_licenses);
	metadata_response_free(&r);
	metadata_view_free(&v);
}

static void test_view_errors(void **st)
{
	(void)st;
	static const char *const bad[] = {
		"{\"scopes\":[]}",
		"{\"scopes\":\"x\"}",
		"{\"scopes\":[\"a,b\"]}",
		"{\"scopes\":[\"a b\"]}",
		"{\"scopes\":[\"a\"],\"email\":\"\"}",
		"{\"scopes\":[\"a\"],\"email\":\"a b\"}",
		"{\"scopes\":[\"a\"],\"access_token\":\"t\"}",
		"{\"scopes\":[\"a\"],\"access_token\":\"t\\n\",\"expires_in\":5}",
		"{\"scopes\":[\"a\"],\"access_token\":\"t\",\"expires_in\":-1}",
		"{\"scopes\":[\"a\"],\"id_tokens\":1}",
		"[]",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		json_t *c = json_loads(bad[i], 0, NULL);
		struct metadata_view v;
		char err[256] = "";
		assert_int_equal(metadata_view_from_json(c, 0, &v, err, sizeof(err)), -EINVAL);
		assert_true(err[0] != '\0');
		assert_null(strstr(err, "t\n"));
		json_decref(c);
	}
	/* the least: scopes; email falls back to "default", no project is a 404 */
	json_t *c = json_loads("{\"scopes\":[\"s\"]}", 0, NULL);
	struct metadata_view v;
	char err[256];
	assert_int_equal(metadata_view_from_json(c, 0, &v, err, sizeof(err)), 0);
	json_decref(c);
	expect(&v, "/computeMetadata/v1/project/project-id", 404, NULL);
	expect(&v, "/computeMetadata/v1/instance/service-accounts/", 200, "default/\n");
	expect(&v, "/computeMetadata/v1/instance/service-accounts/default/email", 200, "default");
	metadata_view_free(&v);
}

static void test_scopes_key_and_cache(void **st)
{
	(void)st;
	bool bad;
	char *k = metadata_scopes_key(" c, a,b a ", &bad);
	assert_string_equal(k, "a,b,c");
	free(k);
	assert_null(metadata_scopes_key(",, ", &bad));
	assert_true(bad);
	char many[40 * 4] = "";
	for (int i = 0; i < 40; i++)
		snprintf(many + strlen(many), sizeof(many) - strlen(many), "s%d,", i);
	assert_null(metadata_scopes_key(many, &bad));

	struct metadata_view v;
	view(&v, false, 3600);
	for (int i = 0; i < METADATA_MAX_TOKENS + 3; i++) {
		char key[16], tok[16];
		snprintf(key, sizeof(key), "k%d", i);
		snprintf(tok, sizeof(tok), "t%d", i);
		assert_int_equal(metadata_view_add_token(&v, key, tok, "Bearer", 5000 + i), 0);
	}
	assert_int_equal(v.ntokens, METADATA_MAX_TOKENS);
	assert_int_equal(metadata_view_add_token(&v, "k", "bad token", NULL, 5000), -EINVAL);
	assert_int_equal(metadata_view_add_token(&v, "k", "", NULL, 5000), -EINVAL);
	metadata_view_free(&v);
}

/* ---- the listener ---- */

struct fake_worker {
	struct metadata_server *srv;
	json_t *last_event;
	int events;
	bool answer;      /* deliver, or let the request wait */
	pthread_t t;
};

/* deliver_later - the worker's answer, from another thread as POST /token would bring it */
static void *deliver_later(void *arg)
{
	struct fake_worker *w = arg;
	json_t *ev = w->last_event;
	json_t *ans;
	if (strcmp(json_string_value(json_object_get(ev, "kind")), "identity") == 0)
		ans = json_pack("{s:O, s:s}", "id", json_object_get(ev, "id"), "id_token", "eyJ.id.tok");
	else
		ans = json_pack("{s:O, s:s, s:s, s:i}", "id", json_object_get(ev, "id"),
				"access_token", "ya29.fetched", "token_type", "Bearer", "expires_in", 1800);
	char err[256];
	usleep(20000);
	int rc = metadata_server_deliver(w->srv, ans, err, sizeof(err));
	json_decref(ans);
	return (void *)(intptr_t)rc;
}

/* on_event - the token_request event the emulator pushes onto the execute stream */
static void on_event(void *ctx, json_t *ev)
{
	struct fake_worker *w = ctx;
	json_decref(w->last_event);
	w->last_event = ev;
	w->events++;
	if (w->answer)
		pthread_create(&w->t, NULL, deliver_later, w);
}

struct got {
	char *body;
	size_t len;
	char flavor[32];
	char ctype[64];
};

/* http_get - GET http://host/path with or without the flavor header; returns the status */
static long http_get(const char *host, const char *path, bool flavor, struct got *g)
{
	memset(g, 0, sizeof(*g));
	char url[512];
	snprintf(url, sizeof(url), "http://%s%s", host, path);
	const char *hl[] = { flavor ? "Metadata-Flavor: Google" : NULL, NULL };
	const char *want[] = { "Metadata-Flavor", NULL };
	struct http_request q = { .url = url, .headers = hl, .no_proxy = true, .timeout_ms = 60000,
				  .want_headers = want };
	struct http_response a;
	long status = http_perform(&q, &a) == 0 ? a.status : 0;
	g->body = a.body.data; /* taken over: the tests free it */
	g->len = a.body.len;
	snprintf(g->flavor, sizeof(g->flavor), "%.*s", (int)sizeof(g->flavor) - 1, a.header[0]);
	snprintf(g->ctype, sizeof(g->ctype), "%.*s", (int)sizeof(g->ctype) - 1, a.content_type);
	return status;
}

static void test_listener(void **st)
{
	(void)st;
	struct fake_worker w = { .answer = true };
	w.srv = metadata_server_new();
	struct metadata_view v;
	char host[64], err[256];
	json_t *c = json_pack("{s:s, s:[s], s:b, s:s, s:i}", "email", "sa@p.iam.gserviceaccount.com",
			      "scopes", CLOUD, "id_tokens", 1, "access_token", "ya29.token",
			      "expires_in", 3600);
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	assert_int_equal(metadata_view_from_json(c, (double)ts.tv_sec + ts.tv_nsec / 1e9, &v, err,
						 sizeof(err)), 0);
	json_decref(c);
	assert_int_equal(metadata_server_begin(w.srv, &v, on_event, &w, host, sizeof(host), err,
					       sizeof(err)), 0);
	assert_int_equal(strncmp(host, "127.", 4), 0);

	struct got g;
	assert_int_equal(http_get(host, "/computeMetadata/v1/project/project-id", false, &g), 403);
	assert_string_equal(g.flavor, "Google");
	free(g.body);
	assert_int_equal(http_get(host, "/computeMetadata/v1/instance/service-accounts/default/token",
				  true, &g), 200);
	assert_string_equal(g.flavor, "Google");
	assert_string_equal(g.ctype, "application/json");
	assert_non_null(strstr(g.body, "ya29.token"));
	free(g.body);
	assert_int_equal(w.events, 0);

	/* other scopes: one token_request, answered by the worker, then cached */
	assert_int_equal(http_get(host, "/computeMetadata/v1/instance/service-accounts/default/"
				  "token?scopes=x%2Cy", true, &g), 200);
	assert_non_null(strstr(g.body, "ya29.fetched"));
	free(g.body);
	assert_int_equal(w.events, 1);
	pthread_join(w.t, NULL);
	assert_string_equal(json_string_value(json_object_get(w.last_event, "event")), "token_request");
	assert_string_equal(json_string_value(json_array_get(json_object_get(w.last_event, "scopes"), 1)),
			    "y");
	assert_int_equal(http_get(host, "/computeMetadata/v1/instance/service-accounts/default/"
				  "token?scopes=y,x", true, &g), 200);
	free(g.body);
	assert_int_equal(w.events, 1);

	/* an ID token is the body */
	assert_int_equal(http_get(host, "/computeMetadata/v1/instance/service-accounts/default/"
				  "identity?audience=aud", true, &g), 200);
	assert_string_equal(g.body, "eyJ.id.tok");
	free(g.body);
	pthread_join(w.t, NULL);

	/* no answer for an unknown id */
	json_t *ans = json_pack("{s:i, s:s}", "id", 999, "error", "x");
	assert_int_equal(metadata_server_deliver(w.srv, ans, err, sizeof(err)), -ENOENT);
	json_decref(ans);

	metadata_server_end(w.srv);
	/* nothing listens once the run is over */
	assert_int_equal(http_get(host, "/", true, &g), 0);
	free(g.body);
	json_decref(w.last_event);
	metadata_server_free(w.srv);
}

/* error_later - the worker cannot mint: its error sentence and status */
static void *error_later(void *arg)
{
	struct fake_worker *w = arg;
	usleep(20000);
	json_t *ans = json_pack("{s:O, s:s, s:i}", "id", json_object_get(w->last_event, "id"),
				"error", "the token endpoint refused the refresh token: invalid_grant",
				"status", 403);
	char err[256];
	metadata_server_deliver(w->srv, ans, err, sizeof(err));
	json_decref(ans);
	return NULL;
}

static void on_event_error(void *ctx, json_t *ev)
{
	struct fake_worker *w = ctx;
	json_decref(w->last_event);
	w->last_event = ev;
	w->events++;
	pthread_create(&w->t, NULL, error_later, w);
}

static void test_listener_error(void **st)
{
	(void)st;
	struct fake_worker w = { 0 };
	w.srv = metadata_server_new();
	json_t *c = json_pack("{s:[s]}", "scopes", CLOUD);
	struct metadata_view v;
	char host[64], err[256];
	assert_int_equal(metadata_view_from_json(c, 0, &v, err, sizeof(err)), 0);
	json_decref(c);
	assert_int_equal(metadata_server_begin(w.srv, &v, on_event_error, &w, host, sizeof(host), err,
					       sizeof(err)), 0);
	struct got g;
	assert_int_equal(http_get(host, "/computeMetadata/v1/instance/service-accounts/default/token",
				  true, &g), 403);
	assert_non_null(strstr(g.body, "invalid_grant"));
	free(g.body);
	pthread_join(w.t, NULL);
	metadata_server_end(w.srv);
	json_decref(w.last_event);
	metadata_server_free(w.srv);
}

int main(void)
{
	http_global_init();
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_refusals),
		cmocka_unit_test(test_paths),
		cmocka_unit_test(test_recursive),
		cmocka_unit_test(test_token),
		cmocka_unit_test(test_identity),
		cmocka_unit_test(test_view_errors),
		cmocka_unit_test(test_scopes_key_and_cache),
		cmocka_unit_test(test_listener),
		cmocka_unit_test(test_listener_error),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
