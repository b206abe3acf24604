/*
 * frame.h - newline-delimited message framing with a hard size bound.
 *
 * The stdio transport reads JSON-RPC from stdin as lines (MCP's stdio framing). A line longer
 * than the bound is never buffered: its first and last IPC_TOOBIG_KEEP bytes are kept so the
 * worker can still answer it with an error that carries its id. Used by master/stdio.c; fuzzed
 * by tests/fuzz/fuzz_jsonrpc.c.
 */
#ifndef KG_FRAME_H
#define KG_FRAME_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

#include "ipc/ipc.h"

struct frame_ops {
	void *ctx;
	/* a complete line, without its newline, trimmed; never empty */
	void (*line)(void *ctx, const char *line, size_t len);
	/* a line over the bound: its two ends and its full length */
	void (*toobig)(void *ctx, const char *head, size_t hlen, const char *tail, size_t tlen,
		       uint64_t size);
};

struct frame {
	size_t max;
	char *line;
	size_t len;
	bool dropping;
	uint64_t dropped;
	char head[IPC_TOOBIG_KEEP], tail[IPC_TOOBIG_KEEP];
	size_t hlen;
};

void frame_init(struct frame *f, size_t max);
/* frame_feed - bytes as they arrive; calls ops for each line they complete */
void frame_feed(struct frame *f, const char *buf, size_t n, const struct frame_ops *ops);
/* frame_finish - end of input: a last line without a newline still counts */
void frame_finish(struct frame *f, const struct frame_ops *ops);
void frame_free(struct frame *f);

#endif
