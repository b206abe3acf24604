/*
 * normalize.c - step 1 of execute_go_code: check, classify and rewrite the files the model sent.
 *
 * Called by the agent's execute pipeline (agent/pipeline.c) inside the sandbox, before anything
 * is written under /app. Everything here is untrusted input: paths are checked against a small
 * alphabet and shape, sizes are bounded before any parsing, and the Go source is only lexed
 * (agent/golex.c), never evaluated. Every refusal is a sentence the model can act on; user bytes
 * quoted in it are reduced to printable UTF-8 so the sentence survives JSON encoding.
 *
 * Symlinks cannot be sent (a file is a path and its content), and the writer (agent/pipeline.c)
 * creates every file with O_NOFOLLOW|O_EXCL (O_TRUNC instead of O_EXCL under persist/, which
 * survives between calls) and walks directories with O_NOFOLLOW, so a link planted by an earlier
 * run cannot redirect a write.
 *
 * A snippet is rewritten by replacing the package name token of each root file with `main`, in
 * place: every other byte stays, so the compiler's line numbers match what the model sent.
 */
#include "agent/normalize.h"

#include "agent/golex.h"

#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* runtime/embed.S: runtime/main.go.tmpl, NUL-terminated */
extern const char embed_main_go_tmpl[];
extern const uint64_t embed_main_go_tmpl_size;

#define NORM_RUN_SIG   "func run(ctx context.Context) (any, error)"
#define NORM_MAX_SEGMENT 255 /* NAME_MAX: longer segments cannot be created */
#define NORM_QUOTE_MAX 80    /* bytes of user text quoted in an error */

/* What normalize learned about one Go file the build will compile. */
struct norm_scan {
	int go;                /* a .go file the go command builds (not _test.go, not ignored) */
	int root;              /* in the root directory: part of the main package */
	size_t name_off;       /* the package name token */
	size_t name_len;
	unsigned main_line;    /* top-level func main; 0 if none */
	unsigned run_line;     /* top-level func run; 0 if none */
	unsigned upper_run_line; /* top-level func Run, for a hint */
	const char *run_problem; /* NULL: run has the snippet signature */
	size_t run_off;        /* offset of run's `func` keyword */
};

static const char norm_param_problem[] =
	"its one parameter must be a context.Context, spelled exactly context.Context "
	"(import \"context\" without an alias)";
static const char norm_result_problem[] =
	"its results must be (any, error), where interface{} may stand for any";
static const char norm_typeparam_problem[] = "it must not have type parameters";

/* norm_utf8_len - length of the valid UTF-8 sequence at s (n bytes available), 0 if invalid */
static size_t norm_utf8_len(const unsigned char *s, size_t n)
{
	size_t need;

	if (s[0] < 0x80)
		return 1;
	if (s[0] >= 0xC2 && s[0] <= 0xDF)
		need = 2;
	else if (s[0] >= 0xE0 && s[0] <= 0xEF)
		need = 3;
	else if (s[0] >= 0xF0 && s[0] <= 0xF4)
		need = 4;
	else
		return 0;
	if (n < need)
		return 0;
	for (size_t i = 1; i < need; i++)
		if ((s[i] & 0xC0) != 0x80)
			return 0;
	if ((s[0] == 0xE0 && s[1] < 0xA0) || (s[0] == 0xED && s[1] > 0x9F) ||
	    (s[0] == 0xF0 && s[1] < 0x90) || (s[0] == 0xF4 && s[1] > 0x8F))
		return 0; /* overlong, surrogate, or beyond U+10FFFF */
	return need;
}

/* norm_quote - user bytes as printable UTF-8 for an error sentence, cut with "..." if long */
static const char *norm_quote(char *buf, size_t bufsz, const char *s, size_t len)
{
	const unsigned char *u = (const unsigned char *)s;
	size_t o = 0, i = 0;

	while (i < len) {
		size_t k = norm_utf8_len(u + i, len - i);

		if (o + 4 + 3 + 1 > bufsz || o >= NORM_QUOTE_MAX) {
			memcpy(buf + o, "...", 3);
			o += 3;
			break;
		}
		if (k == 1 && (u[i] < 0x20 || u[i] == 0x7F)) {
			buf[o++] = (u[i] == '\t' || u[i] == '\n' || u[i] == '\r') ? ' ' : '?';
			i++;
		} else if (k == 0) {
			buf[o++] = '?';
			i++;
		} else {
			memcpy(buf + o, u + i, k);
			o += k;
			i += k;
		}
	}
	buf[o] = '\0';
	return buf;
}

