/*
 * metadata.c - the metadata-server emulator's answers, without I/O (see agent/metadata.h).
 *
 * Called by agent/metadata_server.c for each request it receives during a run, by the pipeline
 * (through metadata_view_from_json) when a call carries metadata credentials, and by the fuzz
 * target tests/fuzz/fuzz_metadata.c. Everything here reads bytes a program in the sandbox chose,
 * so every length is bounded and every decoding step rejects what it does not expect.
 */
#include "agent/metadata.h"

#include <errno.h>
#include <openssl/crypto.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "lib/ascii.h"
#include "lib/secret.h"

#define MD_PREFIX "/computeMetadata/v1/"

static const char md_text[] = "application/text";
static const char md_json[] = "application/json";
static const char md_plain[] = "text/plain; charset=utf-8";

/* ---- small helpers ---- */

/* md_field - a copy of a JSON string field that is visible ASCII of 1..max bytes; NULL if the
 * field is absent or null (*bad stays false) or malformed (*bad = true) */
static char *md_field(json_t *o, const char *key, size_t max, bool *bad)
{
	json_t *j = json_object_get(o, key);
	if (!j || json_is_null(j))
		return NULL;
	if (!json_is_string(j) || json_string_length(j) == 0 || json_string_length(j) > max ||
	    !ascii_visible(json_string_value(j), json_string_length(j))) {
		*bad = true;
		return NULL;
	}
	char *s = strdup(json_string_value(j));
	if (!s)
		*bad = true;
	return s;
}

/* md_cmp - qsort comparator for strings */
static int md_cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* metadata_scopes_key - see metadata.h */
char *metadata_scopes_key(const char *list, bool *bad)
{
	*bad = false;
	char *copy = strdup(list ? list : "");
	if (!copy) {
		*bad = true;
		return NULL;
	}
	char *items[METADATA_MAX_SCOPES];
	size_t n = 0, total = 0;
	char *save = NULL;
	for (char *t = strtok_r(copy, ", ", &save); t; t = strtok_r(NULL, ", ", &save)) {
		size_t len = strlen(t);
		if (n == METADATA_MAX_SCOPES || len > METADATA_MAX_SCOPE || !ascii_visible(t, len)) {
			free(copy);
			*bad = true;
			return NULL;
		}
		items[n++] = t;
		total += len + 1;
	}
	if (n == 0) {
		free(copy);
		*bad = true;
		return NULL;
	}
	qsort(items, n, sizeof(items[0]), md_cmp);
	char *key = malloc(total + 1);
	if (!key) {
		free(copy);
		*bad = true;
		return NULL;
	}
	size_t off = 0;
	for (size_t i = 0; i < n; i++) {
		if (i > 0 && strcmp(items[i], items[i - 1]) == 0)
			continue;
		if (off)
			key[off++] = ',';
		size_t len = strlen(items[i]);
		memcpy(key + off, items[i], len);
		off += len;
	}
	key[off] = '\0';
	free(copy);
	return key;
}

/* ---- the view ---- */

/* metadata_view_free - wipe the tokens and free everything */
void metadata_view_free(struct metadata_view *v)
{
	if (!v)
		return;
	free(v->email);
	free(v->project_id);
	free(v->numeric_project_id);
	free(v->universe_domain);
	for (size_t i = 0; i < v->nscopes; i++)
		free(v->scopes[i]);
	free(v->scopes_key);
	for (size_t i = 0; i < v->ntokens; i++) {
		free(v->tokens[i].scopes);
		secret_free(v->tokens[i].access_token);
	}
	memset(v, 0, sizeof(*v));
}

