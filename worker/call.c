/*
 * call.c - the call thread: runs the session's tool calls one at a time, in order.
 *
 * mcp.c queues a checked tools/call here; this thread takes it to the sandbox's agent, turns
 * progress into notifications/progress when the client asked for it (phases out of
 * CALL_PROGRESS_TOTAL, and a heartbeat at least every CALL_HEARTBEAT_MS while a tidy, build or
 * run is silent), the agent's log events into notifications/message at the client's level
 * (within the CALL_LOG_* limits: the agent is not trusted to keep its own), retries once in a
 * fresh sandbox if the sandbox died mid-call, and answers the request.
 *
 * Cancellation (notifications/cancelled, or the session ending mid-call): the minter thread,
 * which already talks to the agent beside the call, POSTs /cancel; the agent kills what runs and
 * ends the stream, and the call's result is dropped (MCP sends none for a cancelled request).
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
#include <unistd.h>

#include <openssl/crypto.h>

#include "lib/mono.h"
#include "policy/limits.h"
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
	bool cancel;                  /* the running call was cancelled: POST /cancel */
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
	minter.cancel = false;
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

/* minter_cancel - ask the minter to stop the running call in the sandbox */
static void minter_cancel(void)
{
	pthread_mutex_lock(&minter.mu);
	if (minter.active) {
		minter.cancel = true;
		pthread_cond_signal(&minter.cv);
	}
	pthread_mutex_unlock(&minter.mu);
}

/* minter_ep - a copy of the running call's endpoint, its strings in the caller's buffers;
 * false if no call runs. Under minter.mu. */
static bool minter_ep(struct agent_endpoint *ep, char *unix_path, char *base_url)
{
	*ep = minter.ep;
	memcpy(unix_path, minter.unix_path, sizeof(minter.unix_path));
	memcpy(base_url, minter.base_url, sizeof(minter.base_url));
	ep->unix_path = ep->unix_path ? unix_path : NULL;
	ep->base_url = ep->base_url ? base_url : NULL;
	return minter.active;
}

/* minter_send_cancel - POST /cancel until the agent has stopped a call, or ours is over (the
 * cancel may reach the agent before the call did: then it is asked again) */