/* norm_err - format the sentence for the model; a cut never splits a UTF-8 character */
static void __attribute__((format(printf, 3, 4)))
norm_err(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (!err || errlen == 0)
		return;
	va_start(ap, fmt);
	n = vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
	if (n < 0) {
		err[0] = '\0';
		return;
	}
	if ((size_t)n < errlen)
		return;

	size_t end = strlen(err), lead = end;

	while (lead > 0 && ((unsigned char)err[lead - 1] & 0xC0) == 0x80)
		lead--;
	if (lead > 0 && (unsigned char)err[lead - 1] >= 0xC0 &&
	    norm_utf8_len((unsigned char *)err + lead - 1, end - lead + 1) == 0)
		err[lead - 1] = '\0';
}

/* norm_basename - the last segment of a slash-separated path */
static const char *norm_basename(const char *path)
{
	const char *slash = strrchr(path, '/');

	return slash ? slash + 1 : path;
}

/* norm_path_char - the alphabet of paths: letters, digits, - _ . and / */
static int norm_path_char(unsigned char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       c == '-' || c == '_' || c == '.' || c == '/';
}

/*
 * norm_check_path - 0 if path may be written under /app, else -EINVAL with the reason.
 * A NUL cannot occur inside a C string: the caller must reject JSON strings that hold one
 * (jansson's json_string_length differs from strlen then) instead of silently cutting them.
 */
static int norm_check_path(const char *path, char *err, size_t errlen)
{
	char q[NORM_QUOTE_MAX + 8];
	size_t len = path ? strlen(path) : 0;

	if (len == 0) {
		norm_err(err, errlen, "a file has an empty path: give every file a relative path such as main.go");
		return -EINVAL;
	}
	norm_quote(q, sizeof(q), path, len);
	if (len > NORM_MAX_PATH) {
		norm_err(err, errlen, "file path \"%s\" is %zu bytes long; the limit is %d", q, len,
			 NORM_MAX_PATH);
		return -EINVAL;
	}
	if (path[0] == '/') {
		norm_err(err, errlen, "file path \"%s\" is absolute: paths are relative to the module "
			 "root, like main.go or util/strings.go", q);
		return -EINVAL;
	}
	if (strchr(path, '\\')) {
		norm_err(err, errlen, "file path \"%s\" contains a backslash: separate directories with /", q);
		return -EINVAL;
	}
	for (size_t i = 0; i < len; i++)
		if (!norm_path_char((unsigned char)path[i])) {
			norm_err(err, errlen, "file path \"%s\" contains a character other than letters, "
				 "digits, '-', '_', '.' and '/'", q);
			return -EINVAL;
		}
	for (const char *seg = path;;) {
		const char *slash = strchr(seg, '/');
		size_t n = slash ? (size_t)(slash - seg) : strlen(seg);

		if (n == 0) {
			norm_err(err, errlen, "file path \"%s\" has an empty segment (a leading, trailing or "
				 "doubled /)", q);
			return -EINVAL;
		}
		if (n == 1 && seg[0] == '.') {
			norm_err(err, errlen, "file path \"%s\" has a \".\" segment: write the path without it", q);
			return -EINVAL;
		}
		if (n == 2 && seg[0] == '.' && seg[1] == '.') {
			norm_err(err, errlen, "file path \"%s\" contains \"..\": every file must stay inside the "
				 "module directory", q);
			return -EINVAL;
		}
		if (n > NORM_MAX_SEGMENT) {
			norm_err(err, errlen, "file path \"%s\" has a segment longer than %d bytes", q,
				 NORM_MAX_SEGMENT);
			return -EINVAL;
		}
		if (!slash)
			break;
		seg = slash + 1;
	}

	const char *base = norm_basename(path);

	if (!strcmp(base, "go.mod") || !strcmp(base, "go.sum") || !strcmp(base, "go.work") ||
	    !strcmp(base, "go.work.sum")) {
		norm_err(err, errlen, "\"%s\" cannot be sent: kode-gopher writes go.mod and go.sum from its "
			 "lockfile and resolves other imports itself; send your files without it", q);
		return -EINVAL;
	}
	if (!strcmp(base, NORM_GEN_MAIN_FILE)) {
		norm_err(err, errlen, "\"%s\" is reserved for the main that kode-gopher generates; rename "
			 "the file", q);
		return -EINVAL;
	}
	return 0;
}

