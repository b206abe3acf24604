/*
 * fuzz_diag.c - libFuzzer target for the parsers of Go toolchain output: agent/diag.c
 * (diag_clean_output, diag_parse, diag_first_error, diag_to_json, diag_json_string) and the
 * import-path extraction in agent/gobuild.c (gobuild_needs_resolve, gobuild_missing_packages).
 *
 * Built by tests/fuzz/Makefile. Byte 0 picks the options (bit 0: an app_dir to strip, bit 1: a
 * generated file, bit 2: a known run location, bits 3-7: size of the first-error buffer); the
 * rest is the output. Besides "no crash, no leak": cleaning never grows the text, every
 * diagnostic has a file and a bounded message, every JSON string is built, and every import
 * path handed to `go get` is one that cannot be taken for a flag.
 */
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "agent/diag.h"
#include "agent/gobuild.h"

/* fuzz_check_list - invariants of a parsed list */
static void fuzz_check_list(const struct diag_list *dl)
{
	if (dl->n > DIAG_MAX_ITEMS)
		__builtin_trap();
	for (size_t i = 0; i < dl->n; i++) {
		const struct diag *d = &dl->items[i];
		if (!d->file || !d->message || d->line < 0 || d->column < 0)
			__builtin_trap();
		if (strlen(d->message) > DIAG_MAX_MESSAGE + 512)
			__builtin_trap();
	}
	json_t *j = diag_to_json(dl);
	if (!j || json_array_size(j) != dl->n)
		__builtin_trap();
	json_decref(j);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	uint8_t flags = data[0];
	const char *out = (const char *)data + 1;
	size_t len = size - 1;
	struct diag_opts o = {
		.app_dir = (flags & 1) ? "/app" : NULL,
		.gen_file = (flags & 2) ? "kode_gopher_main.go" : NULL,
		.run_file = (flags & 4) ? "main.go" : NULL,
		.run_line = (flags & 4) ? 7 : 0,
	};

	size_t clen = 0;
	char *clean = diag_clean_output(out, len, o.app_dir, &clen);
	if (!clean || clen > len || clean[clen] != '\0')
		__builtin_trap();

	struct diag_list dl;
	if (diag_parse(out, len, &o, &dl) == 0) {
		fuzz_check_list(&dl);
		diag_list_free(&dl);
	}
	if (diag_parse(clean, clen, &o, &dl) == 0) {
		fuzz_check_list(&dl);
		size_t blen = (size_t)(flags >> 3) + 1;
		char buf[64];
		diag_first_error(clean, clen, &dl, buf, blen);
		if (strlen(buf) >= blen)
			__builtin_trap();
		diag_first_error(clean, clen, NULL, buf, blen);
		if (strlen(buf) >= blen)
			__builtin_trap();
		diag_list_free(&dl);
	}

	json_t *s = diag_json_string(out, len);
	if (!s)
		__builtin_trap();
	json_decref(s);

	if (gobuild_needs_resolve(clean, clen)) {
		char **pkgs = NULL;
		size_t n = 0;
		if (gobuild_missing_packages(clean, clen, &pkgs, &n) == 0) {
			if (n > GOBUILD_MAX_MISSING)
				__builtin_trap();
			for (size_t i = 0; i < n; i++)
				if (!pkgs[i][0] || pkgs[i][0] == '-' || strchr(pkgs[i], ' '))
					__builtin_trap();
			gobuild_strv_free(pkgs);
		}
	}
	free(clean);
	return 0;
}
