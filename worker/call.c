/*
 * call.c - the call thread: runs the session's tool calls one at a time, in order.
 *
 * mcp.c queues a checked tools/call here; this thread takes it to the sandbox's agent, turns
 * progress into notifications/progress when the client asked for it, retries once in a fresh
 * sandbox if the sandbox died mid-call, and answers the request.
 *
 * An execute request carries the session's credentials (worker/creds.c). While the program
 * runs, the sandbox's metadata emulator may ask for more tokens through token_request events
 * on the execute stream; this thread is busy reading that stream, so the minter thread mints
 * them and POSTs each answer to the agent's /token.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <openssl/crypto.h>

#include "lib/mono.h"
#include "worker/agent_client.h"
#include "worker/creds.h"
#include "worker/worker.h"

static pthread_t call_tid, mint_tid;

/* The token requests of the running call, and where its agent listens. */
struct mint_item {
	json_t *event;
	struct mint_item *next;
};
static struct {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct mint_item *head, *tail;
	bool active;                  /* an execute is running: ep is valid */
	struct agent_endpoint ep;     /* a copy, strings in the buffers below */
	char unix_path[600], base_url[300];
} minter = { .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER };

/* minter_begin - the execute on ep starts: token requests may come */
static void minter_begin(const struct agent_endpoint *ep)
{
	pthread_mutex_lock(&minter.mu);
	minter.ep = *ep;
	snprintf(minter.unix_path, sizeof(minter.unix_path), "%s", ep->unix_path ? ep->unix_path : "");
	snprintf(minter.base_url, sizeof(minter.base_url), "%s", ep->base_url ? ep->base_url : "");
	minter.ep.unix_path = ep->unix_path ? minter.unix_path : NULL;
	minter.ep.base_url = ep->base_url ? minter.base_url : NULL;
	minter.active = true;
	pthread_mutex_unlock(&minter.mu);
}

/* minter_end - the execute is over: requests not yet answered are for nobody */
static void minter_end(void)
{
	pthread_mutex_lock(&minter.mu);
	minter.active = false;
	OPENSSL_cleanse(minter.ep.secret, sizeof(minter.ep.secret));
	while (minter.head) {
		struct mint_item *it = minter.head;
		minter.head = it->next;
		json_decref(it->event);
		free(it);
	}
	minter.tail = NULL;
	pthread_mutex_unlock(&minter.mu);
}

/* call_token_event - the execute stream carried a token_request: queue it for the minter */
static void call_token_event(void *ctx, json_t *event)
{
	(void)ctx;
	struct mint_item *it = calloc(1, sizeof(*it));
	/* a copy: the minter thread must not share reference counts with this one */
	if (!it || !(it->event = json_deep_copy(event))) {
		free(it);
		return;
	}
	pthread_mutex_lock(&minter.mu);
	if (minter.tail)
		minter.tail->next = it;
	else
		minter.head = it;
	minter.tail = it;
	pthread_cond_signal(&minter.cv);
	pthread_mutex_unlock(&minter.mu);
}

/* mint_thread - answer token requests one at a time */
static void *mint_thread(void *arg)
{
	struct session *s = arg;
	for (;;) {
		pthread_mutex_lock(&minter.mu);
		while (!minter.head)
			pthread_cond_wait(&minter.cv, &minter.mu);
		struct mint_item *it = minter.head;
		minter.head = it->next;
		if (!minter.head)
			minter.tail = NULL;
		pthread_mutex_unlock(&minter.mu);

		json_t *answer = s->creds ? creds_answer(s->creds, it->event) : NULL;
		pthread_mutex_lock(&minter.mu);
		struct agent_endpoint ep = minter.ep;
		char unix_path[sizeof(minter.unix_path)], base_url[sizeof(minter.base_url)];
		memcpy(unix_path, minter.unix_path, sizeof(unix_path));
		memcpy(base_url, minter.base_url, sizeof(base_url));
		bool active = minter.active;
		pthread_mutex_unlock(&minter.mu);
		ep.unix_path = ep.unix_path ? unix_path : NULL;
		ep.base_url = ep.base_url ? base_url : NULL;
		if (answer && active) {
			char err[512];
			int r = agent_client_token(&ep, answer, err, sizeof(err));
			if (r < 0)
				log_debug("the token answer did not reach the sandbox: %s", err);
		}
		OPENSSL_cleanse(ep.secret, sizeof(ep.secret));
		creds_wipe(answer);
		json_decref(answer);
		json_decref(it->event);
		free(it);
	}
	return NULL;
}

