/*
 * doctor.c - `kode-gopher doctor`: what this host lets kode-gopher enforce on its sandboxes.
 *
 * Prints the same per-limit lines serve logs at start-up (master/sandbox_local.c), then tries
 * them for real the way a jail does (a sandbox's cgroups entered by `jail --cgroup-probe`, in a
 * systemd user scope where serve would use one) and prints what the kernel holds. Exit 0 when
 * the trial got what the plan promised, 1 when it did not.
 */
#include <getopt.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "master/master.h"
#include "master/stdio.h"
#include "policy/cgroup.h"

static const char doctor_usage[] =
	"usage: kode-gopher doctor [--sandbox-memory SIZE] [--sandbox-pids N]\n"
	"\n"
	"Says which sandbox limits this host lets kode-gopher enforce (memory, processes, CPU\n"
	"weight), through what (cgroup v2, a systemd user scope, cgroup v1, rlimits) and why any is\n"
	"missing; then tries them in a sandbox's cgroups and prints what the kernel holds. Exit 1\n"
	"when the trial did not get what was planned. The options are serve's (defaults 4g, 512).\n";

int doctor_main(int argc, char **argv)
{
	struct serve_config cfg;
	serve_config_defaults(&cfg);
	static const struct option opts[] = {
		{ "sandbox-memory", required_argument, 0, 0 }, { "sandbox-pids", required_argument, 0, 0 },
		{ "help", no_argument, 0, 'h' }, { 0, 0, 0, 0 }
	};
	if (cli_check_long("doctor", argc, argv, opts) != 0)
		return 2;
	int c, idx;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":h", opts, &idx)) != -1) {
		if (c == 'h') {
			fputs(doctor_usage, stdout);
			return 0;
		}
		if (c != 0) {
			cli_bad_option("doctor", opts, c, cli_word(argv, argc, optind, optopt));
			return 2;
		}
		if (serve_config_option(&cfg, opts[idx].name, optarg) <= 0)
			return 2;
	}
	if (optind < argc) {
		fprintf(stderr, "kode-gopher doctor: unexpected argument \"%s\"\n", argv[optind]);
		return 2;
	}
	log_init("doctor", LOG_LVL_OFF);
	sandbox_local_limits(&cfg);
	const struct cgroup_plan *p = sandbox_local_plan();
	struct cgroup_limits l = { .memory = cfg.memory, .pids = cfg.pids };
	printf("sandbox limits for uid %u:\n", (unsigned)getuid());
	for (int k = 0; k < CGROUP_NKINDS; k++) {
		char line[CGROUP_WHY_MAX + 256];
		cgroup_describe((enum cgroup_kind)k, p->how[k], p->why[k], p->systemd, p->root, &l, line,
				sizeof(line));
		printf("  %s\n", line);
	}
	printf("trial (a sandbox's cgroups, entered as a jail enters them):\n");
	fflush(stdout);
	char buf[4096] = "";
	FILE *mem = fmemopen(buf, sizeof(buf) - 1, "w");
	int r = mem ? sandbox_local_probe(&cfg, mem) : -1;
	if (mem)
		fclose(mem);
	fputs(buf, stdout);
	if (r != 0) {
		printf("  the trial failed (see above)\n");
		return 1;
	}
	/* each kind as planned? the probe prints "KIND v2|v1|none ..." */
	int bad = 0;
	for (int k = 0; k < CGROUP_NKINDS; k++) {
		const char *want = p->how[k] == CGROUP_V2 ? "v2" : p->how[k] == CGROUP_V1 ? "v1" : "none";
		char key[48];
		snprintf(key, sizeof(key), "  %s %s", cgroup_kind_name[k], want);
		if (!strstr(buf, key)) {
			printf("  %s: planned %s, not what the trial got\n", cgroup_kind_name[k], want);
			bad++;
		}
	}
	printf("%s\n", bad ? "the trial did not get every planned limit" : "the trial got every planned limit");
	return bad ? 1 : 0;
}