/* norm_check_files - count, paths, duplicates and sizes, before any byte of content is parsed */
static int norm_check_files(const struct src_file *in, size_t n, char *err, size_t errlen)
{
	size_t total = 0;
	char q[NORM_QUOTE_MAX + 8];

	if (n == 0) {
		norm_err(err, errlen, "no files were sent: send code, or files with at least main.go");
		return -EINVAL;
	}
	if (n > NORM_MAX_FILES) {
		norm_err(err, errlen, "%zu files were sent; the limit is %d", n, NORM_MAX_FILES);
		return -EINVAL;
	}
	for (size_t i = 0; i < n; i++) {
		int rc = norm_check_path(in[i].path, err, errlen);

		if (rc)
			return rc;
		if (!in[i].content && in[i].len) {
			norm_err(err, errlen, "%s has no content", in[i].path);
			return -EINVAL;
		}
		if (in[i].len > NORM_MAX_FILE_BYTES) {
			norm_err(err, errlen, "%s is %zu bytes; the limit is %d bytes per file", in[i].path,
				 in[i].len, NORM_MAX_FILE_BYTES);
			return -EINVAL;
		}
		total += in[i].len;
		if (total > NORM_MAX_TOTAL_BYTES) {
			norm_err(err, errlen, "the files add up to more than %d bytes, the limit for one call",
				 NORM_MAX_TOTAL_BYTES);
			return -EINVAL;
		}
	}
	/* Paths are clean by now (no "." or ".." or empty segments), so equal means equal. */
	for (size_t i = 0; i < n; i++)
		for (size_t j = i + 1; j < n; j++) {
			const char *a = in[i].path, *b = in[j].path;
			size_t la = strlen(a), lb = strlen(b);

			if (la == lb && !memcmp(a, b, la)) {
				norm_err(err, errlen, "%s was sent twice: each path may appear once", a);
				return -EINVAL;
			}
			if (la > lb) {
				const char *t = a;

				a = b;
				b = t;
				la = lb;
			}
			if (!strncmp(a, b, la) && b[la] == '/') {
				norm_quote(q, sizeof(q), a, la);
				norm_err(err, errlen, "%s is sent as a file but %s needs it to be a directory",
					 q, b);
				return -EINVAL;
			}
		}
	return 0;
}

/* norm_has_suffix - whether s ends with suffix */
static int norm_has_suffix(const char *s, const char *suffix)
{
	size_t a = strlen(s), b = strlen(suffix);

	return a >= b && !memcmp(s + a - b, suffix, b);
}

/*
 * norm_built_go - whether the go command compiles this file: a .go file, not a test, and not
 * under a name it ignores (leading '.' or '_', or a testdata directory). Ignored files are
 * written unchanged and never parsed, so a broken one there cannot fail a call.
 */
static int norm_go_file(const char *path, int tests)
{
	if (!norm_has_suffix(path, ".go") || (!tests && norm_has_suffix(path, "_test.go")))
		return 0;
	for (const char *seg = path; seg;) {
		const char *slash = strchr(seg, '/');
		size_t n = slash ? (size_t)(slash - seg) : strlen(seg);

		if (seg[0] == '.' || seg[0] == '_' || (n == 8 && !memcmp(seg, "testdata", 8) && slash))
			return 0;
		seg = slash ? slash + 1 : NULL;
	}
	return 1;
}

static int norm_built_go(const char *path)
{
	return norm_go_file(path, 0);
}