void job_free(struct job *j)
{
	if (!j)
		return;
	json_decref(j->id);
	json_decref(j->args);
	json_decref(j->progress_token);
	free(j);
}

/* call_enqueue - main thread: a checked call joins the queue */
void call_enqueue(struct session *s, struct job *j)
{
	pthread_mutex_lock(&s->mu);
	if (s->queue_tail)
		s->queue_tail->next = j;
	else
		s->queue = j;
	s->queue_tail = j;
	pthread_cond_broadcast(&s->cv);
	pthread_mutex_unlock(&s->mu);
}

/* call_cancel - notifications/cancelled: stop the running call or drop a queued one */
void call_cancel(struct session *s, json_t *request_id)
{
	struct job *dropped = NULL;
	pthread_mutex_lock(&s->mu);
	if (s->running && json_equal(s->running->id, request_id)) {
		s->running->cancel = 1;
		log_info("cancelling the running call");
	} else {
		for (struct job **pp = &s->queue; *pp; pp = &(*pp)->next)
			if (json_equal((*pp)->id, request_id)) {
				dropped = *pp;
				*pp = dropped->next;
				if (s->queue_tail == dropped) {
					s->queue_tail = NULL;
					for (struct job *q = s->queue; q; q = q->next)
						s->queue_tail = q;
				}
				break;
			}
	}
	pthread_mutex_unlock(&s->mu);
	if (dropped) {
		mcp_answer_job(s, dropped, NULL); /* a cancelled request gets no response */
		job_free(dropped);
	}
}

/* call_progress - agent progress becomes notifications/progress */
static void call_progress(void *ctx, const char *phase, const char *message)
{
	void **c = ctx;
	struct session *s = c[0];
	struct job *j = c[1];
	if (!j->progress_token)
		return;
	char text[300];
	snprintf(text, sizeof(text), "%s: %s", phase, message ? message : "");
	mcp_notify(s, j->seq, "notifications/progress",
		   json_pack("{s:O, s:i, s:s}", "progressToken", j->progress_token, "progress",
			     ++j->progress, "message", text));
}

/* artifact_payload - the bytes an embedded artifact carries (base64 data or text) */
static size_t artifact_payload(json_t *a)
{
	json_t *d = json_object_get(a, "data"), *t = json_object_get(a, "text");
	return json_string_length(d) + json_string_length(t);
}

/* artifact_block - the content block for one artifact: an image, an embedded resource (text or
 * blob), or a link to the resource when it is not embedded */
static json_t *artifact_block(json_t *a)
{
	json_t *uri = json_object_get(a, "uri"), *mt = json_object_get(a, "media_type");
	json_t *d = json_object_get(a, "data"), *t = json_object_get(a, "text");
	const char *mts = json_string_value(mt);
	if (!json_is_string(uri))
		return NULL;
	if (!json_is_true(json_object_get(a, "embedded")) || (!d && !t)) {
		if (!mts)
			return NULL; /* a link, FIFO or the like: listed, nothing to link to */
		return json_pack("{s:s, s:O, s:O, s:O, s:O}", "type", "resource_link", "uri", uri,
				 "name", json_object_get(a, "name"), "mimeType", mt, "size",
				 json_object_get(a, "size"));
	}
	if (d && mts && strncmp(mts, "image/", 6) == 0)
		return json_pack("{s:s, s:O, s:O}", "type", "image", "data", d, "mimeType", mt);
	if (t)
		return json_pack("{s:s, s:{s:O, s:O, s:O}}", "type", "resource", "resource", "uri",
				 uri, "mimeType", mt, "text", t);
	return json_pack("{s:s, s:{s:O, s:O, s:O}}", "type", "resource", "resource", "uri", uri,
			 "mimeType", mt, "blob", d);
}

/* tool_result - wrap structured content as an MCP CallToolResult (steals sc): the JSON as text,
 * then one block per artifact; the artifacts' bytes leave structuredContent (they are in the
 * blocks), and embedded ones that would push the response past the message limit become links */
