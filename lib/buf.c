/*
 * buf.c - see buf.h.
 */
#include "lib/buf.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>

#define BUF_FIRST_BYTES 4096

/* buf_add - see buf.h: doubling, from BUF_FIRST_BYTES, never beyond max + 1 */
int buf_add(struct buf *b, const void *p, size_t n, size_t max)
{
	if (n > max || b->len > max - n)
		return -EFBIG;
	size_t need = b->len + n + 1;
	if (need > b->cap) {
		size_t cap = b->cap ? b->cap : BUF_FIRST_BYTES;
		while (cap < need)
			cap *= 2;
		if (max < (size_t)-1 && cap > max + 1)
			cap = max + 1;
		char *d = realloc(b->data, cap);
		if (!d)
			return -ENOMEM;
		b->data = d;
		b->cap = cap;
	}
	if (n)
		memcpy(b->data + b->len, p, n);
	b->len += n;
	b->data[b->len] = '\0';
	return 0;
}

/* buf_reserve - see buf.h */
int buf_reserve(struct buf *b, size_t n)
{
	if (n == (size_t)-1)
		return -ENOMEM;
	if (n + 1 <= b->cap)
		return 0;
	char *d = realloc(b->data, n + 1);
	if (!d)
		return -ENOMEM;
	if (!b->data)
		d[0] = '\0';
	b->data = d;
	b->cap = n + 1;
	return 0;
}

/* buf_free - see buf.h */
void buf_free(struct buf *b)
{
	free(b->data);
	memset(b, 0, sizeof(*b));
}

/* buf_wipe_free - see buf.h */
void buf_wipe_free(struct buf *b)
{
	if (b->data)
		OPENSSL_cleanse(b->data, b->cap);
	buf_free(b);
}