/* norm_package_clause - find `package <name>`, which must be the first token */
static int norm_package_clause(const struct src_file *f, struct golex *lx, struct norm_scan *sc,
			       char *err, size_t errlen)
{
	struct golex_token t;
	char q[NORM_QUOTE_MAX + 8];

	golex_init(lx, f->content ? f->content : "", f->len);
	golex_next(lx, &t);
	if (!golex_is(lx, &t, "package")) {
		if (t.kind == GOLEX_EOF)
			norm_err(err, errlen, "%s: no package clause: a Go file must start with `package "
				 "<name>` (only comments may come before it), but this one is empty", f->path);
		else
			norm_err(err, errlen, "%s: no package clause: a Go file must start with `package "
				 "<name>` (only comments may come before it), but line %u starts with `%s`",
				 f->path, t.line, norm_quote(q, sizeof(q), lx->src + t.off, t.len));
		return -EINVAL;
	}
	golex_next(lx, &t);
	if (t.kind != GOLEX_IDENT) {
		norm_err(err, errlen, "%s:%u: no package clause: `package` must be followed by the package "
			 "name", f->path, t.line);
		return -EINVAL;
	}
	if (golex_is(lx, &t, "_")) {
		norm_err(err, errlen, "%s:%u: `package _` is not allowed: give the package a name", f->path,
			 t.line);
		return -EINVAL;
	}
	sc->name_off = t.off;
	sc->name_len = t.len;
	return 0;
}

/* norm_result_type - whether the token t (lx just past it) starts the wanted result type */
static int norm_result_type(struct golex *lx, const struct golex_token *t, int want_any)
{
	struct golex_token u;

	if (!want_any)
		return golex_is(lx, t, "error");
	if (golex_is(lx, t, "any"))
		return 1;
	if (!golex_is(lx, t, "interface"))
		return 0;
	golex_next(lx, &u);
	if (!golex_is_punct(lx, &u, '{'))
		return 0;
	golex_next(lx, &u);
	return golex_is_punct(lx, &u, '}');
}

/* norm_run_result - one result of run, unnamed or named: `any`, `v any`, `err error`... */
static int norm_run_result(struct golex *lx, int want_any)
{
	struct golex_token t, u;
	struct golex save;

	golex_next(lx, &t);
	save = *lx;
	if (norm_result_type(lx, &t, want_any)) {
		struct golex peek = *lx;

		golex_next(&peek, &u);
		if (golex_is_punct(&peek, &u, ',') || golex_is_punct(&peek, &u, ')'))
			return 1;
	}
	*lx = save;
	if (t.kind != GOLEX_IDENT)
		return 0;
	golex_next(lx, &t);
	return norm_result_type(lx, &t, want_any);
}

/*
 * norm_run_problem - NULL if the declaration after `func run` (lx is just past the name) is
 * (ctx context.Context) (any, error), else what is wrong. The parameter's type is matched as
 * text: an aliased import of "context" cannot be told apart from another package here.
 */
static const char *norm_run_problem(struct golex *lx)
{
	struct golex_token t, u;

	golex_next(lx, &t);
	if (golex_is_punct(lx, &t, '['))
		return norm_typeparam_problem;
	golex_next(lx, &t);
	if (t.kind != GOLEX_IDENT)
		return norm_param_problem;
	golex_next(lx, &u);
	if (!golex_is_punct(lx, &u, '.')) { /* t named the parameter; the type follows */
		t = u;
		golex_next(lx, &u);
	}
	if (!golex_is(lx, &t, "context") || !golex_is_punct(lx, &u, '.'))
		return norm_param_problem;
	golex_next(lx, &t);
	if (!golex_is(lx, &t, "Context"))
		return norm_param_problem;
	golex_next(lx, &t);
	if (golex_is_punct(lx, &t, ','))
		golex_next(lx, &t);
	if (!golex_is_punct(lx, &t, ')'))
		return norm_param_problem;

	golex_next(lx, &t);
	if (!golex_is_punct(lx, &t, '(') || !norm_run_result(lx, 1))
		return norm_result_problem;
	golex_next(lx, &t);
	if (!golex_is_punct(lx, &t, ',') || !norm_run_result(lx, 0))
		return norm_result_problem;
	golex_next(lx, &t);
	if (golex_is_punct(lx, &t, ','))
		golex_next(lx, &t);
	if (!golex_is_punct(lx, &t, ')'))
		return norm_result_problem;
	return NULL;
}

