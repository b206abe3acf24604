/*
 * mcp.c - JSON-RPC 2.0 and the MCP lifecycle, on untrusted bytes from the client.
 *
 * Called by worker/main.c for each REQ_MCP. Parsing happens here, in the worker, so that a
 * parser bug costs one session and not the server. Quick requests are answered at once; tool
 * calls are checked here and queued for the call thread (worker/call.c).
 */
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/rpcid.h"
#include "worker/worker.h"

static const char *const mcp_versions[] = { "2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05" };

static const char mcp_instructions[] =
	"kode-gopher runs Go code in a sandbox with the Google Cloud Go libraries precompiled. "
	"Use execute_go_code to run a snippet (any package but main declaring "
	"func run(ctx context.Context) (any, error); the value it returns comes back as JSON) or "
	"a full package main program. Files written to /app/persist survive across calls in this "
	"session; files written to /app/out come back with the result, and both directories are "
	"this session's resources (sandbox:///app/persist/..., sandbox:///app/out/...). Sending "
	"_test.go files runs go test. Use lookup_package_docs to read `go doc` output for a package or symbol before "
	"guessing an API.";

/* mcp_result - a JSON-RPC success response (steals result) */
static json_t *mcp_result(json_t *id, json_t *result)
{
	return json_pack("{s:s, s:O, s:o}", "jsonrpc", "2.0", "id", id, "result", result);
}

/* on_initialize - version negotiation and capabilities */
static json_t *on_initialize(struct session *s, json_t *id, json_t *params, const char *raw,
			     size_t rawlen, bool replay)
{
	pthread_mutex_lock(&s->mu);
	bool again = s->state != WS_BEFORE_INIT;
	pthread_mutex_unlock(&s->mu);
	if (again)
		return mcp_error(id, RPC_INVALID_REQUEST, "the session is already initialized");
	const char *asked = NULL, *client = NULL;
	if (!json_is_object(params) ||
	    json_unpack(params, "{s:s, s?{s?s}}", "protocolVersion", &asked, "clientInfo", "name", &client) != 0)
		return mcp_error(id, RPC_INVALID_PARAMS,
				 "initialize needs params.protocolVersion (a string) and params.clientInfo");
	const char *version = mcp_versions[0];
	for (size_t i = 0; i < sizeof(mcp_versions) / sizeof(mcp_versions[0]); i++)
		if (strcmp(asked, mcp_versions[i]) == 0)
			version = mcp_versions[i];
	pthread_mutex_lock(&s->mu);
	snprintf(s->protocol, sizeof(s->protocol), "%s", version);
	snprintf(s->client_name, sizeof(s->client_name), "%s", client ? client : "?");
	session_set_state(s, WS_READY);
	pthread_mutex_unlock(&s->mu);
	log_info("session %.8s… initialized: client \"%s\", protocol %s%s", s->id,
		 client ? client : "?", version, replay ? " (replayed after a restart)" : "");
	if (!replay) {
		struct ipc_buf b;
		if (ipc_pack_note_session(&b, session_next_seq(s), raw, rawlen, version) == 0)
			session_send(s, &b);
	}
	/* resources: the session's files (worker/resources.c); every backend's agent serves them */
	return mcp_result(id, json_pack("{s:s, s:{s:{s:b}, s:{}, s:{s:b, s:b}}, s:{s:s, s:s, s:s}, s:s}",
					"protocolVersion", version,
					"capabilities", "tools", "listChanged", 0, "logging",
					"resources", "listChanged", 1, "subscribe", 1,
					"serverInfo", "name", "kode-gopher", "title", "kode-gopher: run Go code",
					"version", KG_VERSION,
					"instructions", mcp_instructions));
}

/* on_set_level - logging/setLevel */
static json_t *on_set_level(struct session *s, json_t *id, json_t *params)
{
	const char *level = NULL;
	json_unpack(params, "{s:s}", "level", &level);
	for (int i = 0; level && i < MCP_LOG_LEVELS; i++)
		if (strcmp(level, mcp_log_levels[i]) == 0) {
			pthread_mutex_lock(&s->mu);
			s->mcp_log_level = i;
			pthread_mutex_unlock(&s->mu);
			return mcp_result(id, json_object());
		}
	return mcp_error(id, RPC_INVALID_PARAMS,
			 "logging/setLevel needs params.level: one of debug, info, notice, warning, "
			 "error, critical, alert, emergency");
}

