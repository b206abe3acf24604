/*
 * golex.h - a small Go lexer for agent/normalize.c.
 *
 * Just enough of the Go grammar to find the package clause and the top-level function
 * declarations of untrusted source without being fooled by comments, strings, raw strings, runes
 * or a byte-order mark. It never fails: malformed input (an unterminated comment or string) ends
 * the token stream early or yields odd tokens, and the Go compiler reports the real error later.
 * Semicolons and newlines carry no meaning for what normalize looks for, so they are skipped.
 */
#ifndef KG_GOLEX_H
#define KG_GOLEX_H

#include <stddef.h>

enum golex_kind {
	GOLEX_EOF,
	GOLEX_IDENT,   /* identifiers and keywords; bytes >= 0x80 count as letters */
	GOLEX_LITERAL, /* numbers, "strings", `raw strings`, 'runes' */
	GOLEX_PUNCT,   /* any other single byte: ( ) { } [ ] . , and the rest */
};

struct golex_token {
	enum golex_kind kind;
	size_t off;    /* first byte in the source */
	size_t len;    /* bytes */
	unsigned line; /* 1-based line of the first byte */
};

struct golex {
	const char *src;
	size_t len;
	size_t pos;
	unsigned line;
};

void golex_init(struct golex *lx, const char *src, size_t len);
void golex_next(struct golex *lx, struct golex_token *tok);
int golex_is(const struct golex *lx, const struct golex_token *tok, const char *text);
int golex_is_punct(const struct golex *lx, const struct golex_token *tok, char c);

#endif