/* norm_scan_funcs - note the depth-0 `func main(`, `func run(` and `func Run(` declarations */
static void norm_scan_funcs(struct golex *lx, struct norm_scan *sc)
{
	struct golex_token t;
	size_t depth = 0;

	for (golex_next(lx, &t); t.kind != GOLEX_EOF; golex_next(lx, &t)) {
		if (t.kind == GOLEX_PUNCT) {
			char c = lx->src[t.off];

			if (c == '(' || c == '[' || c == '{')
				depth++;
			else if ((c == ')' || c == ']' || c == '}') && depth > 0)
				depth--;
			continue;
		}
		if (depth != 0 || !golex_is(lx, &t, "func"))
			continue;

		/* Look ahead on a copy: the main loop still has to count the brackets. A method
		 * (`func (r T) run(`) or a function type has `(` here, not a name. */
		struct golex la = *lx;
		struct golex_token name, open;

		golex_next(&la, &name);
		if (name.kind != GOLEX_IDENT)
			continue;
		struct golex after_name = la;

		golex_next(&la, &open);
		if (!golex_is_punct(&la, &open, '(') && !golex_is_punct(&la, &open, '['))
			continue;
		if (golex_is(&la, &name, "main") && !sc->main_line) {
			sc->main_line = t.line;
		} else if (golex_is(&la, &name, "Run") && !sc->upper_run_line) {
			sc->upper_run_line = t.line;
		} else if (golex_is(&la, &name, "run") && (!sc->run_line || !sc->run_problem)) {
			const char *problem = norm_run_problem(&after_name);

			/* with several (a compile error anyway), report a wrong one */
			if (!sc->run_line || problem) {
				sc->run_line = t.line;
				sc->run_off = t.off;
				sc->run_problem = problem;
			}
		}
	}
}

/* norm_excerpt - run's declaration up to its body, on one line, for the error sentence */
static const char *norm_excerpt(char *buf, size_t bufsz, const char *src, size_t len, size_t off)
{
	char line[NORM_QUOTE_MAX + 2]; /* one byte more than norm_quote keeps, so it adds "..." */
	size_t o = 0;
	int parens = 0, space = 0;

	for (size_t i = off; i < len && o <= NORM_QUOTE_MAX; i++) {
		char c = src[i];

		if (c == '(')
			parens++;
		else if (c == ')')
			parens--;
		else if (c == '{' && parens <= 0)
			break;
		if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
			space = 1;
			continue;
		}
		if (space && o > 0)
			line[o++] = ' ';
		space = 0;
		if (o <= NORM_QUOTE_MAX)
			line[o++] = c;
	}
	return norm_quote(buf, bufsz, line, o);
}

/*
 * norm_cgo_line - the line of an `import "C"` among the file's imports (lx just past the
 * package clause), 0 if none. With CGO_ENABLED=0 the go command drops such a file as if it
 * were not there, and the model would read "undefined: run" about code it can see. A file
 * with a //go:build line before its package clause may be the cgo half of a pair, so it is
 * left to the go command.
 */
static unsigned norm_cgo_line(const struct src_file *f, const struct golex *after_clause)
{
	struct golex lx = *after_clause;
	struct golex_token t;

	if (!f->content || memmem(f->content, after_clause->pos, "//go:build", 10))
		return 0;
	for (golex_next(&lx, &t); golex_is(&lx, &t, "import"); golex_next(&lx, &t)) {
		int group = 0;

		golex_next(&lx, &t);
		if (golex_is_punct(&lx, &t, '(')) {
			group = 1;
			golex_next(&lx, &t);
		}
		while (t.kind != GOLEX_EOF) {
			if (group && golex_is_punct(&lx, &t, ')'))
				break;
			if (t.kind == GOLEX_LITERAL && t.len == 3 && lx.src[t.off + 1] == 'C' &&
			    (lx.src[t.off] == '"' || lx.src[t.off] == '`'))
				return t.line;
			if (!group && t.kind == GOLEX_LITERAL)
				break;
			golex_next(&lx, &t);
		}
	}
	return 0;
}