/* queue_full - would one more call of len bytes pass the session's queue limits? (a sentence) */
static const char *queue_full(struct session *s, size_t len, char *buf, size_t cap)
{
	int n = 0;
	size_t bytes = 0;
	pthread_mutex_lock(&s->mu);
	for (struct job *q = s->queue; q; q = q->next) {
		n++;
		bytes += q->bytes;
	}
	pthread_mutex_unlock(&s->mu);
	if (n < WORKER_MAX_QUEUED_CALLS && bytes + len <= WORKER_MAX_QUEUED_BYTES)
		return NULL;
	snprintf(buf, cap, "Too many tool calls waiting in this session: %d are queued behind the "
		 "running one (%zu KiB; the limits are %d calls and %u MiB). Calls in a session run "
		 "one at a time: wait for their results, or cancel some, before sending more.",
		 n, bytes >> 10, WORKER_MAX_QUEUED_CALLS, WORKER_MAX_QUEUED_BYTES >> 20);
	return buf;
}

/* on_tools_call - check, then queue for the call thread; the answer comes from there */
static json_t *on_tools_call(struct session *s, uint32_t seq, json_t *id, json_t *params,
			     size_t rawlen, struct mcp_batch *batch)
{
	const char *name = NULL;
	json_t *args = NULL, *meta = NULL;
	if (!json_is_object(params) || json_unpack(params, "{s:s, s?o, s?o}", "name", &name, "arguments",
						   &args, "_meta", &meta) != 0)
		return mcp_error(id, RPC_INVALID_PARAMS, "tools/call needs params.name (a string)");
	if (!tools_known(name)) {
		char msg[200];
		snprintf(msg, sizeof(msg), "Unknown tool: %.80s (this server has execute_go_code and "
			 "lookup_package_docs)", name);
		return mcp_error(id, RPC_INVALID_PARAMS, msg);
	}
	char why[512];
	const char *bad = tools_check_args(name, args, s->max_timeout_s, why, sizeof(why));
	if (bad)
		return mcp_result(id, tools_error_result(name, "invalid_arguments", bad, args));
	char full[400];
	if (queue_full(s, rawlen, full, sizeof(full)))
		return mcp_error(id, RPC_SERVER_ERROR, full);
	struct job *j = calloc(1, sizeof(*j));
	if (!j)
		return mcp_error(id, RPC_INTERNAL_ERROR, "out of memory");
	j->seq = seq;
	j->id = json_incref(id);
	snprintf(j->tool, sizeof(j->tool), "%s", name);
	j->args = args ? json_incref(args) : json_object();
	j->bytes = rawlen;
	if ((j->batch = batch)) {
		pthread_mutex_lock(&s->mu);
		batch->waiting++;
		pthread_mutex_unlock(&s->mu);
	}
	json_t *tok = json_is_object(meta) ? json_object_get(meta, "progressToken") : NULL;
	if (json_is_string(tok) || json_is_integer(tok))
		j->progress_token = json_incref(tok);
	/* tell the master the id now, so a crash mid-call can still be answered */
	char *idtext = json_dumps(id, JSON_ENCODE_ANY | JSON_COMPACT);
	struct ipc_buf b;
	if (idtext && ipc_pack_note_accepted(&b, seq, idtext, strlen(idtext)) == 0)
		session_send(s, &b);
	free(idtext);
	call_enqueue(s, j);
	return NULL;
}

/* on_resources - resources/list and resources/read need the sandbox: they queue behind the
 * running call on the call thread, which answers them (worker/resources.c) */
static json_t *on_resources(struct session *s, uint32_t seq, json_t *id, const char *method,
			    json_t *params, size_t rawlen, struct mcp_batch *batch)
{
	bool read = strcmp(method, "resources/read") == 0;
	json_t *uri = json_object_get(params, "uri"), *cursor = json_object_get(params, "cursor");
	if (read && (!json_is_string(uri) || json_string_length(uri) > 4096))
		return mcp_error(id, RPC_INVALID_PARAMS, "resources/read needs params.uri, such as "
				 "sandbox:///app/persist/rows.json (resources/list names them)");
	if (!read && cursor && (!json_is_string(cursor) || json_string_length(cursor) > 32))
		return mcp_error(id, RPC_INVALID_PARAMS, "Invalid params: the cursor is not one this "
				 "server handed out");
	char full[400];
	if (queue_full(s, rawlen, full, sizeof(full)))
		return mcp_error(id, RPC_SERVER_ERROR, full);
	struct job *j = calloc(1, sizeof(*j));
	if (!j)
		return mcp_error(id, RPC_INTERNAL_ERROR, "out of memory");
	j->seq = seq;
	j->id = json_incref(id);
	j->resource = true;
	snprintf(j->tool, sizeof(j->tool), "%s", method);
	j->args = json_is_object(params) ? json_incref(params) : json_object();
	j->bytes = rawlen;
	if ((j->batch = batch)) {
		pthread_mutex_lock(&s->mu);
		batch->waiting++;
		pthread_mutex_unlock(&s->mu);
	}
	call_enqueue(s, j);
	return NULL;
}

