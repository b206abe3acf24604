/*
 * diag.c - parse `go build` / `go vet` / go.mod error output into diagnostics.
 *
 * Called by agent/pipeline.c after a failed build. The toolchain prints
 *   # app/helper                       package header (skipped)
 *   ./main.go:12:5: undefined: x       file:line:col: message
 *   go.mod:4: unknown directive: foo   file:line: message
 *   \t./main.go:5:6: other decl...     continuation of the previous message
 *   go: finding module for package x   progress noise (skipped)
 *   vet: ./main.go:6:17: message       go vet's prefix (dropped)
 * Paths are relative to the build directory, sometimes with "./", sometimes absolute; all are
 * turned back into what the model sent. Errors in the generated main are reported against the
 * snippet's run function, since that is what the model can change.
 */
#include "agent/diag.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* is_noise - progress lines the go command prints that are not errors */
static bool is_noise(const char *l, size_t n)
{
	static const char *const noise[] = { "go: finding module", "go: downloading ",
					     "go: found ", "go: added ", "go: upgraded ",
					     "go: extracting " };
	for (size_t i = 0; i < sizeof(noise) / sizeof(noise[0]); i++) {
		size_t k = strlen(noise[i]);
		if (n >= k && memcmp(l, noise[i], k) == 0)
			return true;
	}
	return false;
}

/* strip_path - drop app_dir/ and ./ prefixes from a path [p, p+*n); returns the new start */
static const char *strip_path(const char *p, size_t *n, const char *app_dir)
{
	size_t al = app_dir ? strlen(app_dir) : 0;
	while (al > 1 && app_dir[al - 1] == '/')
		al--;
	if (al && *n > al + 1 && memcmp(p, app_dir, al) == 0 && p[al] == '/') {
		p += al + 1;
		*n -= al + 1;
	}
	while (*n > 2 && p[0] == '.' && p[1] == '/') {
		p += 2;
		*n -= 2;
	}
	return p;
}

/* diag_clean_output - see diag.h */
char *diag_clean_output(const char *out, size_t len, const char *app_dir, size_t *outlen)
{
	char *dst = malloc(len + 1);
	if (!dst)
		return NULL;
	size_t al = app_dir ? strlen(app_dir) : 0;
	while (al > 1 && app_dir[al - 1] == '/')
		al--;
	size_t o = 0;
	bool bol = true;
	for (size_t i = 0; i < len;) {
		if (bol) {
			/* keep the tabs of continuation lines, drop a "./" right after them */
			while (i < len && out[i] == '\t')
				dst[o++] = out[i++];
			if (i >= len)
				break;
			if (i + 1 < len && out[i] == '.' && out[i + 1] == '/') {
				i += 2;
				bol = false;
				continue;
			}
		}
		bol = false;
		if (al && i + al < len && memcmp(out + i, app_dir, al) == 0 && out[i + al] == '/' &&
		    (i == 0 || out[i - 1] == ' ' || out[i - 1] == '\t' || out[i - 1] == '\n' ||
		     out[i - 1] == '(' || out[i - 1] == '"')) {
			i += al + 1;
			continue;
		}
		dst[o] = out[i];
		if (out[i] == '\n')
			bol = true;
		o++;
		i++;
	}
	dst[o] = '\0';
	*outlen = o;
	return dst;
}

/* parse_num - up to 9 digits at *p; advances; -1 when there are none */
static int parse_num(const char **p, const char *end)
{
	int v = 0, k = 0;
	while (*p < end && **p >= '0' && **p <= '9' && k < 9) {
		v = v * 10 + (**p - '0');
		(*p)++;
		k++;
	}
	if (k == 0 || (*p < end && **p >= '0' && **p <= '9'))
		return -1;
	return v;
}

/* split_position - recognise "file:line[:col]: message" in one line */
static bool split_position(const char *l, size_t n, size_t *flen, int *line, int *col,
			   const char **msg, size_t *mlen)
{
	const char *end = l + n;
	for (const char *c = l; c < end; c++) {
		if (*c == ' ' || *c == '\t')
			return false;
		if (*c != ':')
			continue;
		/* the first colon ends the file name: names with colons are not ours */
		if (c == l)
			return false;
		const char *p = c + 1;
		int ln = parse_num(&p, end);
		if (ln < 0)
			return false;
		int cl = 0;
		if (p < end && *p == ':' && p + 1 < end && p[1] >= '0' && p[1] <= '9') {
			p++;
			cl = parse_num(&p, end);
			if (cl < 0)
				return false;
		}
		if (p + 1 >= end || p[0] != ':' || p[1] != ' ')
			return false;
		*flen = (size_t)(c - l);
		*line = ln;
		*col = cl;
		*msg = p + 2;
		*mlen = (size_t)(end - *msg);
		return true;
	}
	return false;
}