/* norm_scan_all - package clauses of every built .go file; functions of the root ones */
static int norm_scan_all(const struct src_file *in, size_t n, struct norm_scan *sc, size_t *first_root,
			 char *err, size_t errlen)
{
	char qa[NORM_QUOTE_MAX + 8], qb[NORM_QUOTE_MAX + 8];

	*first_root = n;
	for (size_t i = 0; i < n; i++) {
		struct golex lx;
		int rc;

		if (!norm_built_go(in[i].path))
			continue;
		sc[i].go = 1;
		sc[i].root = strchr(in[i].path, '/') == NULL;
		rc = norm_package_clause(&in[i], &lx, &sc[i], err, errlen);
		if (rc)
			return rc;
		unsigned cgo = norm_cgo_line(&in[i], &lx);
		if (cgo) {
			norm_err(err, errlen, "%s:%u: import \"C\" needs cgo, and cgo is off in the "
				 "sandbox: write this part in pure Go (modules from the proxy work when they "
				 "are pure Go)", in[i].path, cgo);
			return -EINVAL;
		}
		if (!sc[i].root)
			continue; /* a helper package: its clause is all normalize needs */
		norm_scan_funcs(&lx, &sc[i]);
		if (*first_root == n) {
			*first_root = i;
			continue;
		}

		const struct norm_scan *a = &sc[*first_root], *b = &sc[i];

		if (a->name_len != b->name_len ||
		    memcmp(in[*first_root].content + a->name_off, in[i].content + b->name_off, a->name_len)) {
			norm_err(err, errlen, "%s is package %s but %s is package %s: all .go files in the root "
				 "directory must have the same package clause; put helper packages in "
				 "subdirectories and import them as \"%s/<dir>\"",
				 in[*first_root].path,
				 norm_quote(qa, sizeof(qa), in[*first_root].content + a->name_off, a->name_len),
				 in[i].path, norm_quote(qb, sizeof(qb), in[i].content + b->name_off, b->name_len),
				 NORM_MODULE_PATH);
			return -EINVAL;
		}
	}
	if (*first_root == n) {
		norm_err(err, errlen, "no .go file in the root directory: send main.go with a snippet (any "
			 "package but main, with %s) or a program (package main with func main()); helper "
			 "packages go in subdirectories, imported as \"%s/<dir>\"", NORM_RUN_SIG,
			 NORM_MODULE_PATH);
		return -EINVAL;
	}
	return 0;
}

/* norm_classify - program or snippet, from what the root files declare */
static int norm_classify(const struct src_file *in, size_t n, const struct norm_scan *sc,
			 size_t first_root, enum norm_mode *mode, char *err, size_t errlen)
{
	const struct norm_scan *pkg = &sc[first_root];
	const char *name = in[first_root].content + pkg->name_off;
	size_t main_i = n, run_i = n, bad_run_i = n, upper_run_i = n;
	char q[NORM_QUOTE_MAX + 8], ex[NORM_QUOTE_MAX + 8];

	for (size_t i = 0; i < n; i++) {
		if (!sc[i].go || !sc[i].root)
			continue;
		if (sc[i].main_line && main_i == n)
			main_i = i;
		if (sc[i].run_line && run_i == n)
			run_i = i;
		if (sc[i].run_line && sc[i].run_problem && bad_run_i == n)
			bad_run_i = i;
		if (sc[i].upper_run_line && upper_run_i == n)
			upper_run_i = i;
	}

	if (pkg->name_len == 4 && !memcmp(name, "main", 4)) {
		if (main_i == n && run_i != n) {
			norm_err(err, errlen, "package main needs func main(); or send a snippet: any other "
				 "package name with func run(ctx context.Context) (any, error) (%s:%u declares "
				 "run, so renaming the package, for example to package snippet, may be all "
				 "that is missing)", in[run_i].path, sc[run_i].run_line);
			return -EINVAL;
		}
		if (main_i == n) {
			norm_err(err, errlen, "package main needs func main(); or send a snippet: any other "
				 "package name with func run(ctx context.Context) (any, error)");
			return -EINVAL;
		}
		*mode = NORM_PROGRAM;
		return 0;
	}

	norm_quote(q, sizeof(q), name, pkg->name_len);
	if (bad_run_i != n) {
		const struct norm_scan *s = &sc[bad_run_i];

		norm_err(err, errlen, "%s:%u: `%s` is not the signature a snippet needs: %s; declare it as "
			 "%s (any parameter name, or _)", in[bad_run_i].path, s->run_line,
			 norm_excerpt(ex, sizeof(ex), in[bad_run_i].content, in[bad_run_i].len, s->run_off),
			 s->run_problem, NORM_RUN_SIG);
		return -EINVAL;
	}
	if (run_i == n) {
		char hint[NORM_QUOTE_MAX + 200] = "";

		if (upper_run_i != n)
			snprintf(hint, sizeof(hint), " (%s:%u declares func Run; the name must be lower-case run)",
				 in[upper_run_i].path, sc[upper_run_i].upper_run_line);
		else if (main_i != n)
			snprintf(hint, sizeof(hint), " (%s:%u declares func main(): to run it as a program, "
				 "name the package main)", in[main_i].path, sc[main_i].main_line);
		norm_err(err, errlen, "package %s has no func run%s: a snippet is any package other than main "
			 "that declares %s, and kode-gopher returns its result as JSON; a program is package "
			 "main with func main()", q, hint, NORM_RUN_SIG);
		return -EINVAL;
	}
	if (main_i != n) {
		norm_err(err, errlen, "%s:%u: a snippet must not declare func main(): kode-gopher adds a main "
			 "that calls run; remove it, or send a program (package main with func main())",
			 in[main_i].path, sc[main_i].main_line);
		return -EINVAL;
	}
	*mode = NORM_SNIPPET;
	return 0;
}