static json_t *tool_result(json_t *sc, bool is_error)
{
	json_t *arts = json_object_get(sc, "artifacts");
	json_t *blocks = json_array();
	size_t i;
	json_t *a;
	if (json_is_array(arts)) {
		/* the structured part appears twice (text and structuredContent); its big strings
		 * are stdout and stderr, the rest is small. Estimated, not dumped: a dump of a
		 * result with a MiB of artifacts costs tens of ms. */
		size_t payload = 0;
		size_t rest = 64 * 1024 + json_string_length(json_object_get(sc, "stdout")) +
			      json_string_length(json_object_get(sc, "stderr"));
		json_array_foreach(arts, i, a)
			payload += artifact_payload(a);
		size_t limit = MCP_MAX_MESSAGE - 64 * 1024;
		while (payload + 2 * rest > limit) {
			json_t *big = NULL;
			size_t bigsz = 0;
			json_array_foreach(arts, i, a) {
				if (artifact_payload(a) > bigsz) {
					bigsz = artifact_payload(a);
					big = a;
				}
			}
			if (!big)
				break;
			json_object_del(big, "data");
			json_object_del(big, "text");
			json_object_set_new(big, "embedded", json_false());
			json_object_set_new(big, "note", json_string(
				"not embedded: with it the response would pass the 4 MiB message "
				"limit (stdout and stderr count too); read it with resources/read"));
			payload -= bigsz;
		}
		json_array_foreach(arts, i, a) {
			json_t *b = artifact_block(a);
			if (b)
				json_array_append_new(blocks, b);
			json_object_del(a, "data");
			json_object_del(a, "text");
		}
	}
	char *text = json_dumps(sc, JSON_COMPACT | JSON_ENSURE_ASCII);
	json_t *r = json_pack("{s:[{s:s, s:s}], s:o, s:b}", "content", "type", "text", "text",
			      text ? text : "{}", "structuredContent", sc, "isError", is_error);
	json_array_extend(json_object_get(r, "content"), blocks);
	json_decref(blocks);
	free(text);
	return r;
}

/* result_is_error - the model has something to fix unless the run (or the tests) went fine */
static bool result_is_error(json_t *res)
{
	const char *phase = json_string_value(json_object_get(res, "phase"));
	const char *kind = json_string_value(json_object_get(json_object_get(res, "result"), "kind"));
	return !phase || (strcmp(phase, "run") != 0 && strcmp(phase, "test") != 0) || !kind ||
	       strcmp(kind, "ok") != 0;
}

/* files_changed - the agent's digest of the session's files: tell the client when it moved */
static void files_changed(struct session *s, struct job *j, json_t *res)
{
	const char *d = json_string_value(json_object_get(res, "resources_digest"));
	if (d && strcmp(d, s->files_digest) != 0) {
		snprintf(s->files_digest, sizeof(s->files_digest), "%s", d);
		mcp_notify(s, j->seq, "notifications/resources/list_changed", json_object());
	}
	json_object_del(res, "resources_digest");
}

/* call_once - one request to the agent; waits out a cancelled call that is still finishing */
static int call_once(struct agent_endpoint *ep, struct job *j, json_t *req, bool doc, void *ctx,
		     json_t **res, char *err, size_t errlen)
{
	for (int tries = 0;; tries++) {
		int r;
		if (doc) {
			r = agent_client_doc(ep, req, res, err, errlen);
		} else {
			minter_begin(ep);
			r = agent_client_execute_ev(ep, req, call_progress, ctx, call_token_event, NULL,
						    &j->cancel, res, err, errlen);
			minter_end();
		}
		if (r != -EBUSY || tries == 1 || agent_client_wait_idle(ep, 120000, err, errlen) != 0)
			return r;
	}
}

