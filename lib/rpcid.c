/*
 * rpcid.c - a JSON-RPC request's id: which values are ids, and a best-effort scan for the
 * "id" of a message too large or too broken to parse (rpcid.h).
 */
#include "lib/rpcid.h"

#include <ctype.h>
#include <string.h>

/* rpcid_valid - see rpcid.h */
bool rpcid_valid(json_t *id)
{
	return json_is_string(id) || json_is_integer(id);
}

/* ---- the ends of a message that was too large ---- */

static size_t skip_ws(const char *p, size_t i, size_t n)
{
	while (i < n && (p[i] == ' ' || p[i] == '\t' || p[i] == '\r' || p[i] == '\n'))
		i++;
	return i;
}

/* skip_string - index past the closing quote of the string opening at i; n if unterminated */
static size_t skip_string(const char *p, size_t i, size_t n)
{
	for (i++; i < n; i++) {
		if (p[i] == '\\')
			i++;
		else if (p[i] == '"')
			return i + 1;
	}
	return n;
}

/* skip_value - index past the JSON value at i; n if it runs past what we have */
static size_t skip_value(const char *p, size_t i, size_t n)
{
	if (i >= n)
		return n;
	if (p[i] == '"')
		return skip_string(p, i, n);
	if (p[i] == '{' || p[i] == '[') {
		int depth = 0;
		for (; i < n; i++) {
			if (p[i] == '"') {
				i = skip_string(p, i, n) - 1;
				continue;
			}
			if (p[i] == '{' || p[i] == '[')
				depth++;
			else if ((p[i] == '}' || p[i] == ']') && --depth == 0)
				return i + 1;
		}
		return n;
	}
	while (i < n && p[i] != ',' && p[i] != '}' && p[i] != ']' && p[i] != ' ' && p[i] != '\n')
		i++;
	return i;
}

/* id_token - parse a scalar id (integer or short string) exactly */
static json_t *id_token(const char *p, size_t len)
{
	if (len == 0 || len > 200)
		return NULL;
	json_t *v = json_loadb(p, len, JSON_DECODE_ANY, NULL);
	if (v && !rpcid_valid(v)) {
		json_decref(v);
		v = NULL;
	}
	return v;
}

/* rpcid_scan - see rpcid.h; look for "id" among the top-level members in the head, then as the last
 * member in the tail (the TypeScript SDK writes it last). Never trusted beyond an error reply. */
json_t *rpcid_scan(const char *h, size_t hn, const char *t, size_t tn)
{
	size_t i = skip_ws(h, 0, hn);
	if (i < hn && h[i] == '{') {
		i++;
		while (i < hn) {
			i = skip_ws(h, i, hn);
			if (i >= hn || h[i] != '"')
				break;
			size_t ks = i, ke = skip_string(h, i, hn);
			i = skip_ws(h, ke, hn);
			if (i >= hn || h[i] != ':')
				break;
			i = skip_ws(h, i + 1, hn);
			size_t vs = i, ve = skip_value(h, i, hn);
			if (ve >= hn)
				break;
			if (ke - ks == 4 && memcmp(h + ks, "\"id\"", 4) == 0)
				return id_token(h + vs, ve - vs);
			i = skip_ws(h, ve, hn);
			if (i >= hn || h[i] != ',')
				break;
			i++;
		}
	}
	/* backwards from the end: ... "id" : value } */
	size_t e = tn;
	while (e > 0 && isspace((unsigned char)t[e - 1]))
		e--;
	if (e == 0 || t[e - 1] != '}')
		return NULL;
	e--;
	while (e > 0 && isspace((unsigned char)t[e - 1]))
		e--;
	size_t ve = e, vs;
	if (e > 0 && t[e - 1] == '"') {
		vs = e - 1;
		while (vs > 0 && !(t[vs - 1] == '"' && (vs < 2 || t[vs - 2] != '\\')))
			vs--;
		if (vs == 0)
			return NULL;
		vs--;
	} else {
		vs = e;
		while (vs > 0 && (isdigit((unsigned char)t[vs - 1]) || t[vs - 1] == '-'))
			vs--;
	}
	size_t k = vs;
	while (k > 0 && isspace((unsigned char)t[k - 1]))
		k--;
	if (k == 0 || t[k - 1] != ':')
		return NULL;
	k--;
	while (k > 0 && isspace((unsigned char)t[k - 1]))
		k--;
	if (k < 4 || memcmp(t + k - 4, "\"id\"", 4) != 0)
		return NULL;
	k -= 4;
	while (k > 0 && isspace((unsigned char)t[k - 1]))
		k--;
	if (k == 0 || (t[k - 1] != ',' && t[k - 1] != '{'))
		return NULL;
	return id_token(t + vs, ve - vs);
}