/* metadata_view_add_token - see metadata.h */
int metadata_view_add_token(struct metadata_view *v, const char *scopes_key,
			    const char *access_token, const char *token_type, double expires)
{
	size_t tlen = access_token ? strlen(access_token) : 0;
	if (!scopes_key || !tlen || tlen > METADATA_MAX_TOKEN || !ascii_visible(access_token, tlen))
		return -EINVAL;
	size_t slot = v->ntokens;
	for (size_t i = 0; i < v->ntokens; i++)
		if (strcmp(v->tokens[i].scopes, scopes_key) == 0)
			slot = i;
	if (slot == METADATA_MAX_TOKENS) {
		slot = 0;
		for (size_t i = 1; i < v->ntokens; i++)
			if (v->tokens[i].expires < v->tokens[slot].expires)
				slot = i;
	}
	char *k = strdup(scopes_key), *t = strdup(access_token);
	if (!k || !t) {
		free(k);
		secret_free(t);
		return -ENOMEM;
	}
	struct metadata_token *mt = &v->tokens[slot];
	if (slot < v->ntokens) {
		free(mt->scopes);
		secret_free(mt->access_token);
	} else {
		v->ntokens++;
	}
	mt->scopes = k;
	mt->access_token = t;
	snprintf(mt->token_type, sizeof(mt->token_type), "%s",
		 token_type && *token_type && strlen(token_type) < sizeof(mt->token_type) &&
				 ascii_visible(token_type, strlen(token_type))
			 ? token_type
			 : "Bearer");
	mt->expires = expires;
	return 0;
}

/* metadata_view_from_json - see metadata.h */
int metadata_view_from_json(json_t *creds, double now, struct metadata_view *v, char *err,
			    size_t errlen)
{
	memset(v, 0, sizeof(*v));
	bool bad = false;
	const char *what = NULL;
	if (!json_is_object(creds)) {
		snprintf(err, errlen, "credentials must be an object");
		return -EINVAL;
	}
	if (!(v->email = md_field(creds, "email", METADATA_MAX_FIELD, &bad)) && !bad)
		v->email = strdup("default");
	if (bad || !v->email)
		what = "email";
	if (!what && ((v->project_id = md_field(creds, "project_id", METADATA_MAX_FIELD, &bad)), bad))
		what = "project_id";
	if (!what && ((v->numeric_project_id = md_field(creds, "numeric_project_id",
							 METADATA_MAX_FIELD, &bad)), bad))
		what = "numeric_project_id";
	if (!what && !(v->universe_domain = md_field(creds, "universe_domain", METADATA_MAX_FIELD,
						      &bad)) && !bad)
		v->universe_domain = strdup("googleapis.com");
	if (!what && (bad || !v->universe_domain))
		what = "universe_domain";
	json_t *sc = json_object_get(creds, "scopes");
	if (!what) {
		if (!json_is_array(sc) || json_array_size(sc) == 0 ||
		    json_array_size(sc) > METADATA_MAX_SCOPES) {
			what = "scopes";
		} else {
			size_t i;
			json_t *e;
			json_array_foreach(sc, i, e)
			{
				size_t len = json_string_length(e);
				if (!json_is_string(e) || !len || len > METADATA_MAX_SCOPE ||
				    !ascii_visible(json_string_value(e), len) ||
				    strchr(json_string_value(e), ',') ||
				    !(v->scopes[v->nscopes] = strdup(json_string_value(e)))) {
					what = "scopes";
					break;
				}
				v->nscopes++;
			}
		}
	}
	if (!what) {
		/* the key of the default set, built like any ?scopes= */
		size_t total = 1;
		for (size_t i = 0; i < v->nscopes; i++)
			total += strlen(v->scopes[i]) + 1;
		char *list = malloc(total);
		if (!list) {
			what = "scopes";
		} else {
			list[0] = '\0';
			for (size_t i = 0; i < v->nscopes; i++) {
				strcat(list, i ? "," : "");
				strcat(list, v->scopes[i]);
			}
			v->scopes_key = metadata_scopes_key(list, &bad);
			free(list);
			if (!v->scopes_key)
				what = "scopes";
		}
	}
	json_t *idt = json_object_get(creds, "id_tokens");
	if (!what && idt && !json_is_boolean(idt))
		what = "id_tokens";
	v->id_tokens = json_is_true(idt);
	json_t *at = json_object_get(creds, "access_token");
	if (!what && at && !json_is_null(at)) {
		json_t *ein = json_object_get(creds, "expires_in");
		json_t *tt = json_object_get(creds, "token_type");
		if (!json_is_string(at) || !json_is_integer(ein) || json_integer_value(ein) < 0 ||
		    json_integer_value(ein) > 86400 * 7 || (tt && !json_is_string(tt)))
			what = "access_token, token_type and expires_in";
		else if (metadata_view_add_token(v, v->scopes_key, json_string_value(at),
						 json_string_value(tt),
						 now + (double)json_integer_value(ein)) < 0)
			what = "access_token";
	}
	if (what) {
		metadata_view_free(v);
		snprintf(err, errlen, "credentials.%s is missing or malformed", what);
		return -EINVAL;
	}
	return 0;
}

