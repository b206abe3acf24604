/*
 * fuzz_normalize.c - libFuzzer target for agent/normalize.c and agent/golex.c, and for the
 * direct build path's reading of the same files (fastbuild_imports, fastbuild_file_ok).
 *
 * Built by tests/fuzz/Makefile. The input is split into one to three files:
 *   byte 0   bits 0-1: file count - 1 (3 counts as 3); bits 2-4: for file i, whether its path is
 *            the first line of its chunk (else a path from the table below)
 *   byte 1   table offset, and (bit 7) a tiny error buffer
 *   rest     the chunks, separated by the first (count - 1) 0xFF bytes
 * Besides "no crash, no leak", a success must keep every user file's path, length (up to the
 * package name) and line count, and a refusal must leave a sentence that is valid UTF-8.
 * Every import path fastbuild_imports returns is non-empty and made of import-path bytes only.
 */
#include <errno.h>
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "agent/fastbuild.h"
#include "agent/normalize.h"

static const char *const fuzz_paths[] = {
	"main.go", "util.go", "sub/x.go", "main_test.go", "data.txt", "a/b/c.go", "_x.go", "go.mod",
};

/* fuzz_lines - newlines in a buffer */
static size_t fuzz_lines(const char *s, size_t len)
{
	size_t n = 0;

	for (size_t i = 0; i < len; i++)
		n += s[i] == '\n';
	return n;
}

/* fuzz_check - the invariants of a successful normalize */
static void fuzz_check(const struct src_file *in, size_t n, const struct norm_result *r)
{
	if (r->nfiles != n + (r->mode == NORM_SNIPPET))
		__builtin_trap();
	if (r->mode == NORM_SNIPPET && strcmp(r->files[n].path, "kode_gopher_main.go") != 0)
		__builtin_trap();
	for (size_t i = 0; i < r->nfiles; i++)
		if (r->files[i].content[r->files[i].len] != '\0')
			__builtin_trap();
	for (size_t i = 0; i < n; i++) {
		const struct src_file *a = &in[i], *b = &r->files[i];

		if (strcmp(a->path, b->path) != 0)
			__builtin_trap();
		if (fuzz_lines(a->content, a->len) != fuzz_lines(b->content, b->len))
			__builtin_trap();
		if (r->mode == NORM_PROGRAM &&
		    (a->len != b->len || (a->len && memcmp(a->content, b->content, a->len) != 0)))
			__builtin_trap();
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct src_file in[3];
	char *paths[3] = { NULL, NULL, NULL };
	struct norm_result r;
	char err[1024];
	size_t n, pos = 2;
	int rc;

	if (size < 2)
		return 0;
	n = 1 + (data[0] & 3) % 3;
	for (size_t i = 0; i < n; i++) {
		size_t end = pos;

		if (i + 1 < n)
			while (end < size && data[end] != 0xFF)
				end++;
		else
			end = size;

		const char *chunk = (const char *)data + pos;
		size_t len = end - pos;

		if (data[0] & (4u << i)) {
			const char *nl = memchr(chunk, '\n', len);
			size_t plen = nl ? (size_t)(nl - chunk) : len;

			paths[i] = strndup(chunk, plen); /* an embedded NUL just shortens it */
			chunk += nl ? plen + 1 : plen;
			len -= nl ? plen + 1 : plen;
		} else {
			paths[i] = strdup(fuzz_paths[(i + data[1]) % (sizeof(fuzz_paths) / sizeof(fuzz_paths[0]))]);
		}
		in[i].path = paths[i];
		/* a copy of exactly len bytes, so ASan sees any read past the end */
		in[i].content = len ? malloc(len) : NULL;
		if (len)
			memcpy(in[i].content, chunk, len);
		in[i].len = len;
		pos = end < size ? end + 1 : end;
	}

	rc = normalize(in, n, &r, err, (data[1] & 0x80) ? 7 : sizeof(err));
	if (rc == 0) {
		fuzz_check(in, n, &r);
		for (size_t i = 0; i < r.nfiles; i++) {
			char **imp = NULL;
			size_t ni = 0;
			(void)fastbuild_file_ok(r.files[i].path, r.files[i].content, r.files[i].len);
			(void)fastbuild_imports(r.files[i].content, r.files[i].len, &imp, &ni);
			for (size_t k = 0; k < ni; k++) {
				if (!imp[k][0] || strspn(imp[k], "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLM"
							 "NOPQRSTUVWXYZ0123456789._-~+/") != strlen(imp[k]))
					__builtin_trap();
				free(imp[k]);
			}
			free(imp);
		}
		normalize_free(&r);
	} else {
		json_t *j = json_string(err);

		if (r.files || r.nfiles || !j || (rc != -EINVAL && rc != -ENOMEM))
			__builtin_trap();
		json_decref(j);
	}
	for (size_t i = 0; i < n; i++) {
		free(paths[i]);
		free(in[i].content);
	}
	return 0;
}