/* norm_copy - one output file: a copy of f, with [cut, cut+cut_len) replaced by repl if repl */
static int norm_copy(struct src_file *dst, const struct src_file *f, size_t cut, size_t cut_len,
		     const char *repl)
{
	size_t rlen = repl ? strlen(repl) : 0, len = repl ? f->len - cut_len + rlen : f->len;

	dst->path = strdup(f->path);
	dst->content = malloc(len + 1);
	if (!dst->path || !dst->content)
		return -ENOMEM;
	if (!repl) {
		if (f->len)
			memcpy(dst->content, f->content, f->len);
	} else {
		memcpy(dst->content, f->content, cut);
		memcpy(dst->content + cut, repl, rlen);
		memcpy(dst->content + cut + rlen, f->content + cut + cut_len, f->len - cut - cut_len);
	}
	dst->content[len] = '\0';
	dst->len = len;
	return 0;
}

/* norm_build_output - the files to write: the user's (snippet roots moved to main), plus main */
static int norm_build_output(const struct src_file *in, size_t n, const struct norm_scan *sc,
			     enum norm_mode mode, struct norm_result *out)
{
	size_t total = n + (mode == NORM_SNIPPET);

	out->files = calloc(total, sizeof(*out->files));
	if (!out->files)
		return -ENOMEM;
	out->mode = mode;
	for (size_t i = 0; i < n; i++) {
		int rewrite = mode == NORM_SNIPPET && sc[i].go && sc[i].root;
		int rc = norm_copy(&out->files[i], &in[i], sc[i].name_off, sc[i].name_len,
				   rewrite ? "main" : NULL);

		out->nfiles = i + 1;
		if (rc)
			return rc;
	}
	if (mode == NORM_SNIPPET) {
		struct src_file gen = {
			.path = (char *)NORM_GEN_MAIN_FILE,
			.content = (char *)embed_main_go_tmpl,
			.len = (size_t)embed_main_go_tmpl_size,
		};
		int rc = norm_copy(&out->files[n], &gen, 0, 0, NULL);

		out->nfiles = n + 1;
		if (rc)
			return rc;
	}
	return 0;
}

/* normalize - validate paths and sizes, classify, rewrite (see normalize.h) */
int normalize(const struct src_file *in, size_t n, struct norm_result *out, char *err, size_t errlen)
{
	struct norm_scan *sc;
	size_t first_root;
	enum norm_mode mode = NORM_PROGRAM;
	int rc;

	if (err && errlen)
		err[0] = '\0';
	if (!out)
		return -EINVAL;
	out->mode = NORM_PROGRAM;
	out->files = NULL;
	out->nfiles = 0;
	out->test_dirs = NULL;
	out->ntest_dirs = 0;
	if (!in && n) {
		norm_err(err, errlen, "no files were sent");
		return -EINVAL;
	}
	rc = norm_check_files(in, n, err, errlen);
	if (rc)
		return rc;

	sc = calloc(n, sizeof(*sc));
	if (!sc) {
		norm_err(err, errlen, "out of memory while preparing the files");
		return -ENOMEM;
	}
	rc = norm_scan_all(in, n, sc, &first_root, err, errlen);
	if (!rc)
		rc = norm_classify(in, n, sc, first_root, &mode, err, errlen);
	if (!rc) {
		rc = norm_build_output(in, n, sc, mode, out);
		if (rc) {
			normalize_free(out);
			norm_err(err, errlen, "out of memory while preparing the files");
		}
	}
	free(sc);
	return rc;
}

