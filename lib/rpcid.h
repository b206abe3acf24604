/*
 * rpcid.h - a JSON-RPC request's id: which values count as one, and a bounded scan for the
 * top-level "id" of a message that cannot be parsed whole (too large, cut, or broken), so the
 * error answer can name the request.
 *
 * Called by worker/mcp.c (a dropped line) and master/http.c (a body the transport refuses);
 * fuzzed by tests/fuzz/fuzz_jsonrpc.c.
 */
#ifndef KG_LIB_RPCID_H
#define KG_LIB_RPCID_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

/* rpcid_valid - ids are strings or integers here (null is not an id for a request) */
bool rpcid_valid(json_t *id);

/* rpcid_scan - best-effort recovery of a top-level "id" from the two ends (head, tail) of a
 * message; a new reference, or NULL. Never trusted beyond an error reply. */
json_t *rpcid_scan(const char *head, size_t hlen, const char *tail, size_t tlen);

#endif