/* mcp_dispatch_request - a request with a valid id; NULL means "answered later" */
static json_t *mcp_dispatch_request(struct session *s, uint32_t seq, json_t *id, const char *method,
				    json_t *params, const char *raw, size_t rawlen, bool replay,
				    struct mcp_batch *batch)
{
	if (strcmp(method, "initialize") == 0)
		return on_initialize(s, id, params, raw, rawlen, replay);
	if (strcmp(method, "ping") == 0)
		return mcp_result(id, json_object());
	pthread_mutex_lock(&s->mu);
	bool before = s->state == WS_BEFORE_INIT;
	pthread_mutex_unlock(&s->mu);
	if (before)
		return mcp_error(id, RPC_SERVER_ERROR,
				 "Bad Request: the session is not initialized: send initialize first "
				 "(over HTTP without an Mcp-Session-Id header; then send the "
				 "Mcp-Session-Id it returns with every request)");
	if (strcmp(method, "tools/list") == 0) {
		/* every tool is on the one page: no cursor this server handed out can come back */
		if (json_object_get(params, "cursor"))
			return mcp_error(id, RPC_INVALID_PARAMS,
					 "Invalid params: unknown cursor. tools/list returns every tool on "
					 "one page (no nextCursor); call it without params.cursor");
		return mcp_result(id, json_pack("{s:o}", "tools", tools_list(s->max_timeout_s)));
	}
	if (strcmp(method, "tools/call") == 0)
		return on_tools_call(s, seq, id, params, rawlen, batch);
	if (strcmp(method, "resources/templates/list") == 0) {
		if (json_object_get(params, "cursor"))
			return mcp_error(id, RPC_INVALID_PARAMS,
					 "Invalid params: unknown cursor. resources/templates/list returns "
					 "both templates on one page; call it without params.cursor");
		return mcp_result(id, json_pack("{s:o}", "resourceTemplates", resources_templates()));
	}
	if (strcmp(method, "resources/list") == 0 || strcmp(method, "resources/read") == 0)
		return on_resources(s, seq, id, method, params, rawlen, batch);
	if (strcmp(method, "resources/subscribe") == 0 || strcmp(method, "resources/unsubscribe") == 0)
		return resources_subscribe(s, id, params, strcmp(method, "resources/subscribe") == 0);
	if (strcmp(method, "logging/setLevel") == 0)
		return on_set_level(s, id, params);
	char msg[160];
	snprintf(msg, sizeof(msg), "Method not found: %.100s", method);
	return mcp_error(id, RPC_METHOD_NOT_FOUND, msg);
}

/* mcp_notification - a client notification: never answered */
static void mcp_notification(struct session *s, const char *method, json_t *params)
{
	if (strcmp(method, "notifications/cancelled") == 0) {
		json_t *rid = json_is_object(params) ? json_object_get(params, "requestId") : NULL;
		if (rid)
			call_cancel(s, rid);
	} else if (strcmp(method, "notifications/initialized") == 0) {
		log_debug("client confirmed initialization");
	} else {
		log_debug("ignoring notification %.80s", method);
	}
}

/* handle_one - one parsed message (alone, or an element of a batch); returns the response,
 * or NULL with *later set when the call thread answers it, or NULL for no response at all */
static json_t *handle_one(struct session *s, uint32_t seq, json_t *root, const char *msg, size_t len,
			  bool replay, struct mcp_batch *batch, bool *later)
{
	json_t *id = json_is_object(root) ? json_object_get(root, "id") : NULL;
	json_t *jv = json_is_object(root) ? json_object_get(root, "jsonrpc") : NULL;
	json_t *jm = json_is_object(root) ? json_object_get(root, "method") : NULL;
	json_t *params = json_is_object(root) ? json_object_get(root, "params") : NULL;
	json_t *reply = NULL;
	*later = false;
	bool valid = json_is_object(root) && json_is_string(jv) && strcmp(json_string_value(jv), "2.0") == 0;
	if (valid && !jm && id && (json_object_get(root, "result") || json_object_get(root, "error"))) {
		/* a response from the client: we never send requests, so there is nothing to match */
		log_debug("ignoring a response from the client");
	} else if (!valid || !json_is_string(jm) || (id && !rpcid_valid(id)) ||
		   (params && !json_is_object(params) && !json_is_array(params))) {
		reply = mcp_error(id && rpcid_valid(id) ? id : NULL, RPC_INVALID_REQUEST,
				  "Invalid Request: expected a JSON-RPC 2.0 object with \"jsonrpc\": \"2.0\", a "
				  "string \"method\", an optional object \"params\", and a string or integer "
				  "\"id\" for requests");
	} else if (!id) {
		mcp_notification(s, json_string_value(jm), params);
	} else {
		reply = mcp_dispatch_request(s, seq, id, json_string_value(jm), params, msg, len, replay, batch);
		*later = !reply && (strcmp(json_string_value(jm), "tools/call") == 0 ||
				    strcmp(json_string_value(jm), "resources/list") == 0 ||
				    strcmp(json_string_value(jm), "resources/read") == 0);
	}
	return reply;
}