/* norm_dir_len - the length of path's directory ("" for the root) */
static size_t norm_dir_len(const char *path)
{
	const char *slash = strrchr(path, '/');

	return slash ? (size_t)(slash - path) : 0;
}

/* normalize_tests - test mode (see normalize.h) */
int normalize_tests(const struct src_file *in, size_t n, struct norm_result *out, char *err,
		    size_t errlen)
{
	int rc;

	if (err && errlen)
		err[0] = '\0';
	if (!out)
		return -EINVAL;
	memset(out, 0, sizeof(*out));
	out->mode = NORM_TEST;
	if (!in && n) {
		norm_err(err, errlen, "no files were sent");
		return -EINVAL;
	}
	rc = norm_check_files(in, n, err, errlen);
	if (rc)
		return rc;
	for (size_t i = 0; i < n; i++) {
		struct golex lx;
		struct norm_scan sc = { 0 };

		if (!norm_go_file(in[i].path, 1))
			continue;
		rc = norm_package_clause(&in[i], &lx, &sc, err, errlen);
		if (rc)
			return rc;
		unsigned cgo = norm_cgo_line(&in[i], &lx);
		if (cgo) {
			norm_err(err, errlen, "%s:%u: import \"C\" needs cgo, and cgo is off in the "
				 "sandbox: write this part in pure Go", in[i].path, cgo);
			return -EINVAL;
		}
	}
	out->test_dirs = calloc(n + 1, sizeof(*out->test_dirs));
	out->files = calloc(n ? n : 1, sizeof(*out->files));
	if (!out->test_dirs || !out->files)
		goto nomem;
	for (size_t i = 0; i < n; i++) {
		rc = norm_copy(&out->files[i], &in[i], 0, 0, NULL);
		out->nfiles = i + 1;
		if (rc)
			goto nomem;
		if (!norm_go_file(in[i].path, 1) || !norm_has_suffix(in[i].path, "_test.go"))
			continue;
		size_t dl = norm_dir_len(in[i].path);
		int seen = 0;

		for (size_t k = 0; k < out->ntest_dirs && !seen; k++)
			seen = strlen(out->test_dirs[k]) == (dl ? dl : 1) &&
			       !memcmp(out->test_dirs[k], dl ? in[i].path : ".", dl ? dl : 1);
		if (seen)
			continue;
		out->test_dirs[out->ntest_dirs] = dl ? strndup(in[i].path, dl) : strdup(".");
		if (!out->test_dirs[out->ntest_dirs++])
			goto nomem;
	}
	if (out->ntest_dirs == 0) {
		normalize_free(out);
		norm_err(err, errlen, "test mode needs at least one _test.go file (in the top directory "
			 "or a package subdirectory, not under testdata/ or a name starting with . or _)");
		return -EINVAL;
	}
	return 0;
nomem:
	normalize_free(out);
	norm_err(err, errlen, "out of memory while preparing the files");
	return -ENOMEM;
}

/* normalize_has_tests - whether any file is a _test.go file the go command would see */
int normalize_has_tests(const struct src_file *in, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (in[i].path && norm_go_file(in[i].path, 1) && norm_has_suffix(in[i].path, "_test.go"))
			return 1;
	return 0;
}

/* normalize_free - release what normalize put in r; r may be reused or freed afterwards */
void normalize_free(struct norm_result *r)
{
	if (!r)
		return;
	src_files_free(r->files, r->nfiles);
	r->files = NULL;
	r->nfiles = 0;
	if (r->test_dirs)
		for (size_t i = 0; i < r->ntest_dirs; i++)
			free(r->test_dirs[i]);
	free(r->test_dirs);
	r->test_dirs = NULL;
	r->ntest_dirs = 0;
}

/* src_files_free - free each file's path and content, then the array itself; NULL is fine */
void src_files_free(struct src_file *files, size_t n)
{
	if (!files)
		return;
	for (size_t i = 0; i < n; i++) {
		free(files[i].path);
		free(files[i].content);
	}
	free(files);
}
