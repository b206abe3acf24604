/*
 * golex.c - a small Go lexer: tokens, comments, strings, runes, BOM.
 *
 * Called by agent/normalize.c on the user's (untrusted) Go source. Works on a byte buffer with an
 * explicit length, so NUL bytes in the source are just odd punctuation; every loop advances and
 * stops at the end of the buffer.
 */
#include "agent/golex.h"

#include <string.h>

/* golex_init - start lexing src; a UTF-8 byte-order mark is skipped, as the Go compiler does */
void golex_init(struct golex *lx, const char *src, size_t len)
{
	lx->src = src;
	lx->len = len;
	lx->pos = 0;
	lx->line = 1;
	if (len >= 3 && memcmp(src, "\xEF\xBB\xBF", 3) == 0)
		lx->pos = 3;
}

/* golex_ident_start - letters, underscore, and any non-ASCII byte (Unicode letters) */
static int golex_ident_start(unsigned char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c >= 0x80;
}

/* golex_ident_char - what may follow the first byte of an identifier */
static int golex_ident_char(unsigned char c)
{
	return golex_ident_start(c) || (c >= '0' && c <= '9');
}

/* golex_skip_space_comments - move past whitespace and comments, counting lines */
static void golex_skip_space_comments(struct golex *lx)
{
	while (lx->pos < lx->len) {
		char c = lx->src[lx->pos];

		if (c == '\n') {
			lx->line++;
			lx->pos++;
		} else if (c == ' ' || c == '\t' || c == '\r') {
			lx->pos++;
		} else if (c == '/' && lx->pos + 1 < lx->len && lx->src[lx->pos + 1] == '/') {
			/* the newline is left for the loop to count */
			while (lx->pos < lx->len && lx->src[lx->pos] != '\n')
				lx->pos++;
		} else if (c == '/' && lx->pos + 1 < lx->len && lx->src[lx->pos + 1] == '*') {
			lx->pos += 2;
			while (lx->pos < lx->len &&
			       !(lx->src[lx->pos] == '*' && lx->pos + 1 < lx->len &&
				 lx->src[lx->pos + 1] == '/')) {
				if (lx->src[lx->pos] == '\n')
					lx->line++;
				lx->pos++;
			}
			/* an unterminated comment swallows the rest of the file, as in Go */
			lx->pos = lx->pos < lx->len ? lx->pos + 2 : lx->len;
		} else {
			return;
		}
	}
}

/* golex_quoted - move past a "string" or 'rune'; stops at a newline, which Go forbids in them */
static void golex_quoted(struct golex *lx, char quote)
{
	lx->pos++;
	while (lx->pos < lx->len) {
		char c = lx->src[lx->pos];

		if (c == quote) {
			lx->pos++;
			return;
		}
		if (c == '\n')
			return;
		if (c == '\\' && lx->pos + 1 < lx->len && lx->src[lx->pos + 1] != '\n')
			lx->pos += 2;
		else
			lx->pos++;
	}
}

/* golex_raw - move past a `raw string`, which may span lines */
static void golex_raw(struct golex *lx)
{
	lx->pos++;
	while (lx->pos < lx->len && lx->src[lx->pos] != '`') {
		if (lx->src[lx->pos] == '\n')
			lx->line++;
		lx->pos++;
	}
	if (lx->pos < lx->len)
		lx->pos++;
}

/* golex_number - move past a number; only its extent matters, not its value */
static void golex_number(struct golex *lx)
{
	while (lx->pos < lx->len) {
		unsigned char c = (unsigned char)lx->src[lx->pos];
		unsigned char prev = (unsigned char)lx->src[lx->pos - 1];

		if (golex_ident_char(c) || c == '.')
			lx->pos++;
		else if ((c == '+' || c == '-') && (prev == 'e' || prev == 'E' || prev == 'p' || prev == 'P'))
			lx->pos++;
		else
			return;
	}
}

/* golex_next - the next token; GOLEX_EOF (with off == len) at the end, forever */
void golex_next(struct golex *lx, struct golex_token *tok)
{
	golex_skip_space_comments(lx);
	tok->off = lx->pos;
	tok->line = lx->line;
	if (lx->pos >= lx->len) {
		tok->kind = GOLEX_EOF;
		tok->off = lx->len;
		tok->len = 0;
		return;
	}

	unsigned char c = (unsigned char)lx->src[lx->pos];

	if (golex_ident_start(c)) {
		tok->kind = GOLEX_IDENT;
		while (lx->pos < lx->len && golex_ident_char((unsigned char)lx->src[lx->pos]))
			lx->pos++;
	} else if (c >= '0' && c <= '9') {
		tok->kind = GOLEX_LITERAL;
		lx->pos++;
		golex_number(lx);
	} else if (c == '"' || c == '\'') {
		tok->kind = GOLEX_LITERAL;
		golex_quoted(lx, (char)c);
	} else if (c == '`') {
		tok->kind = GOLEX_LITERAL;
		golex_raw(lx);
	} else {
		tok->kind = GOLEX_PUNCT;
		lx->pos++;
	}
	tok->len = lx->pos - tok->off;
}

/* golex_is - whether an identifier token spells exactly text */
int golex_is(const struct golex *lx, const struct golex_token *tok, const char *text)
{
	size_t n = strlen(text);

	return tok->kind == GOLEX_IDENT && tok->len == n && memcmp(lx->src + tok->off, text, n) == 0;
}

/* golex_is_punct - whether a token is the punctuation byte c */
int golex_is_punct(const struct golex *lx, const struct golex_token *tok, char c)
{
	return tok->kind == GOLEX_PUNCT && lx->src[tok->off] == c;
}
