/*
 * fuzz_jsonrpc.c - libFuzzer target for the JSON-RPC framing: stdin bytes split into bounded
 * lines (ipc/frame.c), and the id recovery from the ends of a dropped line (worker/mcp.c).
 */
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "ipc/frame.h"
#include "lib/rpcid.h"
#include "worker/worker.h"

static void on_line(void *ctx, const char *l, size_t n)
{
	(void)ctx;
	json_t *v = json_loadb(l, n, JSON_REJECT_DUPLICATES, NULL);
	json_decref(v);
}

static void on_toobig(void *ctx, const char *h, size_t hl, const char *t, size_t tl, uint64_t size)
{
	(void)ctx;
	(void)size;
	json_t *id = rpcid_scan(h, hl, t, tl);
	json_decref(id);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct frame f;
	struct frame_ops ops = { NULL, on_line, on_toobig };
	frame_init(&f, 256); /* small bound so the fuzzer reaches the dropping path */
	size_t half = size / 2;
	frame_feed(&f, (const char *)data, half, &ops);
	frame_feed(&f, (const char *)data + half, size - half, &ops);
	frame_finish(&f, &ops);
	frame_free(&f);
	/* and the id scanner on arbitrary ends */
	json_t *id = rpcid_scan((const char *)data, half, (const char *)data + half, size - half);
	json_decref(id);
	return 0;
}
