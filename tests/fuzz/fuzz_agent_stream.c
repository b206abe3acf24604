/*
 * fuzz_agent_stream.c - libFuzzer target for the worker's reader of the agent's /execute NDJSON
 * stream (worker/agent_client.c, through agent_client_read_stream: the same line splitting and
 * event checks a call runs on the bytes curl hands over, without the transfer).
 *
 * Built by tests/fuzz/Makefile. Byte 0 picks how the rest arrives: 0 in one piece, n in pieces
 * of n bytes (so both the no-copy path and the line buffer are reached). Everything the agent
 * sends is untrusted: the user's program runs beside it. Besides "no crash, no leak": the
 * verdict is one of the documented errors with a sentence that is valid UTF-8 (it reaches the
 * model inside a JSON result), a success carries a result object with nothing after its line,
 * and every progress, token_request, heartbeat or log event handed on is well formed. The same
 * bytes also go to the reader of a POST /files read's answer (agent_client_read_piece, below).
 */
#include <errno.h>
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "worker/agent_client.h"

#define FUZZ_MAX_PIECES 4096

static void fuzz_progress(void *ctx, const char *phase, const char *message)
{
	(*(size_t *)ctx)++;
	if (!phase || !message)
		__builtin_trap();
}

/* fuzz_event - what is handed on: token_request and heartbeat events, and log events whose
 * phase, stream and text are strings (worker/agent_client.h) */
static void fuzz_event(void *ctx, json_t *ev)
{
	(void)ctx;
	const char *name = json_is_object(ev) ? json_string_value(json_object_get(ev, "event")) : NULL;
	if (!name)
		__builtin_trap();
	if (strcmp(name, "log") == 0) {
		if (!json_is_string(json_object_get(ev, "phase")) ||
		    !json_is_string(json_object_get(ev, "stream")) ||
		    !json_is_string(json_object_get(ev, "text")))
			__builtin_trap();
	} else if (strcmp(name, "token_request") != 0 && strcmp(name, "heartbeat") != 0) {
		__builtin_trap();
	}
}

/*
 * fuzz_result_is_last - "nothing may follow the result": the stream ends with a newline and its
 * last non-blank line (blank: empty or a lone "\r") is a result event
 */
static int fuzz_result_is_last(const char *s, size_t n)
{
	if (n == 0 || s[n - 1] != '\n')
		return 0;
	size_t end = n - 1; /* the newline that ends the line we look at */
	for (;;) {
		size_t start = end;
		while (start > 0 && s[start - 1] != '\n')
			start--;
		size_t l = end - start;
		if (l && s[start + l - 1] == '\r')
			l--;
		if (l) {
			json_t *ev = json_loadb(s + start, l, JSON_ALLOW_NUL, NULL);
			const char *name = json_string_value(json_object_get(ev, "event"));
			int ok = name && strcmp(name, "result") == 0;
			json_decref(ev);
			return ok;
		}
		if (start == 0)
			return 0;
		end = start - 1;
	}
}

/*
 * fuzz_piece - the same bytes as the answer to a file read (agent_client_read_piece): the
 * piece type, or JSON when step is odd. A piece taken lies inside the body, right after the
 * header's newline, exactly its header's length, at most what was asked; a refusal is
 * {"error": string} alone; anything else is -EPROTO with a sentence that is valid UTF-8.
 */
static void fuzz_piece(const char *in, size_t n, size_t step)
{
	json_t *head = NULL;
	size_t at = 0, got = 0, asked = 64;
	char err[512];
	memset(err, 0x55, sizeof(err));
	const char *ctype = step & 1 ? "application/json" : "application/x-kode-gopher-file";
	int rc = agent_client_read_piece(ctype, in, n, "out/x", 0, asked, &head, &at, &got, err,
					 sizeof(err));
	if (rc == 0) {
		if (json_is_string(json_object_get(head, "error"))) {
			if (json_object_size(head) != 1)
				__builtin_trap();
		} else if (at == 0 || at > n || in[at - 1] != '\n' || at + got != n || got > asked ||
			   json_integer_value(json_object_get(head, "length")) != (json_int_t)got) {
			__builtin_trap();
		}
		json_decref(head);
	} else {
		if (rc != -EPROTO || head || !memchr(err, '\0', sizeof(err)) || !err[0])
			__builtin_trap();
		json_t *j = json_string(err);
		if (!j)
			__builtin_trap();
		json_decref(j);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	size_t step = data[0];
	const char *in = (const char *)data + 1;
	size_t n = size - 1;

	static const char *piece[FUZZ_MAX_PIECES];
	static size_t len[FUZZ_MAX_PIECES];
	size_t np = 0;
	if (step == 0 || n == 0) {
		piece[0] = in;
		len[0] = n;
		np = 1;
	} else {
		for (size_t off = 0; off < n && np < FUZZ_MAX_PIECES; off += step) {
			piece[np] = in + off;
			len[np] = n - off < step ? n - off : step;
			np++;
		}
	}

	/* the pieces are views of libFuzzer's exactly-sized buffer, so ASan bounds every read */
	json_t *result = NULL;
	char err[512];
	memset(err, 0x55, sizeof(err));
	size_t progress = 0;
	int rc = agent_client_read_stream(piece, len, np, fuzz_progress, &progress, fuzz_event,
					  NULL, &result, err, sizeof(err));
	if (rc == 0) {
		if (!json_is_object(result))
			__builtin_trap();
		if (!fuzz_result_is_last(in, n))
			__builtin_trap();
		json_decref(result);
	} else {
		if (rc != -EPROTO && rc != -ENOMEM && rc != -EPIPE)
			__builtin_trap();
		if (!memchr(err, '\0', sizeof(err)) || !err[0])
			__builtin_trap();
		json_t *j = json_string(err);
		if (!j)
			__builtin_trap();
		json_decref(j);
	}
	fuzz_piece(in, n, step);
	return 0;
}