/* ---- requests ---- */

/* md_unhex - one hex digit, or -1 */
static int md_unhex(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* md_decode - percent-decode n bytes into a new string ('+' is a space when plus); NULL for a
 * broken escape or a decoded NUL */
static char *md_decode(const char *s, size_t n, bool plus)
{
	char *out = malloc(n + 1);
	if (!out)
		return NULL;
	size_t o = 0;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		if (c == '%') {
			int h = i + 1 < n ? md_unhex(s[i + 1]) : -1;
			int l = i + 2 < n ? md_unhex(s[i + 2]) : -1;
			if (h < 0 || l < 0 || (h == 0 && l == 0)) {
				free(out);
				return NULL;
			}
			c = (char)(h * 16 + l);
			i += 2;
		} else if (c == '+' && plus) {
			c = ' ';
		}
		out[o++] = c;
	}
	out[o] = '\0';
	return out;
}

/* The query parameters the emulator looks at (decoded; NULL when absent). */
struct md_query {
	char *recursive, *scopes, *audience, *format, *licenses;
};

/* md_query_free - free the decoded parameters */
static void md_query_free(struct md_query *q)
{
	free(q->recursive);
	free(q->scopes);
	free(q->audience);
	free(q->format);
	free(q->licenses);
}

/* md_parse_query - pick the known parameters out of a query string; the first of a repeated
 * one wins; -EINVAL for a broken escape or too many parameters, -ENOMEM */
static int md_parse_query(const char *q, size_t n, struct md_query *out)
{
	memset(out, 0, sizeof(*out));
	static const char *const names[] = { "recursive", "scopes", "audience", "format",
					     "licenses" };
	char **slots[] = { &out->recursive, &out->scopes, &out->audience, &out->format,
			   &out->licenses };
	size_t count = 0;
	for (size_t i = 0; i < n;) {
		size_t end = i;
		while (end < n && q[end] != '&')
			end++;
		if (end > i) {
			if (++count > METADATA_MAX_PARAMS)
				return -EINVAL;
			const char *eq = memchr(q + i, '=', end - i);
			size_t klen = eq ? (size_t)(eq - (q + i)) : end - i;
			char *key = md_decode(q + i, klen, true);
			if (!key)
				return -EINVAL;
			for (size_t k = 0; k < sizeof(names) / sizeof(names[0]); k++) {
				if (strcmp(key, names[k]) != 0 || *slots[k])
					continue;
				const char *val = eq ? eq + 1 : q + end;
				*slots[k] = md_decode(val, (size_t)(q + end - val), true);
				if (!*slots[k]) {
					free(key);
					return -EINVAL;
				}
			}
			free(key);
		}
		i = end + 1;
	}
	return 0;
}

/* md_set - fill a response with a copy of body */
static int md_set(struct metadata_response *out, int status, const char *ctype, const char *body)
{
	size_t n = strlen(body);
	out->body = malloc(n + 1);
	if (!out->body)
		return -ENOMEM;
	memcpy(out->body, body, n + 1);
	out->len = n;
	out->status = status;
	out->content_type = ctype;
	return 0;
}

/* md_set_json - fill a response with a JSON document (steals j) */
static int md_set_json(struct metadata_response *out, json_t *j)
{
	char *text = j ? json_dumps(j, JSON_COMPACT) : NULL;
	json_decref(j);
	if (!text)
		return -ENOMEM;
	out->body = text;
	out->len = strlen(text);
	out->status = 200;
	out->content_type = md_json;
	return 0;
}

/* md_account_json - {"aliases":["default"],"email":...,"scopes":[...]} */
static json_t *md_account_json(const struct metadata_view *v)
{
	json_t *sc = json_array();
	for (size_t i = 0; sc && i < v->nscopes; i++)
		json_array_append_new(sc, json_string(v->scopes[i]));
	return json_pack("{s:[s], s:s, s:o*}", "aliases", "default", "email", v->email, "scopes", sc);
}

/* md_scopes_text - the default scopes, one a line */
static int md_scopes_text(const struct metadata_view *v, struct metadata_response *out)
{
	size_t total = 1;
	for (size_t i = 0; i < v->nscopes; i++)
		total += strlen(v->scopes[i]) + 1;
	char *b = malloc(total);
	if (!b)
		return -ENOMEM;
	size_t off = 0;
	for (size_t i = 0; i < v->nscopes; i++) {
		size_t n = strlen(v->scopes[i]);
		memcpy(b + off, v->scopes[i], n);
		off += n;
		b[off++] = '\n';
	}
	b[off] = '\0';
	out->body = b;
	out->len = off;
	out->status = 200;
	out->content_type = md_text;
	return 0;
}