/* append_msg - add a continuation line to the last diagnostic, within DIAG_MAX_MESSAGE */
static int append_msg(struct diag *d, const char *l, size_t n)
{
	size_t cur = strlen(d->message);
	if (cur + 2 + n > DIAG_MAX_MESSAGE)
		return 0;
	char *m = realloc(d->message, cur + 2 + n + 1);
	if (!m)
		return -ENOMEM;
	m[cur] = '\n';
	m[cur + 1] = '\t';
	memcpy(m + cur + 2, l, n);
	m[cur + 2 + n] = '\0';
	d->message = m;
	return 0;
}

/* push - append one diagnostic; the generated main's errors are pointed at run */
static int push(struct diag_list *dl, const struct diag_opts *o, const char *file, size_t flen,
		int line, int col, const char *msg, size_t mlen)
{
	if (dl->n >= DIAG_MAX_ITEMS)
		return 0;
	if (mlen > DIAG_MAX_MESSAGE)
		mlen = DIAG_MAX_MESSAGE;
	struct diag d = { 0 };
	bool gen = o && o->gen_file && flen == strlen(o->gen_file) &&
		   memcmp(file, o->gen_file, flen) == 0;
	if (gen) {
		const char *target = o->run_file ? o->run_file : o->gen_file;
		d.file = strdup(target);
		d.line = o->run_file ? o->run_line : line;
		d.column = o->run_file ? (o->run_line ? 1 : 0) : col;
		const char *fmt = "the generated main cannot call your run function (%s:%d:%d: %.*s); a "
				  "snippet must declare func run(ctx context.Context) (any, error) and "
				  "must not declare main or names starting with kodeGopher";
		int need = snprintf(NULL, 0, fmt, o->gen_file, line, col, (int)mlen, msg);
		d.message = need > 0 ? malloc((size_t)need + 1) : NULL;
		if (d.message)
			snprintf(d.message, (size_t)need + 1, fmt, o->gen_file, line, col, (int)mlen,
				 msg);
	} else {
		d.file = strndup(file, flen);
		d.line = line;
		d.column = col;
		d.message = strndup(msg, mlen);
	}
	if (!d.file || !d.message) {
		free(d.file);
		free(d.message);
		return -ENOMEM;
	}
	struct diag *ni = realloc(dl->items, (dl->n + 1) * sizeof(*ni));
	if (!ni) {
		free(d.file);
		free(d.message);
		return -ENOMEM;
	}
	dl->items = ni;
	dl->items[dl->n++] = d;
	return 0;
}

/* diag_parse - see diag.h */
int diag_parse(const char *out, size_t len, const struct diag_opts *o, struct diag_list *dl)
{
	dl->items = NULL;
	dl->n = 0;
	bool last_open = false; /* may the next continuation line extend the last diagnostic */
	const char *p = out, *end = out + len;
	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		const char *le = nl ? nl : end;
		size_t n = (size_t)(le - p);
		const char *l = p;
		p = nl ? nl + 1 : end;
		if (n && l[n - 1] == '\r')
			n--;
		if (n == 0) {
			last_open = false;
			continue;
		}
		if (l[0] == '\t' || (n > 4 && memcmp(l, "    ", 4) == 0)) {
			if (last_open && dl->n) {
				while (n && (*l == '\t' || *l == ' ')) {
					l++;
					n--;
				}
				size_t fl = n;
				const char *c = strip_path(l, &fl, o ? o->app_dir : NULL);
				if (append_msg(&dl->items[dl->n - 1], c, fl) < 0)
					goto nomem;
			}
			continue;
		}
		last_open = false;
		if (l[0] == '#' || is_noise(l, n))
			continue;
		if (n > 5 && memcmp(l, "vet: ", 5) == 0) {
			l += 5;
			n -= 5;
		}
		size_t flen, mlen;
		int line, col;
		const char *msg;
		if (!split_position(l, n, &flen, &line, &col, &msg, &mlen))
			continue;
		if (mlen == strlen("too many errors") && memcmp(msg, "too many errors", mlen) == 0)
			continue;
		size_t sl = flen;
		const char *file = strip_path(l, &sl, o ? o->app_dir : NULL);
		if (dl->n >= DIAG_MAX_ITEMS)
			break;
		if (push(dl, o, file, sl, line, col, msg, mlen) < 0)
			goto nomem;
		last_open = true;
	}
	return 0;
nomem:
	diag_list_free(dl);
	return -ENOMEM;
}

