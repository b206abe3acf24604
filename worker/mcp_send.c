/*
 * mcp_send.c - what the worker sends its client: JSON-RPC answers and errors, notifications,
 * and log messages at the level the client set. The layer below the MCP dispatcher
 * (worker/mcp.c) and the call thread (worker/call.c, worker/resources.c), which all answer
 * through it; it calls only worker/session.c.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "worker/worker.h"

/* RFC 5424 severities, as MCP's logging/setLevel names them, most severe first */
const char *const mcp_log_levels[MCP_LOG_LEVELS] = { "emergency", "alert", "critical", "error",
					      "warning", "notice", "info", "debug" };

/* mcp_reply_spliced - answer REQ_MCP seq (every REQ_MCP gets exactly one ANS_MCP, maybe empty),
 * the base64 of sp (taken) in place of its placeholders (worker/splice.h) */
static void mcp_reply_spliced(struct session *s, uint32_t seq, json_t *response,
			      struct splices *sp)
{
	char *text = NULL;
	size_t len = 0;
	json_t *id = NULL;
	if (response) {
		text = json_dumps(response, JSON_COMPACT);
		len = text ? strlen(text) : 0;
		id = json_incref(json_object_get(response, "id"));
		json_decref(response);
	}
	if (text && sp) {
		char *out = NULL;
		size_t olen = 0;
		int r = splices_apply(sp, text, len, &out, &olen);
		if (r == -ENOENT)
			log_warn("a placeholder for base64 was not in the answer exactly once");
		free(text);
		text = out;
		len = text ? olen : 0;
	}
	splices_free(sp);
	struct ipc_buf b;
	bool unmade = response && !text; /* out of memory dumping or splicing it */
	int r = unmade ? -EMSGSIZE : ipc_pack_ans_mcp(&b, seq, text ? text : "", len);
	if (r == -EMSGSIZE) {
		/* never silence: the client would wait for this answer for ever */
		log_error("a response of %zu bytes %s; answering with an error instead", len,
			  unmade ? "could not be encoded" : "is over the message limit");
		free(text);
		char msg[300];
		if (unmade)
			snprintf(msg, sizeof(msg), "The answer to this request could not be encoded (the "
				 "server ran out of memory); try again with less output.");
		else
			snprintf(msg, sizeof(msg), "The answer to this request is %zu bytes, over the %u "
				 "MiB message limit, so it cannot be sent. Ask for less (fewer tests or less "
				 "output per call; large results belong in files under /app/out).", len,
				 MCP_MAX_MESSAGE >> 20);
		json_t *e = mcp_error(id, RPC_INTERNAL_ERROR, msg);
		text = json_dumps(e, JSON_COMPACT);
		json_decref(e);
		len = text ? strlen(text) : 0;
		r = ipc_pack_ans_mcp(&b, seq, text ? text : "", len);
	}
	json_decref(id);
	if (r == 0)
		session_send(s, &b);
	free(text);
}

/* mcp_reply - answer REQ_MCP seq (every REQ_MCP gets exactly one ANS_MCP, maybe empty) */
void mcp_reply(struct session *s, uint32_t seq, json_t *response)
{
	mcp_reply_spliced(s, seq, response, NULL);
}

/* mcp_error - a JSON-RPC error response */
json_t *mcp_error(json_t *id, int code, const char *message)
{
	return json_pack("{s:s, s:O, s:{s:i, s:s}}", "jsonrpc", "2.0", "id", id ? id : json_null(),
			 "error", "code", code, "message", message);
}

/* mcp_notify - a server notification, tied to request seq rel (0: none) for the transport */
void mcp_notify(struct session *s, uint32_t rel, const char *method, json_t *params)
{
	json_t *n = json_pack("{s:s, s:s, s:o}", "jsonrpc", "2.0", "method", method, "params", params);
	char *text = n ? json_dumps(n, JSON_COMPACT) : NULL;
	json_decref(n);
	struct ipc_buf b;
	if (text && ipc_pack_note_mcp(&b, session_next_seq(s), rel, text, strlen(text)) == 0)
		session_send(s, &b);
	free(text);
}

/* mcp_log_enabled - does the client's logging/setLevel (warning until it sends one) let a
 * message of this level through? */
bool mcp_log_enabled(struct session *s, const char *level)
{
	int lv = 0;
	for (int i = 0; i < MCP_LOG_LEVELS; i++)
		if (strcmp(mcp_log_levels[i], level) == 0)
			lv = i;
	pthread_mutex_lock(&s->mu);
	bool pass = lv <= s->mcp_log_level && s->state != WS_BEFORE_INIT;
	pthread_mutex_unlock(&s->mu);
	return pass;
}

/* mcp_log_data - notifications/message with structured data (stolen), on request rel's
 * stream, if the level passes */
void mcp_log_data(struct session *s, uint32_t rel, const char *level, json_t *data)
{
	if (!data || !mcp_log_enabled(s, level)) {
		json_decref(data);
		return;
	}
	mcp_notify(s, rel, "notifications/message",
		   json_pack("{s:s, s:s, s:o}", "level", level, "logger", "kode-gopher", "data", data));
}

/* mcp_log - a sentence of the server's about request rel, if the client's level lets it through */
void mcp_log(struct session *s, uint32_t rel, const char *level, const char *fmt, ...)
{
	if (!mcp_log_enabled(s, level))
		return;
	char msg[512];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	mcp_log_data(s, rel, level, json_pack("{s:s, s:s}", "stream", "server", "text", msg));
}

/* mcp_batch_send - the batch's one answer: the array, or nothing if it held only notifications */
void mcp_batch_send(struct session *s, struct mcp_batch *b)
{
	if (json_array_size(b->responses))
		mcp_reply_spliced(s, b->seq, b->responses, b->splices);
	else {
		json_decref(b->responses);
		splices_free(b->splices);
		mcp_reply(s, b->seq, NULL);
	}
	free(b);
}

/* mcp_answer_job - see worker.h */
void mcp_answer_job(struct session *s, struct job *j, json_t *response)
{
	struct mcp_batch *b = j->batch;
	struct splices *sp = j->splices;
	j->splices = NULL;
	if (!b) {
		mcp_reply_spliced(s, j->seq, response, sp);
		return;
	}
	j->batch = NULL;
	pthread_mutex_lock(&s->mu);
	if (response)
		json_array_append_new(b->responses, response);
	splices_chain(&b->splices, response ? sp : NULL);
	bool last = --b->waiting == 0 && b->dispatched;
	pthread_mutex_unlock(&s->mu);
	if (!response)
		splices_free(sp);
	if (last)
		mcp_batch_send(s, b);
}