/* md_token - .../token: the cached token for the scope set, or what to fetch */
static int md_token(const struct metadata_view *v, const struct md_query *q, double now,
		    int min_left, struct metadata_response *out)
{
	char *key;
	if (q->scopes) {
		bool bad;
		key = metadata_scopes_key(q->scopes, &bad);
		if (!key)
			return md_set(out, 400, md_plain,
				      "The scopes parameter must be a comma-separated list of at most "
				      "32 scopes.\n");
	} else if (!(key = strdup(v->scopes_key ? v->scopes_key : ""))) {
		return -ENOMEM;
	}
	for (size_t i = 0; i < v->ntokens; i++) {
		const struct metadata_token *t = &v->tokens[i];
		if (strcmp(t->scopes, key) != 0 || t->expires - now < (double)min_left)
			continue;
		free(key);
		double left = t->expires - now;
		return md_set_json(out, json_pack("{s:s, s:I, s:s}", "access_token", t->access_token,
						  "expires_in", (json_int_t)(left > 0 ? left : 0),
						  "token_type", t->token_type));
	}
	out->need = METADATA_NEED_ACCESS;
	out->need_scopes = key;
	return 0;
}

/* md_identity - .../identity?audience=: always fetched (ID tokens are per audience) */
static int md_identity(const struct metadata_view *v, const struct md_query *q,
		       struct metadata_response *out)
{
	if (!v->id_tokens)
		return md_set(out, 404, md_plain,
			      "ID tokens are not available: the credentials of this sandbox cannot "
			      "mint them (see kode-gopher's docs/credentials.md).\n");
	size_t alen = q->audience ? strlen(q->audience) : 0;
	if (!alen)
		return md_set(out, 400, md_plain, "non-empty audience parameter required\n");
	if (alen > METADATA_MAX_FIELD || !ascii_visible(q->audience, alen))
		return md_set(out, 400, md_plain,
			      "The audience parameter must be at most 512 visible ASCII "
			      "characters.\n");
	if (q->format && strcmp(q->format, "full") && strcmp(q->format, "standard"))
		return md_set(out, 400, md_plain, "The format parameter must be standard or full.\n");
	if (!(out->need_audience = strdup(q->audience)))
		return -ENOMEM;
	out->need = METADATA_NEED_IDENTITY;
	out->need_full = q->format && strcmp(q->format, "full") == 0;
	out->need_licenses = q->licenses && strcasecmp(q->licenses, "true") == 0;
	return 0;
}

/* md_service_accounts - everything under instance/service-accounts/ */
static int md_service_accounts(const struct metadata_view *v, const char *rest,
			       const struct md_query *q, double now, int min_left,
			       struct metadata_response *out)
{
	bool recursive = q->recursive && strcasecmp(q->recursive, "true") == 0;
	bool has_email = strcmp(v->email, "default") != 0;
	if (*rest == '\0') {
		if (recursive) {
			json_t *o = json_object();
			if (o) {
				json_object_set_new(o, "default", md_account_json(v));
				if (has_email)
					json_object_set_new(o, v->email, md_account_json(v));
			}
			return md_set_json(out, o);
		}
		char list[METADATA_MAX_FIELD + 16];
		snprintf(list, sizeof(list), "default/\n%s%s", has_email ? v->email : "",
			 has_email ? "/\n" : "");
		return md_set(out, 200, md_text, list);
	}
	const char *slash = strchr(rest, '/');
	size_t alen = slash ? (size_t)(slash - rest) : strlen(rest);
	bool known = (alen == 7 && strncmp(rest, "default", 7) == 0) ||
		     (alen == strlen(v->email) && strncmp(rest, v->email, alen) == 0);
	if (!known)
		return md_set(out, 404, md_plain, "There is no such service account here.\n");
	const char *leaf = slash ? slash + 1 : "";
	if (*leaf == '\0') {
		if (recursive)
			return md_set_json(out, md_account_json(v));
		return md_set(out, 200, md_text,
			      v->id_tokens ? "aliases\nemail\nidentity\nscopes\ntoken\n"
					   : "aliases\nemail\nscopes\ntoken\n");
	}
	if (strcmp(leaf, "email") == 0)
		return md_set(out, 200, md_text, v->email);
	if (strcmp(leaf, "aliases") == 0)
		return md_set(out, 200, md_text, "default\n");
	if (strcmp(leaf, "scopes") == 0)
		return md_scopes_text(v, out);
	if (strcmp(leaf, "token") == 0)
		return md_token(v, q, now, min_left, out);
	if (strcmp(leaf, "identity") == 0)
		return md_identity(v, q, out);
	return md_set(out, 404, md_plain, "Not found.\n");
}

