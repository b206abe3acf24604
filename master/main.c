/*
 * main.c - the kode-gopher binary: one executable, one subcommand per role.
 *
 * `serve` is the master; `worker` is what the master fork+execs for each session; `agent` runs
 * inside each sandbox; `exec` runs one file through the same path; `version` prints the build.
 */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "lib/proc.h"
#include "master/master.h"
#include "worker/worker.h"

static const char usage[] =
	"usage: kode-gopher <command> [options]\n"
	"\n"
	"An MCP server that lets a model run Go code: snippets, programs and multi-file modules are\n"
	"built with the real Go toolchain in a sandbox and returned as structured results.\n"
	"\n"
	"commands:\n"
	"  serve      serve MCP over stdio (what an MCP client starts)\n"
	"  exec       run Go files once through the same sandbox path and print the result\n"
	"  sandboxes  list or remove kept sandboxes\n"
	"  doctor     say which sandbox limits this host enforces, and why any is missing\n"
	"  agent      the program that runs inside every sandbox\n"
	"  version    print the version\n"
	"  worker     (internal) one MCP session; started by serve\n"
	"  jail       (internal) builds a local sandbox and runs the agent in it\n"
	"\n"
	"Run `kode-gopher <command> --help` (or `kode-gopher help <command>`) for a command's options.\n"
	"Register with Claude Code:  claude mcp add kode-gopher -- /path/to/kode-gopher serve\n";

struct command {
	const char *name;
	int (*run)(int argc, char **argv);
};

/* version_main - `kode-gopher version` */
static int version_main(int argc, char **argv)
{
	if (argc > 1 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
		printf("usage: kode-gopher version\n\nPrints the version of this build.\n");
		return 0;
	}
	printf("kode-gopher %s\n", KG_VERSION);
	return 0;
}

static const struct command commands[] = {
	{ "serve", serve_main },   { "exec", exec_main },       { "worker", worker_main },
	{ "agent", agent_main },   { "version", version_main }, { "sandboxes", sandboxes_main },
	{ "jail", jail_main },     { "doctor", doctor_main },
};

int main(int argc, char **argv)
{
	proc_child_enter();
	/* `kode-gopher help exec`, as `go help run` */
	if (argc == 3 && strcmp(argv[1], "help") == 0 && strcmp(argv[2], "worker") != 0 &&
	    strcmp(argv[2], "jail") != 0) {
		for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
			if (strcmp(argv[2], commands[i].name) == 0) {
				char *hargv[] = { argv[2], "--help", NULL };
				return commands[i].run(2, hargv);
			}
	}
	if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
	    strcmp(argv[1], "help") == 0) {
		fputs(usage, argc < 2 ? stderr : stdout);
		return argc < 2 ? 2 : 0;
	}
	if (strcmp(argv[1], "--version") == 0)
		return version_main(1, argv + 1);
	/* the worker's title goes where the whole command line was, so it is moved first */
	if (strcmp(argv[1], "worker") == 0)
		proctitle_init(argc, argv);
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
		if (strcmp(argv[1], commands[i].name) == 0)
			return commands[i].run(argc - 1, argv + 1);
	/* one line, with the nearest command, rather than the whole help */
	static const struct option names[] = { { "serve", 0, 0, 0 }, { "exec", 0, 0, 0 },
		{ "sandboxes", 0, 0, 0 }, { "agent", 0, 0, 0 }, { "version", 0, 0, 0 },
		{ "doctor", 0, 0, 0 }, { 0, 0, 0, 0 } };
	const char *near = cli_nearest(argv[1], names);
	if (near)
		fprintf(stderr, "kode-gopher: unknown command \"%s\"; did you mean %s?\n", argv[1], near);
	else
		fprintf(stderr, "kode-gopher: unknown command \"%s\" (`kode-gopher --help` lists the "
			"commands)\n", argv[1]);
	return 2;
}