static void minter_send_cancel(void)
{
	for (int tries = 0; tries < CALL_CANCEL_TRIES; tries++) {
		struct agent_endpoint ep;
		char unix_path[sizeof(minter.unix_path)], base_url[sizeof(minter.base_url)];
		pthread_mutex_lock(&minter.mu);
		bool go = minter_ep(&ep, unix_path, base_url) && minter.cancel;
		pthread_mutex_unlock(&minter.mu);
		bool running = false;
		char err[512];
		int r = go ? agent_client_cancel(&ep, &running, err, sizeof(err)) : 0;
		OPENSSL_cleanse(ep.secret, sizeof(ep.secret));
		if (!go || running || r < 0) {
			if (r < 0)
				log_warn("could not cancel the call in the sandbox: %s", err);
			pthread_mutex_lock(&minter.mu);
			minter.cancel = false;
			pthread_mutex_unlock(&minter.mu);
			return;
		}
		usleep(CALL_CANCEL_RETRY_MS * 1000);
	}
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
		while (!minter.head && !minter.cancel)
			pthread_cond_wait(&minter.cv, &minter.mu);
		if (minter.cancel) {
			pthread_mutex_unlock(&minter.mu);
			minter_send_cancel();
			continue;
		}
		struct mint_item *it = minter.head;
		minter.head = it->next;
		if (!minter.head)
			minter.tail = NULL;
		pthread_mutex_unlock(&minter.mu);

		json_t *answer = s->creds ? creds_answer(s->creds, it->event) : NULL;
		struct agent_endpoint ep;
		char unix_path[sizeof(minter.unix_path)], base_url[sizeof(minter.base_url)];
		pthread_mutex_lock(&minter.mu);
		bool active = minter_ep(&ep, unix_path, base_url);
		pthread_mutex_unlock(&minter.mu);
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
	splices_free(j->splices);
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
		minter_cancel();
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

/* What the client sees of the running call: progress and log lines. */
struct call_ctx {
	struct session *s;
	struct job *j;
	struct timespec t0, phase_t0, last_progress;
	char phase[16], step[120];
	double progress;
	unsigned log_lines, log_dropped;
	size_t log_bytes;
	double log_tokens;
	struct timespec log_refill;
	bool log_capped;
};

static double call_ms_since(const struct timespec *t)
{
	struct timespec now;
	clock_gettime(CLOCK_MONOTONIC, &now);
	return (double)(now.tv_sec - t->tv_sec) * 1000 + (double)(now.tv_nsec - t->tv_nsec) / 1e6;
}

/* call_phase_base - where a phase starts on the 0..CALL_PROGRESS_TOTAL scale (a tidy happens
 * inside the build stage: build, tidy, build again) */
static double call_phase_base(const char *phase)
{
	if (strcmp(phase, "normalize") == 0)
		return 0;
	if (strcmp(phase, "run") == 0 || strcmp(phase, "test") == 0)
		return 2;
	return 1; /* build, tidy */
}

/* call_send_progress - notifications/progress, strictly increasing as MCP requires: at the
 * phase's start or, within a phase, a tenth of the way left to its end */
static void call_send_progress(struct call_ctx *c, bool phase_start, const char *message)
{
	if (!c->j->progress_token)
		return;
	double base = call_phase_base(c->phase), end = base + 1, v;
	if (phase_start && base > c->progress)
		v = base;
	else
		v = c->progress + ((end > c->progress ? end : CALL_PROGRESS_TOTAL) - c->progress) * 0.1;
	if (v <= c->progress || v >= CALL_PROGRESS_TOTAL)
		v = c->progress + (CALL_PROGRESS_TOTAL - c->progress) * 0.01;
	c->progress = v;
	clock_gettime(CLOCK_MONOTONIC, &c->last_progress);
	mcp_notify(c->s, c->j->seq, "notifications/progress",
		   json_pack("{s:O, s:f, s:i, s:s}", "progressToken", c->j->progress_token, "progress",
			     v, "total", CALL_PROGRESS_TOTAL, "message", message));
}

/* call_log - one notifications/message of the call, within the CALL_LOG_* limits */
static void call_log(struct call_ctx *c, const char *level, const char *stream, const char *phase,
		     const char *text)
{
	if (c->log_capped || !mcp_log_enabled(c->s, level))
		return;
	size_t len = strlen(text);
	if (len > CALL_LOG_LINE_MAX)
		len = CALL_LOG_LINE_MAX;
	if (c->log_lines >= CALL_LOG_MAX_LINES || c->log_bytes + len > CALL_LOG_MAX_BYTES) {
		c->log_capped = true;
		mcp_log(c->s, c->j->seq, "notice", "further log lines of this call are not sent "
			"(%u lines and %zu bytes sent, %u dropped over %d lines a second); the result "
			"keeps the head and tail of the output", c->log_lines, c->log_bytes,
			c->log_dropped, CALL_LOG_RATE);
		return;
	}
	/* the agent's own word that it stopped streaming (notice) is not rate-limited: it must
	 * come through after the flood that caused it; the line and byte caps still hold */
	bool limited = strcmp(level, "notice") != 0;
	struct timespec now;
	clock_gettime(CLOCK_MONOTONIC, &now);
	c->log_tokens += ((double)(now.tv_sec - c->log_refill.tv_sec) +
			  (double)(now.tv_nsec - c->log_refill.tv_nsec) / 1e9) * CALL_LOG_RATE;
	if (c->log_tokens > CALL_LOG_BURST)
		c->log_tokens = CALL_LOG_BURST;
	c->log_refill = now;
	if (limited && c->log_tokens < 1) {
		c->log_dropped++;
		return;
	}
	if (limited)
		c->log_tokens -= 1;
	c->log_lines++;
	c->log_bytes += len;
	json_t *t = json_stringn(text, len);
	if (!t) /* cut inside a UTF-8 sequence */
		t = json_string("(a line that is not valid UTF-8 after cutting)");
	mcp_log_data(c->s, c->j->seq, level, json_pack("{s:s, s:s, s:o}", "stream", stream, "phase",
						       phase, "text", t));
}

/* call_stop_running - the session ends: cancel the running call in the sandbox (so a kept
 * sandbox is free for the next session at once) and wait up to wait_ms for it to stop */
void call_stop_running(struct session *s, int wait_ms)
{
	pthread_mutex_lock(&s->mu);
	bool running = s->running != NULL;
	if (running)
		s->running->cancel = CALL_CANCEL_SESSION_END;
	pthread_mutex_unlock(&s->mu);
	if (!running)
		return;
	log_info("the session ends mid-call: cancelling it");
	minter_cancel();
	for (int waited = 0; waited < wait_ms; waited += CALL_END_POLL_MS) {
		pthread_mutex_lock(&s->mu);
		running = s->running != NULL;
		pthread_mutex_unlock(&s->mu);
		if (!running)
			return;
		usleep(CALL_END_POLL_MS * 1000);
	}
}

/* call_progress - an agent progress event: a new step of the pipeline */
static void call_progress(void *ctx, const char *phase, const char *message)
{
	struct call_ctx *c = ctx;
	bool start = strcmp(phase, c->phase) != 0;
	snprintf(c->phase, sizeof(c->phase), "%s", phase);
	snprintf(c->step, sizeof(c->step), "%s", message ? message : "");
	if (start)
		clock_gettime(CLOCK_MONOTONIC, &c->phase_t0);
	char text[300];
	snprintf(text, sizeof(text), "%s: %s", phase, message ? message : "");
	call_send_progress(c, true, text);
	call_log(c, "info", "step", phase, c->step);
}

/* call_heartbeat - time passed with nothing new: say so, at least every CALL_HEARTBEAT_MS */
static void call_heartbeat(struct call_ctx *c)
{
	if (!c->j->progress_token || call_ms_since(&c->last_progress) < CALL_HEARTBEAT_MS)
		return;
	static const struct { const char *phase, *what; } runs[] = {
		{ "normalize", "checking the files" }, { "tidy", "go get" },
		{ "build", "go build" }, { "run", "the program" }, { "test", "go test" },
	};
	const char *what = c->phase;
	for (size_t i = 0; i < sizeof(runs) / sizeof(runs[0]); i++)
		if (strcmp(runs[i].phase, c->phase) == 0)
			what = runs[i].what;
	/* a build step names its tool in its progress message (agent/pipeline.c): the direct path
	 * and test mode's build are not go build */
	if (strcmp(c->phase, "build") == 0 && strncmp(c->step, "compiling and linking directly", 30) == 0)
		what = "the direct compile and link";
	else if (strcmp(c->phase, "build") == 0 && strncmp(c->step, "go test -c", 10) == 0)
		what = "go test -c";
	char text[300];
	snprintf(text, sizeof(text), "%s: %s still running, %.0f s in this step, %.0f s in all",
		 c->phase, what, call_ms_since(&c->phase_t0) / 1000, call_ms_since(&c->t0) / 1000);
	call_send_progress(c, false, text);
}

/* call_event - the execute stream's other events: token requests go to the minter, log lines
 * to the client, heartbeats keep its progress going */
static void call_event(void *ctx, json_t *event)
{
	struct call_ctx *c = ctx;
	const char *name = json_string_value(json_object_get(event, "event"));
	if (strcmp(name, "token_request") == 0) {
		call_token_event(NULL, event);
	} else if (strcmp(name, "log") == 0) {
		const char *phase = json_string_value(json_object_get(event, "phase"));
		const char *stream = json_string_value(json_object_get(event, "stream"));
		bool program = strcmp(stream, "stdout") == 0 || strcmp(stream, "stderr") == 0;
		/* the program's output is info; the go tool's (build output, "go: downloading")
		 * debug; the agent's own word (output no longer streamed) notice */
		bool ran = strcmp(phase, "run") == 0 || strcmp(phase, "test") == 0;
		const char *level = !program ? "notice" : ran ? "info" : "debug";
		call_log(c, level, program ? stream : "agent", phase,
			 json_string_value(json_object_get(event, "text")));
	}
	call_heartbeat(c);
}

/* art_demote - an artifact marked embedded becomes a link, with a note that says why */
static void art_demote(json_t *a, const char *why)
{
	json_object_set_new(a, "embedded", json_false());
	json_object_set_new(a, "note", json_string(why));
}

/* art_demote_cap - the same for one past the caps: count and bytes, or the message limit */
static void art_demote_cap(json_t *a, bool message)
{
	char why[300];
	if (message)
		snprintf(why, sizeof(why), "not embedded: with it the response would pass the %u MiB "
			 "message limit (stdout and stderr count too); read it with resources/read",
			 MCP_MAX_MESSAGE >> 20);
	else
		snprintf(why, sizeof(why), "not embedded: a result embeds at most %d artifacts and "
			 "%u MiB of them in all (artifact bytes cap); read it with resources/read",
			 ARTIFACTS_MAX_COUNT, ARTIFACTS_EMBED_BYTES >> 20);
	art_demote(a, why);
}

/* art_size - an embedded artifact's size as the agent gave it; -1 if it is not one */
static long long art_size(json_t *a)
{
	json_t *sz = json_object_get(a, "size");
	if (!json_is_true(json_object_get(a, "embedded")) || !json_is_integer(sz) ||
	    json_integer_value(sz) < 0)
		return -1;
	return json_integer_value(sz);
}

/* art_cost - what an embedded artifact adds to the response: its base64 (text takes less) */
static size_t art_cost(json_t *a)
{
	long long n = art_size(a);
	return n < 0 ? 0 : ((size_t)n + 2) / 3 * 4;
}

/* art_is_text - a media type whose bytes go as an embedded resource's text */
static bool art_is_text(const char *mt)
{
	return strncmp(mt, "text/", 5) == 0 || strcmp(mt, "application/json") == 0;
}

/*
 * art_embed - the content block of an artifact marked embedded: its bytes read back from the
 * sandbox raw (POST /files) and, for an image or a blob, spliced in as base64 by mcp_reply (see
 * worker/splice.h), never a jansson string; text as an embedded resource's text. NULL, with
 * the artifact demoted to a link, when the bytes do not come back as the result announced.
 */
static json_t *art_embed(struct job *j, const struct agent_endpoint *ep, json_t *a)
{
	json_t *uri = json_object_get(a, "uri"), *mt = json_object_get(a, "media_type");
	const char *mts = json_string_value(mt), *name = json_string_value(json_object_get(a, "name"));
	long long size = art_size(a);
	char path[1100], err[512] = "", note[800] = "";
	if (!name || snprintf(path, sizeof(path), "out/%s", name) >= (int)sizeof(path) ||
	    size > ARTIFACTS_EMBED_BYTES) {
		art_demote(a, "not embedded: the sandbox described it in a way this server does not "
			   "take; read it with resources/read");
		return NULL;
	}
	json_t *head = NULL;
	unsigned char *bytes = NULL;
	size_t n = 0;
	int r = agent_client_read(ep, path, 0, size ? (size_t)size : 1, &head, &bytes, &n, err,
				  sizeof(err));
	const char *refused = json_string_value(json_object_get(head, "error"));
	json_t *b = NULL;
	if (r < 0 || refused) {
		snprintf(note, sizeof(note), "not embedded: it could not be read back from the "
			 "sandbox (%s); read it with resources/read", refused ? refused : err);
	} else if (json_integer_value(json_object_get(head, "size")) != size || n != (size_t)size ||
		   !json_is_true(json_object_get(head, "eof"))) {
		snprintf(note, sizeof(note), "not embedded: it changed after the run (%lld bytes "
			 "then, %lld now); read it with resources/read", size,
			 (long long)json_integer_value(json_object_get(head, "size")));
	} else if (strncmp(mts, "image/", 6) == 0) {
		json_t *ph = splices_add_base64(&j->splices, bytes, n);
		b = ph ? json_pack("{s:s, s:o, s:O}", "type", "image", "data", ph, "mimeType", mt) : NULL;
	} else {
		json_t *t = art_is_text(mts) && json_is_true(json_object_get(head, "text"))
				    ? json_stringn((const char *)bytes, n) : NULL;
		json_t *ph = t ? NULL : splices_add_base64(&j->splices, bytes, n);
		if (t || ph)
			b = json_pack("{s:s, s:{s:O, s:O, s:o}}", "type", "resource", "resource", "uri",
				      uri, "mimeType", mt, t ? "text" : "blob", t ? t : ph);
	}
	if (!b && r == 0 && !refused && note[0] == '\0')
		snprintf(note, sizeof(note), "not embedded: out of memory");
	if (!b)
		art_demote(a, note);
	json_decref(head);
	free(bytes);
	return b;
}

/* artifact_block - the content block for one artifact: an image, an embedded resource (text or
 * blob), or a link to the resource when it is not embedded */
static json_t *artifact_block(struct job *j, const struct agent_endpoint *ep, json_t *a)
{
	json_t *uri = json_object_get(a, "uri"), *mt = json_object_get(a, "media_type");
	if (!json_is_string(uri))
		return NULL;
	if (!json_is_string(mt))
		return NULL; /* a link, FIFO or the like: listed, nothing to link to */
	json_t *b = json_is_true(json_object_get(a, "embedded")) ? art_embed(j, ep, a) : NULL;
	if (b)
		return b;
	return json_pack("{s:s, s:O, s:O, s:O, s:O}", "type", "resource_link", "uri", uri, "name",
			 json_object_get(a, "name"), "mimeType", mt, "size", json_object_get(a, "size"));
}

/* json_cost - bytes s takes in the response: once as it is (structuredContent) and once inside
 * the text block, where it was dumped with \u escapes and then escaped again as a string */
static size_t json_cost(json_t *s)
{
	char *raw = json_dumps(s, JSON_ENCODE_ANY | JSON_COMPACT);
	char *ascii = json_dumps(s, JSON_ENCODE_ANY | JSON_COMPACT | JSON_ENSURE_ASCII);
	size_t n = (raw ? strlen(raw) : 0) + (ascii ? strlen(ascii) : 0);
	for (const char *p = ascii; p && *p; p++)
		n += *p == '\\' || *p == '"'; /* escaped once more inside the text block */
	free(raw);
	free(ascii);
	return n;
}

/* cut_middle - keep head and tail of s (about keep bytes, on UTF-8 boundaries) around a line
 * that says what went; a new string */
static json_t *cut_middle(const char *s, size_t len, size_t keep)
{
	size_t h = keep / 2, t = len - (keep - keep / 2);
	while (h > 0 && ((unsigned char)s[h] & 0xC0) == 0x80)
		h--;
	while (t < len && ((unsigned char)s[t] & 0xC0) == 0x80)
		t++;
	char mark[160];
	int m = snprintf(mark, sizeof(mark), "\n… %zu bytes cut here: with them the answer would pass "
			 "the %u MiB message limit …\n", t - h, MCP_MAX_MESSAGE >> 20);
	char *buf = malloc(h + (size_t)m + (len - t) + 1);
	if (!buf)
		return NULL;
	memcpy(buf, s, h);
	memcpy(buf + h, mark, (size_t)m);
	memcpy(buf + h + m, s + t, len - t);
	json_t *out = json_stringn_nocheck(buf, h + (size_t)m + (len - t));
	free(buf);
	return out;
}

/* fit_output - cut stdout and stderr (the largest first, head and tail kept) until the result
 * fits the message limit with room for the rest: each appears twice in the response, and
 * escaping can make a byte of output six or more. Says so in output_note. */
static void fit_output(json_t *sc, size_t budget)
{
	static const char *const streams[] = { "stdout", "stderr" };
	bool cut = false;
	/* a byte costs at most 13 (\u00XX raw, \\u00XX inside the text block): below that no
	 * dump is needed to know it fits */
	if (13 * (json_string_length(json_object_get(sc, "stdout")) +
		  json_string_length(json_object_get(sc, "stderr"))) <= budget)
		return;
	for (int round = 0; round < 24; round++) {
		size_t cost[2], total = 0;
		for (int k = 0; k < 2; k++) {
			json_t *v = json_object_get(sc, streams[k]);
			cost[k] = json_is_string(v) ? json_cost(v) : 0;
			total += cost[k];
		}
		if (total <= budget)
			break;
		int k = cost[1] > cost[0];
		json_t *v = json_object_get(sc, streams[k]);
		size_t len = json_string_length(v);
		size_t keep = len / 4 * 3;
		if (len < 1024)
			keep = 0;
		json_t *n = cut_middle(json_string_value(v), len, keep);
		if (!n)
			break;
		json_object_set_new(sc, streams[k], n);
		cut = true;
	}
	if (cut)
		json_object_set_new(sc, "output_note", json_sprintf(
			"stdout and stderr were cut in the middle (head and tail kept) so that the answer "
			"fits the %u MiB message limit; write large output to /app/out and read it back",
			MCP_MAX_MESSAGE >> 20));
}

/*
 * tool_result - wrap structured content as an MCP CallToolResult (steals sc): the JSON as text,
 * then one block per artifact, whose bytes the worker reads from the sandbox itself (ep); the
 * worker's own caps hold whatever the agent marked embedded: count, bytes, and the message
 * limit (the biggest become links first)
 */
static json_t *tool_result(struct job *j, const struct agent_endpoint *ep, json_t *sc,
			   bool is_error)
{
	json_t *arts = json_object_get(sc, "artifacts");
	json_t *blocks = json_array();
	size_t i;
	json_t *a;
	if (json_is_array(arts)) {
		size_t budget = ARTIFACTS_EMBED_BYTES, payload = 0;
		json_array_foreach(arts, i, a) {
			/* bytes come from the sandbox only as the worker reads them */
			json_object_del(a, "data");
			json_object_del(a, "text");
			if (!json_is_true(json_object_get(a, "embedded")))
				continue;
			long long n = art_size(a);
			if (n < 0 || i >= ARTIFACTS_MAX_COUNT || (size_t)n > budget) {
				art_demote_cap(a, false);
				continue;
			}
			budget -= (size_t)n;
			payload += art_cost(a);
		}
		/* the structured part appears twice (text and structuredContent); its big strings
		 * are stdout and stderr, the rest is small */
		size_t rest = 64 * 1024 + json_string_length(json_object_get(sc, "stdout")) +
			      json_string_length(json_object_get(sc, "stderr"));
		size_t limit = MCP_MAX_MESSAGE - 64 * 1024;
		while (payload + 2 * rest > limit) {
			json_t *big = NULL;
			json_array_foreach(arts, i, a)
				if (art_cost(a) > (big ? art_cost(big) : 0))
					big = a;
			if (!big)
				break;
			payload -= art_cost(big);
			art_demote_cap(big, true);
		}
		json_array_foreach(arts, i, a) {
			json_t *b = artifact_block(j, ep, a);
			if (b)
				json_array_append_new(blocks, b);
		}
	}
	/* the room left for stdout and stderr: the limit less what the artifacts' blocks hold
	 * and a margin for the rest of the result (diagnostics, tests, timings) */
	size_t blocks_len = splices_bytes(j->splices);
	json_array_foreach(blocks, i, a)
		blocks_len += json_string_length(json_object_get(json_object_get(a, "resource"),
								 "text")) + 512;
	size_t room = MCP_MAX_MESSAGE - 256 * 1024;
	fit_output(sc, blocks_len < room ? room - blocks_len : 0);
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
	resources_updated(s, j->seq, res);
}

/* call_once - one request to the agent; waits out a cancelled call that is still finishing */
static int call_once(struct agent_endpoint *ep, struct job *j, json_t *req, bool doc, void *ctx,
		     json_t **res, char *err, size_t errlen)
{
	for (int tries = 0;; tries++) {
		int r;
		if (j->cancel)
			return -ECANCELED;
		minter_begin(ep);
		if (j->cancel)
			minter_cancel(); /* it came while the call was on its way */
		if (doc)
			r = agent_client_doc(ep, req, res, err, errlen);
		else
			r = agent_client_execute_ev(ep, req, call_progress, ctx, call_event, ctx,
						    &j->cancel, res, err, errlen);
		minter_end();
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
	struct call_ctx cc = { .s = s, .j = j, .phase = "normalize" };
	clock_gettime(CLOCK_MONOTONIC, &cc.t0);
	cc.phase_t0 = cc.last_progress = cc.log_refill = cc.t0;
	cc.log_tokens = CALL_LOG_BURST;
	void *ctx = &cc;
	bool retried = false;
	struct timespec t0;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	int r = sandbox_get(s, &ep, err, sizeof(err));
	/* the first call of a session claims the (warm) sandbox: what that cost */
	long claim_ms = mono_since_ms(&t0);
	for (int attempt = 0; r == 0; attempt++) {
		r = call_once(ep, j, req, doc, ctx, &res, err, sizeof(err));
		if (r == 0 || !sandbox_lost(s, r) || attempt == 1 || j->cancel)
			break;
		log_warn("sandbox %s died mid-call (%s); retrying once in a fresh sandbox", sandbox_name(s), err);
		mcp_log(s, j->seq, "warning", "the sandbox died mid-call (%s); retrying once in a fresh one", err);
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
		if (retried && sandbox_lost(s, r))
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
	return tool_result(j, ep, res, result_is_error(res));
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
	/* output lines are info (the program's) or debug (the go tool's): below info nobody reads
	 * them, and the agent need not split them */
	json_object_set_new(req, "log_lines", json_boolean(mcp_log_enabled(s, "info")));
	json_t *watch = resources_watch(s); /* resources/subscribe */
	if (watch)
		json_object_set_new(req, "watch", watch);
	json_t *creds = s->creds ? creds_for_call(s->creds) : NULL;
	if (creds)
		json_object_set_new(req, "credentials", creds);
	json_t *out = call_agent(s, j, req, false);
	creds_wipe(json_object_get(req, "credentials"));
	json_decref(req);
	return out;
}

/* call_account - tell the master what the call cost, for /metrics and the accounting log
 * (before the answer goes out, so that a client that has its answer finds the call counted) */
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
	/* resp holds placeholders where the artifacts' base64 goes (worker/splice.h) */
	char *in = json_dumps(j->args, JSON_COMPACT), *out = resp ? json_dumps(resp, JSON_COMPACT) : NULL;
	c.bytes_in = in ? strlen(in) : 0;
	c.bytes_out = out ? strlen(out) + splices_bytes(j->splices) : 0;
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
		else if (j->cancel == CALL_CANCEL_SESSION_END) {
			/* not the client's cancel: no answer at all, and the transport tells the
			 * client that the session ended under its call */
			json_decref(resp);
		} else {
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