/* metadata_answer - see metadata.h */
int metadata_answer(const struct metadata_view *v, const struct metadata_request *rq,
		    double now, int min_left, struct metadata_response *out)
{
	memset(out, 0, sizeof(*out));
	if (rq->forwarded)
		return md_set(out, 403, md_plain,
			      "Requests with X-Forwarded-For are refused: this metadata server "
			      "answers only programs in its own sandbox, directly.\n");
	if (!rq->flavor || strcmp(rq->flavor, "Google") != 0)
		return md_set(out, 403, md_plain,
			      "Missing required header \"Metadata-Flavor: Google\".\n");
	const char *t = rq->target;
	size_t n = rq->target_len;
	if (!t || n == 0 || t[0] != '/' || n > METADATA_MAX_TARGET || memchr(t, '\0', n))
		return md_set(out, 400, md_plain, "Bad request target.\n");
	if (!rq->method || (strcmp(rq->method, "GET") != 0 && strcmp(rq->method, "HEAD") != 0))
		return md_set(out, 405, md_plain, "Only GET is served here.\n");
	const char *qm = memchr(t, '?', n);
	size_t plen = qm ? (size_t)(qm - t) : n;
	char *path = md_decode(t, plen, false);
	if (!path)
		return md_set(out, 400, md_plain, "Bad percent-encoding in the path.\n");
	struct md_query q;
	int rc = md_parse_query(qm ? qm + 1 : "", qm ? n - plen - 1 : 0, &q);
	if (rc < 0) {
		free(path);
		md_query_free(&q);
		return md_set(out, 400, md_plain, "Bad query string.\n");
	}
	size_t pre = strlen(MD_PREFIX);
	const char *rest = strncmp(path, MD_PREFIX, pre) == 0 ? path + pre : NULL;
	static const char sa[] = "instance/service-accounts";
	if (strcmp(path, "/") == 0) {
		rc = md_set(out, 200, md_text, "computeMetadata/\n");
	} else if (!rest) {
		rc = md_set(out, 404, md_plain, "Not found.\n");
	} else if (strcmp(rest, "project/project-id") == 0) {
		rc = v->project_id ? md_set(out, 200, md_text, v->project_id)
				   : md_set(out, 404, md_plain,
					    "The project is not known: start kode-gopher with "
					    "--project or GOOGLE_CLOUD_PROJECT.\n");
	} else if (strcmp(rest, "project/numeric-project-id") == 0) {
		rc = v->numeric_project_id ? md_set(out, 200, md_text, v->numeric_project_id)
					   : md_set(out, 404, md_plain,
						    "The project number is not known here.\n");
	} else if (strcmp(rest, "universe/universe-domain") == 0 ||
		   strcmp(rest, "universe/universe_domain") == 0) {
		rc = md_set(out, 200, md_text, v->universe_domain);
	} else if (strncmp(rest, sa, sizeof(sa) - 1) == 0 &&
		   (rest[sizeof(sa) - 1] == '\0' || rest[sizeof(sa) - 1] == '/')) {
		const char *sub = rest + sizeof(sa) - 1;
		rc = md_service_accounts(v, *sub ? sub + 1 : sub, &q, now, min_left, out);
	} else {
		rc = md_set(out, 404, md_plain, "Not found.\n");
	}
	free(path);
	md_query_free(&q);
	if (rc < 0)
		metadata_response_free(out);
	return rc;
}

/* metadata_response_free - free the body and what was needed (a token body is wiped) */
void metadata_response_free(struct metadata_response *r)
{
	if (!r)
		return;
	if (r->body)
		OPENSSL_cleanse(r->body, r->len);
	free(r->body);
	free(r->need_scopes);
	free(r->need_audience);
	memset(r, 0, sizeof(*r));
}