/* call_agent - one tool call against the sandbox, retried once in a fresh one if it died */
static json_t *call_agent(struct session *s, struct job *j, json_t *req, bool doc)
{
	struct agent_endpoint *ep;
	char err[512] = "";
	json_t *res = NULL;
	void *ctx[2] = { s, j };
	bool retried = false;
	struct timespec t0;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	int r = sandbox_get(s, &ep, err, sizeof(err));
	/* the first call of a session claims the (warm) sandbox: what that cost */
	long claim_ms = mono_since_ms(&t0);
	for (int attempt = 0; r == 0; attempt++) {
		r = call_once(ep, j, req, doc, ctx, &res, err, sizeof(err));
		if (r == 0 || !sandbox_lost(r) || attempt == 1 || j->cancel)
			break;
		log_warn("sandbox %s died mid-call (%s); retrying once in a fresh sandbox", sandbox_name(s), err);
		mcp_log(s, "warning", "the sandbox died mid-call; retrying once in a fresh one");
		retried = true;
		/* the fresh sandbox is claimed too, and the call waited for it */
		clock_gettime(CLOCK_MONOTONIC, &t0);
		r = sandbox_replace(s, &ep, err, sizeof(err));
		claim_ms += mono_since_ms(&t0);
	}
	if (r == -ECANCELED || j->cancel)
		return NULL;
	if (r != 0) {
		char msg[900];
		if (retried && sandbox_lost(r))
			snprintf(msg, sizeof(msg), "the sandbox died during this call, and again when the "
				 "call was retried in a fresh sandbox: the code itself probably brings the "
				 "sandbox down (by killing processes, or exhausting a resource outside its "
				 "limits); change it rather than retrying. Detail: %s", err);
		else
			snprintf(msg, sizeof(msg), "%s%s", err[0] ? err : "the sandbox failed",
				 retried ? " (after one retry in a fresh sandbox)" : "");
		return tools_error_result(j->tool, r == -EDQUOT ? "sandbox_limit" : "internal_error", msg,
					  j->args);
	}
	if (doc) {
		if (!json_is_true(json_object_get(res, "ok"))) {
			const char *e = json_string_value(json_object_get(res, "error"));
			json_t *out = tools_error_result(j->tool, "internal_error", e ? e : "go doc failed",
							 j->args);
			json_decref(res);
			return out;
		}
		json_t *sc = json_pack("{s:O, s:s, s:O, s:b}", "package", json_object_get(req, "package"),
				       "symbol", json_string_value(json_object_get(req, "symbol")) ?: "",
				       "text", json_object_get(res, "text"), "truncated",
				       json_is_true(json_object_get(res, "truncated")));
		const char *text = json_string_value(json_object_get(res, "text"));
		json_t *out = json_pack("{s:[{s:s, s:s}], s:o, s:b}", "content", "type", "text", "text",
					text ? text : "", "structuredContent", sc, "isError", 0);
		json_decref(res);
		return out;
	}
	files_changed(s, j, res);
	json_t *timings = json_object_get(res, "timings");
	if (json_is_object(timings))
		json_object_set_new(timings, "claim_ms", json_integer(claim_ms));
	json_object_set_new(res, "retried", json_boolean(retried));
	json_object_set_new(res, "sandbox", json_string(sandbox_name(s)));
	return tool_result(res, result_is_error(res));
}

/* call_run - turn a tool call's arguments into the agent's request */
static json_t *call_run(struct session *s, struct job *j)
{
	if (strcmp(j->tool, "lookup_package_docs") == 0) {
		json_t *req = json_pack("{s:O}", "package", json_object_get(j->args, "package"));
		if (json_object_get(j->args, "symbol"))
			json_object_set(req, "symbol", json_object_get(j->args, "symbol"));
		json_t *out = call_agent(s, j, req, true);
		json_decref(req);
		return out;
	}
	json_t *files = json_object_get(j->args, "files");
	json_t *code = json_object_get(j->args, "code");
	json_t *tmo = json_object_get(j->args, "timeout_seconds");
	long long secs = tmo ? json_integer_value(tmo) : s->default_timeout_s;
	json_t *req = json_pack("{s:O, s:I}", "files",
				files ? files : json_pack("[{s:s, s:O}]", "path", "main.go", "content", code),
				"timeout_ms", secs * 1000);
	if (!files)
		json_decref(json_object_get(req, "files")); /* the pack above took its own reference */
	if (json_object_get(j->args, "mode"))
		json_object_set(req, "mode", json_object_get(j->args, "mode"));
	if (json_object_get(j->args, "test"))
		json_object_set(req, "test", json_object_get(j->args, "test"));
	json_t *creds = s->creds ? creds_for_call(s->creds) : NULL;
	if (creds)
		json_object_set_new(req, "credentials", creds);
	json_t *out = call_agent(s, j, req, false);
	creds_wipe(json_object_get(req, "credentials"));
	json_decref(req);
	return out;
}