/* diag_list_free - release every diagnostic */
void diag_list_free(struct diag_list *dl)
{
	for (size_t i = 0; i < dl->n; i++) {
		free(dl->items[i].file);
		free(dl->items[i].message);
	}
	free(dl->items);
	dl->items = NULL;
	dl->n = 0;
}

/* diag_first_error - see diag.h */
void diag_first_error(const char *out, size_t len, const struct diag_list *dl, char *buf,
		      size_t buflen)
{
	if (buflen == 0)
		return;
	buf[0] = '\0';
	if (dl && dl->n) {
		const struct diag *d = &dl->items[0];
		size_t ml = strcspn(d->message, "\n");
		if (d->column)
			snprintf(buf, buflen, "%s:%d:%d: %.*s", d->file, d->line, d->column, (int)ml,
				 d->message);
		else if (d->line)
			snprintf(buf, buflen, "%s:%d: %.*s", d->file, d->line, (int)ml, d->message);
		else
			snprintf(buf, buflen, "%s: %.*s", d->file, (int)ml, d->message);
		return;
	}
	const char *p = out, *end = out + len;
	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		const char *le = nl ? nl : end;
		size_t n = (size_t)(le - p);
		const char *l = p;
		p = nl ? nl + 1 : end;
		while (n && (l[n - 1] == '\r' || l[n - 1] == ' '))
			n--;
		if (n == 0 || l[0] == '#' || l[0] == '\t' || is_noise(l, n))
			continue;
		/* "go: errors parsing go.mod:" introduces the real error on the next line */
		if (l[n - 1] == ':' && p < end)
			continue;
		if (n >= buflen)
			n = buflen - 1;
		memcpy(buf, l, n);
		buf[n] = '\0';
		return;
	}
}

/* diag_to_json - see diag.h */
json_t *diag_to_json(const struct diag_list *dl)
{
	json_t *a = json_array();
	if (!a)
		return NULL;
	for (size_t i = 0; i < dl->n; i++) {
		const struct diag *d = &dl->items[i];
		json_t *o = json_object();
		if (!o || json_array_append_new(a, o) < 0 ||
		    json_object_set_new(o, "file", diag_json_string(d->file, strlen(d->file))) < 0 ||
		    json_object_set_new(o, "line", json_integer(d->line)) < 0 ||
		    json_object_set_new(o, "column", json_integer(d->column)) < 0 ||
		    json_object_set_new(o, "message",
					diag_json_string(d->message, strlen(d->message))) < 0) {
			json_decref(a);
			return NULL;
		}
	}
	return a;
}

/* utf8_seq - length of the valid UTF-8 sequence at s (RFC 3629: no overlongs, no surrogates,
 * nothing above U+10FFFF), or 0 when the byte at s does not start one */
static size_t utf8_seq(const unsigned char *s, size_t n)
{
	unsigned char c = s[0];
	if (c < 0x80)
		return 1;
	size_t k;
	unsigned char lo = 0x80, hi = 0xBF;
	if (c >= 0xC2 && c <= 0xDF)
		k = 2;
	else if (c >= 0xE0 && c <= 0xEF) {
		k = 3;
		if (c == 0xE0)
			lo = 0xA0;
		else if (c == 0xED)
			hi = 0x9F;
	} else if (c >= 0xF0 && c <= 0xF4) {
		k = 4;
		if (c == 0xF0)
			lo = 0x90;
		else if (c == 0xF4)
			hi = 0x8F;
	} else
		return 0;
	if (n < k)
		return 0;
	if (s[1] < lo || s[1] > hi)
		return 0;
	for (size_t i = 2; i < k; i++)
		if (s[i] < 0x80 || s[i] > 0xBF)
			return 0;
	return k;
}

/* diag_json_string - see diag.h */
json_t *diag_json_string(const char *s, size_t len)
{
	const unsigned char *u = (const unsigned char *)s;
	size_t bad = 0;
	for (size_t i = 0; i < len;) {
		size_t k = utf8_seq(u + i, len - i);
		if (k == 0) {
			bad++;
			i++;
		} else
			i += k;
	}
	if (bad == 0)
		return json_stringn(s, len);
	char *c = malloc(len + bad * 2 + 1);
	if (!c)
		return NULL;
	size_t o = 0;
	for (size_t i = 0; i < len;) {
		size_t k = utf8_seq(u + i, len - i);
		if (k == 0) {
			memcpy(c + o, "\xef\xbf\xbd", 3);
			o += 3;
			i++;
		} else {
			memcpy(c + o, s + i, k);
			o += k;
			i += k;
		}
	}
	json_t *j = json_stringn(c, o);
	free(c);
	return j;
}
