/*
 * resources.c - the session's files in /app/persist and /app/out as MCP resources.
 *
 * worker/mcp.c answers resources/templates/list itself and queues resources/list and
 * resources/read for the call thread (worker/call.c), which calls resources_answer: they need
 * the session's sandbox, and wait behind a running tool call as tool calls do. Before the
 * session's first call there is no sandbox, and none is claimed for a list or a read: the list
 * is empty and a read says so. The agent (POST /files, agent/artifacts.c) does the reading and
 * the checking of paths; this side only maps URIs and JSON, and a read's bytes come raw and go
 * out as base64 without passing jansson (worker/splice.h). Read-only: there is no write path.
 *
 * URIs: sandbox:///app/persist/<path> and sandbox:///app/out/<path>, percent-encoded; a read
 * returns at most 1 MiB from ?offset=N (default 0), and _meta says where the next piece starts.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "policy/limits.h"
#include "worker/agent_client.h"
#include "worker/worker.h"

#define RES_PREFIX "sandbox:///app/"
#define RES_NOT_FOUND -32002 /* MCP's "resource not found" */
#define RES_PATH_MAX 1024

/* resources_templates - the two directories, as RFC 6570 templates */
json_t *resources_templates(void)
{
	return json_pack(
		"[{s:s, s:s, s:s, s:s}, {s:s, s:s, s:s, s:s}]",
		"uriTemplate", RES_PREFIX "persist/{+path}", "name", "persist", "title",
		"Session files (/app/persist)", "description",
		"Files the session's code wrote to /app/persist; they last for the session. Reads "
		"return at most 1 MiB; add ?offset=N for the next piece. Empty until the session's "
		"first execute_go_code call.",
		"uriTemplate", RES_PREFIX "out/{+path}", "name", "out", "title",
		"Artifacts of the last call (/app/out)", "description",
		"Files the last execute_go_code call wrote to /app/out; emptied by the next call. "
		"Reads return at most 1 MiB; add ?offset=N for the next piece.");
}

static json_t *res_error(json_t *id, int code, const char *msg)
{
	return mcp_error(id, code, msg);
}

static json_t *res_result(json_t *id, json_t *result)
{
	return json_pack("{s:s, s:O, s:o}", "jsonrpc", "2.0", "id", id, "result", result);
}