/* call_account - tell the master what the call cost, for /metrics and the accounting log */
static void call_account(struct session *s, struct job *j, json_t *resp)
{
	json_t *sc = json_object_get(resp, "structuredContent");
	json_t *t = json_object_get(sc, "timings");
	const char *kind = json_string_value(json_object_get(json_object_get(sc, "result"), "kind"));
	if (!kind)
		kind = !resp ? "cancelled" : json_is_true(json_object_get(resp, "isError")) ? "tool_error" : "ok";
	struct ipc_call c = {
		.build_ms = (uint64_t)json_integer_value(json_object_get(sc, "build_ms")),
		.run_ms = (uint64_t)json_integer_value(json_object_get(sc, "duration_ms")),
		.cpu_user_ms = (uint64_t)json_integer_value(json_object_get(t, "cpu_user_ms")),
		.cpu_sys_ms = (uint64_t)json_integer_value(json_object_get(t, "cpu_sys_ms")),
		.max_rss_kb = (uint64_t)json_integer_value(json_object_get(t, "max_rss_kb")),
	};
	char *in = json_dumps(j->args, JSON_COMPACT), *out = resp ? json_dumps(resp, JSON_COMPACT) : NULL;
	c.bytes_in = in ? strlen(in) : 0;
	c.bytes_out = out ? strlen(out) : 0;
	free(in);
	free(out);
	c.tool = (struct ipc_bytes){ j->tool, strlen(j->tool) };
	c.kind = (struct ipc_bytes){ kind, strlen(kind) < 64 ? strlen(kind) : 64 };
	struct ipc_buf b;
	if (ipc_pack(&b, IPC_NOTE_CALL, session_next_seq(s), &c) == 0)
		session_send(s, &b);
}

/* call_thread - take jobs in order, one at a time */
static void *call_thread(void *arg)
{
	struct session *s = arg;
	for (;;) {
		pthread_mutex_lock(&s->mu);
		while (!s->queue && s->state != WS_CLOSING)
			pthread_cond_wait(&s->cv, &s->mu);
		if (s->state == WS_CLOSING) {
			pthread_mutex_unlock(&s->mu);
			return NULL;
		}
		struct job *j = s->queue;
		s->queue = j->next;
		if (!s->queue)
			s->queue_tail = NULL;
		s->running = j;
		session_set_state(s, WS_BUSY);
		pthread_mutex_unlock(&s->mu);

		if (j->resource) {
			json_t *msg = resources_answer(s, j);
			pthread_mutex_lock(&s->mu);
			s->running = NULL;
			if (!s->queue && s->state == WS_BUSY)
				session_set_state(s, WS_READY);
			pthread_mutex_unlock(&s->mu);
			mcp_answer_job(s, j, j->cancel ? (json_decref(msg), NULL) : msg);
			job_free(j);
			continue;
		}
		json_t *resp = call_run(s, j);
		call_account(s, j, resp);

		pthread_mutex_lock(&s->mu);
		s->running = NULL;
		if (!s->queue && s->state == WS_BUSY)
			session_set_state(s, WS_READY);
		pthread_mutex_unlock(&s->mu);
		if (resp && !j->cancel)
			mcp_answer_job(s, j, json_pack("{s:s, s:O, s:o}", "jsonrpc", "2.0", "id", j->id,
						       "result", resp));
		else {
			json_decref(resp);
			mcp_answer_job(s, j, NULL);
		}
		job_free(j);
	}
}

/* call_start - the call and minter threads, started before the seccomp filter goes on */
int call_start(struct session *s)
{
	int r = pthread_create(&call_tid, NULL, call_thread, s);
	if (r != 0)
		return -r;
	pthread_detach(call_tid);
	r = pthread_create(&mint_tid, NULL, mint_thread, s);
	if (r != 0)
		return -r;
	pthread_detach(mint_tid);
	return 0;
}
