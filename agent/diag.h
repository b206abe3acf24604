/*
 * diag.h - turn Go toolchain output into diagnostics the model can act on.
 *
 * Called by the agent's pipeline (agent/pipeline.c) after a failed `go build`: the output is
 * rewritten so paths read as the model sent them, parsed into {file,line,column,message}, and
 * its first error becomes the build_error message. Also holds the UTF-8 cleaner every text
 * field of a result goes through (program output is arbitrary bytes; JSON needs UTF-8).
 * Input is untrusted (it echoes the user's identifiers and bytes): everything is bounded.
 */
#ifndef KG_DIAG_H
#define KG_DIAG_H

#include <jansson.h>
#include <stddef.h>
#include "policy/limits.h"

struct diag {
	char *file;     /* relative, as the model sent it ("main.go", "helper/h.go", "go.mod") */
	int line;       /* 0 when unknown */
	int column;     /* 0 when unknown */
	char *message;  /* continuation lines joined with "\n\t" */
};

struct diag_list {
	struct diag *items;
	size_t n;
};

struct diag_opts {
	const char *app_dir;   /* absolute directory the build ran in; its prefix is stripped */
	const char *gen_file;  /* the generated main ("kode_gopher_main.go"); NULL: none */
	const char *run_file;  /* where the snippet declares run, to point generated-main errors at */
	int run_line;
};

/* diag_clean_output - copy of out with "<app_dir>/" removed and "./" dropped from paths at
 * the start of lines; *outlen gets its length. NULL on ENOMEM. */
char *diag_clean_output(const char *out, size_t len, const char *app_dir, size_t *outlen);

/* diag_parse - parse (cleaned or raw) build output; at most DIAG_MAX_ITEMS. 0 or -ENOMEM. */
int diag_parse(const char *out, size_t len, const struct diag_opts *o, struct diag_list *dl);
void diag_list_free(struct diag_list *dl);

/* diag_first_error - the line a person reads first: "main.go:12:5: undefined: x", or the
 * first line that is not a package header or progress noise. Empty string when none. */
void diag_first_error(const char *out, size_t len, const struct diag_list *dl, char *buf,
		      size_t buflen);

/* diag_to_json - [{file,line,column,message}]; NULL on ENOMEM */
json_t *diag_to_json(const struct diag_list *dl);

/* diag_json_string - a JSON string of arbitrary bytes: invalid UTF-8 becomes U+FFFD. Never
 * fails except on ENOMEM (NULL). */
json_t *diag_json_string(const char *s, size_t len);

#endif