/* handle_batch - a JSON-RPC batch: 2025-03-26 sessions must accept them (the revisions before
 * and after have none); the answer is one array once every request in it is answered */
static void handle_batch(struct session *s, uint32_t seq, json_t *root)
{
	pthread_mutex_lock(&s->mu);
	bool batches = strcmp(s->protocol, "2025-03-26") == 0;
	pthread_mutex_unlock(&s->mu);
	if (!batches || json_array_size(root) == 0) {
		mcp_reply(s, seq, mcp_error(NULL, RPC_INVALID_REQUEST, batches
			? "Invalid Request: an empty batch"
			: "Invalid Request: JSON-RPC batches are part of protocol 2025-03-26 only; with "
			  "this session's protocol send one message at a time"));
		return;
	}
	struct mcp_batch *b = calloc(1, sizeof(*b));
	if (!b || !(b->responses = json_array())) {
		free(b);
		mcp_reply(s, seq, mcp_error(NULL, RPC_INTERNAL_ERROR, "out of memory"));
		return;
	}
	b->seq = seq;
	size_t k;
	json_t *el;
	json_array_foreach(root, k, el) {
		bool later;
		char *raw = json_dumps(el, JSON_COMPACT);
		size_t rawlen = raw ? strlen(raw) : 0;
		/* initialize cannot be in a batch: batches exist only once the session speaks 2025-03-26 */
		json_t *r = handle_one(s, seq, el, raw, rawlen, false, b, &later);
		free(raw);
		if (r) {
			pthread_mutex_lock(&s->mu);
			json_array_append_new(b->responses, r);
			pthread_mutex_unlock(&s->mu);
		}
	}
	pthread_mutex_lock(&s->mu);
	b->dispatched = true;
	bool last = b->waiting == 0;
	pthread_mutex_unlock(&s->mu);
	if (last)
		mcp_batch_send(s, b);
}

/* mcp_handle - one client message, start to finish */
void mcp_handle(struct session *s, uint32_t seq, const char *msg, size_t len, bool replay)
{
	json_error_t jerr;
	/* any JSON value parses: a bare 42 is valid JSON but not JSON-RPC (-32600, not -32700) */
	json_t *root = json_loadb(msg, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &jerr);
	if (!root) {
		char m[300];
		snprintf(m, sizeof(m), "Parse error: the message is not valid JSON (%s at line %d, column %d)",
			 jerr.text, jerr.line, jerr.column);
		mcp_reply(s, seq, mcp_error(NULL, RPC_PARSE_ERROR, m));
		return;
	}
	if (json_is_array(root)) {
		handle_batch(s, seq, root);
		json_decref(root);
		return;
	}
	bool later;
	json_t *reply = handle_one(s, seq, root, msg, len, replay, NULL, &later);
	if (!later)
		mcp_reply(s, seq, reply);
	json_decref(root);
}


/* mcp_handle_toobig - answer a dropped message with an error that says what to do */
void mcp_handle_toobig(struct session *s, uint32_t seq, const struct ipc_toobig *t)
{
	json_t *id = rpcid_scan(t->head.ptr, t->head.len, t->tail.ptr, t->tail.len);
	char msg[300];
	snprintf(msg, sizeof(msg),
		 "Invalid Request: the message is %llu bytes; the limit is %u bytes (%u MiB). Send "
		 "smaller files, or fewer of them per call.",
		 (unsigned long long)t->size, MCP_MAX_MESSAGE, MCP_MAX_MESSAGE >> 20);
	json_t *err = mcp_error(id, RPC_INVALID_REQUEST, msg);
	json_decref(id);
	mcp_reply(s, seq, err);
}
