/*
 * buf.h - the growable byte buffer every collector of an answer uses (HTTP bodies in the
 * master, worker and agent, a plugin's output): always NUL-terminated, never past a limit.
 */
#ifndef KG_LIB_BUF_H
#define KG_LIB_BUF_H

#include <stdbool.h>
#include <stddef.h>

struct buf {
	char *data; /* NULL until the first byte; then data[len] == '\0' */
	size_t len, cap;
};

/* buf_add - append n bytes; 0, -EFBIG (len would pass max: nothing is added) or -ENOMEM */
int buf_add(struct buf *b, const void *p, size_t n, size_t max);

/* buf_reserve - room for n bytes in all without another allocation; 0 or -ENOMEM */
int buf_reserve(struct buf *b, size_t n);

/* buf_free - free and empty; buf_wipe_free wipes the bytes first (they may hold a token) */
void buf_free(struct buf *b);
void buf_wipe_free(struct buf *b);

#endif
