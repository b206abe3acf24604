/*
 * cli.c - what the subcommands say when their command line is wrong.
 *
 * Called by serve, exec and sandboxes (master/serve.c, master/exec.c) after getopt_long refused
 * a word. A person who typed `--jsn` wants one line naming `--json`, not the whole help text;
 * the help stays one `--help` away.
 */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "master/master.h"

/* cli_distance - edit distance of a and b (insert, delete, substitute, swap of neighbours),
 * bounded: names longer than CLI_NAME_MAX are never close */
#define CLI_NAME_MAX 48
static size_t cli_distance(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b);
	if (la > CLI_NAME_MAX || lb > CLI_NAME_MAX)
		return (size_t)-1;
	size_t d[CLI_NAME_MAX + 1][CLI_NAME_MAX + 1];
	for (size_t i = 0; i <= la; i++)
		d[i][0] = i;
	for (size_t j = 0; j <= lb; j++)
		d[0][j] = j;
	for (size_t i = 1; i <= la; i++)
		for (size_t j = 1; j <= lb; j++) {
			size_t best = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
			if (d[i - 1][j] + 1 < best)
				best = d[i - 1][j] + 1;
			if (d[i][j - 1] + 1 < best)
				best = d[i][j - 1] + 1;
			if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] &&
			    d[i - 2][j - 2] + 1 < best)
				best = d[i - 2][j - 2] + 1;
			d[i][j] = best;
		}
	return d[la][lb];
}

/* cli_nearest - see master.h */
const char *cli_nearest(const char *word, const struct option *opts)
{
	const char *best = NULL;
	size_t best_d = (size_t)-1, wl = strlen(word);
	for (const struct option *o = opts; o->name; o++) {
		size_t d = cli_distance(word, o->name);
		/* a word that starts a longer name (`--sandbox`) is as near as one typo */
		if (wl >= 3 && strncmp(o->name, word, wl) == 0 && d > 1)
			d = 1;
		if (d < best_d) {
			best_d = d;
			best = o->name;
		}
	}
	/* beyond a third of the word, a "suggestion" is a guess */
	size_t allowed = wl < 6 ? 2 : wl / 3;
	return best && best_d <= allowed ? best : NULL;
}

/* cli_bad_option - see master.h */
void cli_bad_option(const char *cmd, const struct option *opts, int c, const char *word)
{
	char name[64];
	const char *w = word ? word : "";
	while (*w == '-')
		w++;
	snprintf(name, sizeof(name), "%.*s", (int)strcspn(w, "="), w);
	if (c == ':') {
		fprintf(stderr, "kode-gopher %s: %s needs a value (`kode-gopher %s --help` says which)\n",
			cmd, word, cmd);
		return;
	}
	/* an abbreviation that fits several names, which getopt_long refuses as ambiguous */
	size_t nl = strlen(name), matches = 0;
	for (const struct option *o = opts; o->name && nl; o++)
		matches += strncmp(o->name, name, nl) == 0;
	if (word && word[0] == '-' && word[1] == '-' && nl && matches > 1) {
		fprintf(stderr, "kode-gopher %s: --%s is short for more than one option:", cmd, name);
		for (const struct option *o = opts; o->name; o++)
			if (strncmp(o->name, name, nl) == 0)
				fprintf(stderr, " --%s", o->name);
		fputc('\n', stderr);
		return;
	}
	const char *near = nl ? cli_nearest(name, opts) : NULL;
	if (near)
		fprintf(stderr, "kode-gopher %s: unknown option %s; did you mean --%s?\n", cmd, word, near);
	else
		fprintf(stderr, "kode-gopher %s: unknown option %s (`kode-gopher %s --help` lists every "
			"option)\n", cmd, word ? word : "?", cmd);
}

/* cli_word - the word getopt_long just refused */
const char *cli_word(char **argv, int argc, int ind, int opt)
{
	static char shortopt[3];
	const char *w = ind >= 1 && ind - 1 < argc ? argv[ind - 1] : NULL;
	if (w && w[0] == '-' && w[1] == '-')
		return w;
	if (opt > ' ' && opt < 127) {
		shortopt[0] = '-';
		shortopt[1] = (char)opt;
		shortopt[2] = '\0';
		return shortopt;
	}
	return w ? w : "?";
}

/* cli_check_long - see master.h. glibc's getopt_long takes an abbreviation that fits several
 * options when they all look alike (every one of ours does), so `--sandbox x` would quietly
 * mean --sandbox-root x: the long words are checked here first */
int cli_check_long(const char *cmd, int argc, char **argv, const struct option *opts)
{
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		if (strcmp(a, "--") == 0)
			break;
		if (a[0] != '-' || a[1] != '-')
			continue;
		size_t nl = strcspn(a + 2, "=");
		const struct option *hit = NULL;
		size_t matches = 0;
		for (const struct option *o = opts; o->name; o++) {
			if (strlen(o->name) == nl && strncmp(o->name, a + 2, nl) == 0) {
				hit = o;
				matches = 1;
				break;
			}
			if (nl && strncmp(o->name, a + 2, nl) == 0) {
				hit = o;
				matches++;
			}
		}
		if (matches != 1) {
			cli_bad_option(cmd, opts, '?', a);
			return -1;
		}
		if (hit->has_arg == required_argument && a[2 + nl] != '=')
			i++; /* its value, whatever it looks like */
	}
	return 0;
}
