/*
 * splice.c - base64 spliced into dumped JSON answers (see splice.h for why and who calls it).
 *
 * A placeholder is the JSON string "kg-splice-<32 hex digits of the set's nonce>-<index>"; in
 * the dumped answer it stands between its two quotes as it is (it needs no escaping), and the
 * quotes and all are replaced by the quoted base64, which needs none either. Output the user's
 * code printed is in the same answer, so a look-alike can be there (as \"kg-splice-... inside
 * a string): only a whole JSON value with the set's own nonce, which the user never sees,
 * makes a match.
 */
#include "worker/splice.h"

#include <errno.h>
#include <openssl/rand.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lib/base64.h"

#define SPLICE_PREFIX "\"kg-splice-"
#define SPLICE_NONCE_HEX 32

struct splice_item {
	char *b64;
	size_t len;
	size_t seen;    /* placeholders of it found by the last splices_apply */
};

struct splices {
	char nonce[SPLICE_NONCE_HEX + 1];
	struct splice_item *v;
	size_t n, cap;
	struct splices *next;
};

/* splices_make - an empty set with a fresh nonce */
static struct splices *splices_make(void)
{
	unsigned char raw[SPLICE_NONCE_HEX / 2];
	struct splices *sp = calloc(1, sizeof(*sp));
	if (!sp || RAND_bytes(raw, sizeof(raw)) != 1) {
		free(sp);
		return NULL;
	}
	for (size_t i = 0; i < sizeof(raw); i++)
		snprintf(sp->nonce + 2 * i, 3, "%02x", raw[i]);
	return sp;
}

/* splices_add_base64 - see splice.h */
json_t *splices_add_base64(struct splices **spp, const unsigned char *p, size_t n)
{
	if (!*spp && !(*spp = splices_make()))
		return NULL;
	struct splices *sp = *spp;
	if (sp->n == sp->cap) {
		size_t nc = sp->cap ? 2 * sp->cap : 8;
		struct splice_item *g = realloc(sp->v, nc * sizeof(*g));
		if (!g)
			return NULL;
		sp->v = g;
		sp->cap = nc;
	}
	char *b64 = b64_encode(p, n, 0);
	if (!b64)
		return NULL;
	char ph[64];
	snprintf(ph, sizeof(ph), "%s%s-%zu", SPLICE_PREFIX + 1, sp->nonce, sp->n);
	json_t *j = json_string(ph);
	if (!j) {
		free(b64);
		return NULL;
	}
	sp->v[sp->n++] = (struct splice_item){ .b64 = b64, .len = strlen(b64) };
	return j;
}

/* splices_bytes - see splice.h */
size_t splices_bytes(const struct splices *sp)
{
	size_t n = 0;
	for (; sp; sp = sp->next)
		for (size_t i = 0; i < sp->n; i++)
			n += sp->v[i].len;
	return n;
}

/* splices_chain - see splice.h */
void splices_chain(struct splices **sp, struct splices *more)
{
	while (*sp)
		sp = &(*sp)->next;
	*sp = more;
}

/* splice_match - the item a placeholder at p (its opening quote, len bytes left) names, and the
 * placeholder's length with both quotes; NULL if it is no placeholder of the chain */
static struct splice_item *splice_match(struct splices *chain, const char *p, size_t len,
					size_t *toklen)
{
	size_t pl = strlen(SPLICE_PREFIX), i = pl;
	if (len < pl + SPLICE_NONCE_HEX + 3)
		return NULL;
	const char *nonce = p + pl;
	i += SPLICE_NONCE_HEX;
	if (p[i++] != '-')
		return NULL;
	size_t idx = 0, digits = 0;
	for (; i < len && p[i] >= '0' && p[i] <= '9' && digits < 9; i++, digits++)
		idx = idx * 10 + (size_t)(p[i] - '0');
	if (!digits || i >= len || p[i] != '"')
		return NULL;
	for (struct splices *sp = chain; sp; sp = sp->next)
		if (memcmp(sp->nonce, nonce, SPLICE_NONCE_HEX) == 0 && idx < sp->n) {
			*toklen = i + 1;
			return &sp->v[idx];
		}
	return NULL;
}

/* splices_apply - see splice.h */
int splices_apply(struct splices *sp, const char *text, size_t len, char **out, size_t *outlen)
{
	for (struct splices *s = sp; s; s = s->next)
		for (size_t i = 0; i < s->n; i++)
			s->v[i].seen = 0;
	/* two passes over the placeholders: the size, then the copy */
	size_t total = len, pl = strlen(SPLICE_PREFIX);
	for (int pass = 0; pass < 2; pass++) {
		char *o = pass ? *out : NULL;
		const char *from = text, *end = text + len; /* copied up to from; searched from at */
		for (const char *p, *at = text; (p = memmem(at, (size_t)(end - at), SPLICE_PREFIX, pl));) {
			size_t tl = 0;
			/* a value's opening quote: after a key's colon, in an array or after a comma
			 * (in compact JSON nothing else comes before one; an escaped quote inside a
			 * string has a backslash) */
			bool value = p > text && (p[-1] == ':' || p[-1] == ',' || p[-1] == '[');
			struct splice_item *it = value ? splice_match(sp, p, (size_t)(end - p), &tl)
						       : NULL;
			if (!it) {
				at = p + 1;
				continue;
			}
			if (pass) {
				memcpy(o, from, (size_t)(p - from));
				o += p - from;
				*o++ = '"';
				memcpy(o, it->b64, it->len);
				o += it->len;
				*o++ = '"';
			} else {
				total = total - tl + it->len + 2;
				it->seen++;
			}
			from = at = p + tl;
		}
		if (!pass) {
			*out = malloc(total + 1);
			if (!*out)
				return -ENOMEM;
		} else {
			memcpy(o, from, (size_t)(end - from));
			o += end - from;
			*o = '\0';
		}
	}
	*outlen = total;
	for (struct splices *s = sp; s; s = s->next)
		for (size_t i = 0; i < s->n; i++)
			if (s->v[i].seen != 1)
				return -ENOENT;
	return 0;
}

/* splices_free - see splice.h */
void splices_free(struct splices *sp)
{
	while (sp) {
		struct splices *next = sp->next;
		for (size_t i = 0; i < sp->n; i++)
			free(sp->v[i].b64);
		free(sp->v);
		free(sp);
		sp = next;
	}
}
