/*
 * fuzz_kube_watch.c - libFuzzer target for Kubernetes watch lines as the master reads them:
 * the line splitting and event parsing of master/kube_api.c (kube_watch_lines, what kube_api_watch
 * runs on each piece curl hands over) and the Ready check of master/sandbox_kube.c
 * (sandbox_kube_claim_ready) on every object an event carries, as the SandboxClaim watch does.
 *
 * Built by tests/fuzz/Makefile. Byte 0 picks how the rest arrives: 0 in one piece, n in pieces
 * of n bytes; byte 1 the size of the "why" and resourceVersion buffers (1..64). The API
 * server's answer is untrusted in shape. Besides "no crash, no leak": a verdict is 0, the
 * callback's own, -ESTALE or -EIO; the buffer keeps no complete line after a feed that went
 * on; the resourceVersion and the reason are NUL-terminated within their buffers; only
 * ADDED/MODIFIED/DELETED-like events with an object reach the callback; and Ready means
 * a Ready condition with status "True" and a status.sandbox.name.
 */
#include <errno.h>
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "master/kube_api.h"
#include "master/sandbox_kube.h"

struct fuzz_watch {
	size_t cap;
	int events;
};

/* fuzz_ready_by_hand - the Ready rule, written out independently of sandbox_kube.c */
static int fuzz_ready_by_hand(json_t *claim)
{
	json_t *st = json_object_get(claim, "status"), *c;
	size_t i;
	json_array_foreach(json_object_get(st, "conditions"), i, c) {
		const char *type = json_string_value(json_object_get(c, "type"));
		if (!type || strcmp(type, "Ready") != 0)
			continue;
		const char *status = json_string_value(json_object_get(c, "status"));
		return status && strcmp(status, "True") == 0 &&
		       json_is_string(json_object_get(json_object_get(st, "sandbox"), "name"));
	}
	return 0;
}

/* fuzz_on_event - what sandbox_kube.c's watch callback does, with the checks */
static int fuzz_on_event(void *ctx, const char *type, json_t *obj)
{
	struct fuzz_watch *w = ctx;
	w->events++;
	if (!type || !json_is_object(obj) || strcmp(type, "BOOKMARK") == 0 ||
	    strcmp(type, "ERROR") == 0)
		__builtin_trap();
	if (strcmp(type, "DELETED") == 0)
		return 2;
	char why[64];
	memset(why, 0x55, sizeof(why));
	int ready = sandbox_kube_claim_ready(obj, why, w->cap);
	if (!memchr(why, '\0', w->cap))
		__builtin_trap();
	if (ready != fuzz_ready_by_hand(obj))
		__builtin_trap();
	return ready ? 1 : 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 2)
		return 0;
	size_t step = data[0];
	size_t cap = 1 + data[1] % 64;
	const char *in = (const char *)data + 2;
	size_t n = size - 2;
	if (step == 0)
		step = n ? n : 1;

	/* kube_write's buffer: what arrived and is not a complete line yet */
	char *buf = malloc(n + 1);
	size_t len = 0;
	char rv[64];
	memset(rv, 0x55, sizeof(rv));
	rv[0] = '\0';
	struct fuzz_watch w = { .cap = cap };
	int r = 0;
	for (size_t off = 0; off < n && r == 0; off += step) {
		size_t take = n - off < step ? n - off : step;
		memcpy(buf + len, in + off, take);
		len += take;
		r = kube_watch_lines(buf, &len, fuzz_on_event, &w, rv, cap);
		if (r == 0 && memchr(buf, '\n', len))
			__builtin_trap();
	}
	if (r != 0 && r != 1 && r != 2 && r != -ESTALE && r != -EIO)
		__builtin_trap();
	if (!memchr(rv, '\0', cap))
		__builtin_trap();
	free(buf);
	return 0;
}