static int hexval(char c)
{
	return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
	       : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* res_parse_uri - sandbox:///app/<path>[?offset=N] into a decoded path; -EINVAL if not ours */
static int res_parse_uri(const char *uri, char *path, size_t cap, long long *offset)
{
	size_t pl = strlen(RES_PREFIX);
	*offset = 0;
	if (strncmp(uri, RES_PREFIX, pl) != 0)
		return -EINVAL;
	const char *p = uri + pl, *q = strchr(p, '?');
	const char *end = q ? q : p + strlen(p);
	size_t o = 0;
	for (; p < end; p++) {
		if (o + 1 >= cap)
			return -EINVAL;
		if (*p == '%') {
			int a = end - p >= 3 ? hexval(p[1]) : -1, b = end - p >= 3 ? hexval(p[2]) : -1;
			int h = a < 0 || b < 0 ? -1 : a * 16 + b;
			if (h <= 0) /* a NUL or a bad escape */
				return -EINVAL;
			path[o++] = (char)h;
			p += 2;
		} else {
			path[o++] = *p;
		}
	}
	path[o] = '\0';
	if (q) {
		char *e;
		if (strncmp(q, "?offset=", 8) != 0 || !q[8])
			return -EINVAL;
		*offset = strtoll(q + 8, &e, 10);
		if (*e || *offset < 0)
			return -EINVAL;
	}
	return 0;
}

/* res_agent - one POST /files; NULL with *resp set to the error response */
static json_t *res_agent(struct session *s, struct job *j, json_t *req, json_t **resp)
{
	struct agent_endpoint *ep;
	char err[512] = "";
	json_t *res = NULL;
	int r = sandbox_get(s, &ep, err, sizeof(err));
	if (r == 0)
		r = agent_client_files(ep, req, &res, err, sizeof(err));
	if (r != 0) {
		char msg[700];
		snprintf(msg, sizeof(msg), "the session's sandbox could not be asked for its files: %s",
			 err[0] ? err : "it failed");
		*resp = res_error(j->id, -32603, msg);
		return NULL;
	}
	const char *e = json_string_value(json_object_get(res, "error"));
	if (e) {
		*resp = res_error(j->id, RES_NOT_FOUND, e);
		json_decref(res);
		return NULL;
	}
	return res;
}

/* res_list - one page of both directories */
static json_t *res_list(struct session *s, struct job *j)
{
	if (!sandbox_have(s))
		return res_result(j->id, json_pack("{s:[]}", "resources"));
	json_t *req = json_pack("{s:s}", "op", "list");
	json_t *cursor = json_object_get(j->args, "cursor");
	if (cursor)
		json_object_set(req, "cursor", cursor);
	json_t *resp = NULL, *res = res_agent(s, j, req, &resp);
	json_decref(req);
	if (!res) {
		/* a cursor the agent does not know is the client's error */
		if (cursor && json_integer_value(json_object_get(json_object_get(resp, "error"),
								 "code")) == RES_NOT_FOUND) {
			json_decref(resp);
			return res_error(j->id, -32602, "Invalid params: the cursor is not one this "
					 "server handed out");
		}
		return resp;
	}
	json_t *out = json_array();
	size_t i;
	json_t *f;
	json_array_foreach(json_object_get(res, "files"), i, f) {
		json_t *r = json_pack("{s:O, s:O, s:O, s:O}", "uri", json_object_get(f, "uri"), "name",
				      json_object_get(f, "path"), "mimeType",
				      json_object_get(f, "media_type"), "size",
				      json_object_get(f, "size"));
		if (r)
			json_array_append_new(out, r);
	}
	json_t *result = json_pack("{s:o}", "resources", out);
	json_t *next = json_object_get(res, "next");
	if (json_is_string(next))
		json_object_set(result, "nextCursor", next);
	json_decref(res);
	return res_result(j->id, result);
}

/* res_read - one bounded read */
static json_t *res_read(struct session *s, struct job *j)
{
	const char *uri = json_string_value(json_object_get(j->args, "uri"));
	char path[RES_PATH_MAX];
	long long off = 0;
	if (!uri || res_parse_uri(uri, path, sizeof(path), &off) < 0 ||
	    (strncmp(path, "persist/", 8) != 0 && strncmp(path, "out/", 4) != 0))
		return res_error(j->id, RES_NOT_FOUND, "Resource not found: this server's resources are "
				 "sandbox:///app/persist/<path> and sandbox:///app/out/<path> "
				 "(optionally ?offset=N); resources/list names them");
	if (!sandbox_have(s))
		return res_error(j->id, RES_NOT_FOUND, "Resource not found: this session has run no "
				 "code yet, so it has no files; files appear after an execute_go_code "
				 "call writes them to /app/persist or /app/out");
	struct agent_endpoint *ep;
	char err[512] = "";
	json_t *res = NULL;
	unsigned char *bytes = NULL;
	size_t n = 0;
	int r = sandbox_get(s, &ep, err, sizeof(err));
	if (r == 0)
		r = agent_client_read(ep, path, off, ARTIFACTS_READ_BYTES, &res, &bytes, &n, err,
				      sizeof(err));
	if (r != 0) {
		char msg[700];
		snprintf(msg, sizeof(msg), "the session's sandbox could not be asked for its files: %s",
			 err[0] ? err : "it failed");
		return res_error(j->id, -32603, msg);
	}
	const char *e = json_string_value(json_object_get(res, "error"));
	if (e) {
		json_t *out = res_error(j->id, RES_NOT_FOUND, e);
		json_decref(res);
		return out;
	}
	/* the URI without the offset names the file; the piece's place is in _meta. The bytes
	 * go as text when the agent found the whole file to be UTF-8 text (and jansson agrees),
	 * else as base64 spliced in by mcp_reply, never a jansson string (worker/splice.h) */
	char base[sizeof(RES_PREFIX) + 3 * RES_PATH_MAX];
	snprintf(base, sizeof(base), "%.*s", (int)strcspn(uri, "?"), uri);
	json_t *c = json_pack("{s:s, s:O}", "uri", base, "mimeType", json_object_get(res, "media_type"));
	json_t *t = json_is_true(json_object_get(res, "text"))
			    ? json_stringn((const char *)bytes, n) : NULL;
	json_t *data = t ? t : splices_add_base64(&j->splices, bytes, n);
	free(bytes);
	if (!c || !data) {
		json_decref(c);
		json_decref(data);
		json_decref(res);
		return res_error(j->id, -32603, "out of memory");
	}
	json_object_set_new(c, t ? "text" : "blob", data);
	json_int_t size = json_integer_value(json_object_get(res, "size"));
	json_int_t len = (json_int_t)n;
	bool eof = json_is_true(json_object_get(res, "eof"));
	json_t *meta = json_pack("{s:I, s:I, s:I, s:b}", "kode-gopher/size", size,
				 "kode-gopher/offset", (json_int_t)off, "kode-gopher/length", len,
				 "kode-gopher/eof", eof);
	if (!eof) {
		char next[sizeof(base) + 32];
		snprintf(next, sizeof(next), "%s?offset=%lld", base, (long long)(off + len));
		json_object_set_new(meta, "kode-gopher/next", json_string(next));
	}
	json_decref(res);
	return res_result(j->id, json_pack("{s:[o], s:o}", "contents", c, "_meta", meta));
}

/* res_path_ok - a decoded path below persist/ or out/ with no empty, "." or ".." segment (the
 * agent checks again; this keeps nonsense out of the subscriptions) */
static bool res_path_ok(const char *p)
{
	if (strncmp(p, "persist/", 8) != 0 && strncmp(p, "out/", 4) != 0)
		return false;
	for (const char *seg = p;;) {
		size_t n = strcspn(seg, "/");
		if (n == 0 || (n == 1 && seg[0] == '.') || (n == 2 && seg[0] == '.' && seg[1] == '.'))
			return false;
		if (!seg[n])
			return true;
		seg += n + 1;
	}
}

/* resources_subscribe - see worker.h */
json_t *resources_subscribe(struct session *s, json_t *id, json_t *params, bool on)
{
	json_t *ju = json_object_get(params, "uri");
	const char *uri = json_string_value(ju);
	char path[RES_PATH_MAX];
	long long off = 0;
	if (!uri || json_string_length(ju) > 4096)
		return res_error(id, RPC_INVALID_PARAMS, on ? "resources/subscribe needs params.uri, such "
				 "as sandbox:///app/persist/rows.json" : "resources/unsubscribe needs "
				 "params.uri, as it was subscribed");
	if (res_parse_uri(uri, path, sizeof(path), &off) < 0 || strchr(uri, '?') ||
	    !res_path_ok(path))
		return res_error(id, RES_NOT_FOUND, "Resource not found: this server's resources are "
				 "sandbox:///app/persist/<path> and sandbox:///app/out/<path> (a "
				 "subscription names a whole file, without ?offset)");
	pthread_mutex_lock(&s->mu);
	if (!s->subscriptions)
		s->subscriptions = json_object();
	bool full = on && !json_object_get(s->subscriptions, path) &&
		    json_object_size(s->subscriptions) >= ARTIFACTS_WATCH_MAX;
	if (on && !full)
		json_object_set_new(s->subscriptions, path, json_string(uri));
	else if (!on)
		json_object_del(s->subscriptions, path);
	pthread_mutex_unlock(&s->mu);
	if (full) {
		char msg[200];
		snprintf(msg, sizeof(msg), "a session watches at most %d files: unsubscribe one first",
			 ARTIFACTS_WATCH_MAX);
		return res_error(id, RPC_INVALID_PARAMS, msg);
	}
	return res_result(id, json_object());
}

/* resources_watch - see worker.h */
json_t *resources_watch(struct session *s)
{
	json_t *paths = NULL;
	pthread_mutex_lock(&s->mu);
	if (json_object_size(s->subscriptions)) {
		paths = json_array();
		const char *path;
		json_t *uri;
		json_object_foreach(s->subscriptions, path, uri)
			json_array_append_new(paths, json_string(path));
	}
	pthread_mutex_unlock(&s->mu);
	return paths;
}

/* resources_updated - see worker.h */
void resources_updated(struct session *s, uint32_t rel, json_t *res)
{
	json_t *changed = json_object_get(res, "watch_changed");
	json_t *uris = json_array();
	size_t i;
	json_t *p;
	pthread_mutex_lock(&s->mu);
	/* only what this session watches, however long the agent's list */
	json_array_foreach(changed, i, p) {
		json_t *uri = json_is_string(p) ? json_object_get(s->subscriptions, json_string_value(p))
						: NULL;
		if (uri && json_array_size(uris) < ARTIFACTS_WATCH_MAX)
			json_array_append_new(uris, json_string(json_string_value(uri)));
	}
	pthread_mutex_unlock(&s->mu);
	json_array_foreach(uris, i, p)
		mcp_notify(s, rel, "notifications/resources/updated", json_pack("{s:O}", "uri", p));
	json_decref(uris);
	json_object_del(res, "watch_changed");
}

/* resources_answer - see worker.h */
json_t *resources_answer(struct session *s, struct job *j)
{
	if (strcmp(j->tool, "resources/read") == 0)
		return res_read(s, j);
	return res_list(s, j);
}
