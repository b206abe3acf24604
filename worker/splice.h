/*
 * splice.h - bytes that go into a JSON answer as base64 without passing through jansson.
 *
 * A MiB of PNG is 1.4 MB of base64, and jansson's encoder walks a string code point by code
 * point: tens of ms for one that size (its parser more). So an artifact's or a resource's bytes
 * are never a json_t string: the answer holds a placeholder string where the base64 goes, the
 * (then small) answer is dumped, and mcp_reply (worker/mcp.c) puts the base64 in place of each
 * placeholder. A placeholder names its set's 128 random bits, drawn after the call's output
 * came back, so nothing the user's code printed can pass for one.
 *
 * Used by worker/call.c (artifacts), worker/resources.c (resources/read) and worker/mcp.c.
 * A set belongs to one job (struct job's splices) until its answer is sent; a batch chains
 * the sets of its jobs.
 */
#ifndef KG_WORKER_SPLICE_H
#define KG_WORKER_SPLICE_H

#include <jansson.h>
#include <stddef.h>

struct splices;

/* splices_add_base64 - the placeholder (a new json_t string) for p[0..n) as base64; the bytes
 * are encoded now, so the caller may free p. *sp is made on first use. NULL: out of memory. */
json_t *splices_add_base64(struct splices **sp, const unsigned char *p, size_t n);

/* splices_bytes - the bytes of base64 the chain puts into an answer */
size_t splices_bytes(const struct splices *sp);

/* splices_chain - append the chain `more` to *sp (a batch gathering its jobs' sets) */
void splices_chain(struct splices **sp, struct splices *more);

/*
 * splices_apply - text[0..len) (a dumped answer) with every placeholder of the chain sp replaced
 * by its base64, in *out (malloc'd, NUL-terminated, *outlen bytes). 0; -ENOMEM; -ENOENT when
 * a placeholder of the chain was not found exactly once (*out then holds what was found).
 */
int splices_apply(struct splices *sp, const char *text, size_t len, char **out, size_t *outlen);

/* splices_free - the whole chain; NULL is a no-op */
void splices_free(struct splices *sp);

#endif
