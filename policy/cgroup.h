/*
 * cgroup.h - the local sandbox's cgroup limits: memory, processes and CPU weight.
 *
 * Three ways, chosen per limit kind from what the host offers (see policy/cgroup.c):
 *   cgroup v2 as root: a kode-gopher subtree of the unified hierarchy, a leaf per sandbox;
 *   cgroup v2 as a normal user: the master starts each jail in a transient systemd user scope
 *     with Delegate=yes (systemd-run --user --scope), and the jail makes its leaf inside it;
 *   cgroup v1 as root: a kode-gopher group under each controller's own hierarchy.
 * The master plans once (cgroup_plan) and logs one line per kind; the jail enters its groups
 * before it forks anything that runs user code (cgroup_enter); the master removes them after.
 */
#ifndef KG_CGROUP_H
#define KG_CGROUP_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>
#include "policy/limits.h"

enum cgroup_kind { CGROUP_MEMORY, CGROUP_PIDS, CGROUP_CPU, CGROUP_NKINDS };
enum cgroup_how { CGROUP_NONE, CGROUP_V1, CGROUP_V2 };

#define CGROUP_WHY_MAX 1024
#define CGROUP_PATH_MAX 512

/* the subtree under the v2 root (as root) and under each v1 controller */
#define CGROUP_SUBTREE "kode-gopher"
/* the leaf inside a delegated systemd scope */
#define CGROUP_SCOPE_LEAF "sandbox"
/* transient scope units are named CGROUP_SCOPE_PREFIX<sandbox>-<pid>.scope */
#define CGROUP_SCOPE_PREFIX "kode-gopher-"

struct cgroup_limits {
	long long memory; /* bytes; 0: none */
	long pids;        /* 0: none */
};

/* what this host offers, found from /proc/self/mountinfo and the hierarchy itself */
struct cgroup_plan {
	char v2[CGROUP_PATH_MAX];                 /* the cgroup2 mount, "" if none */
	char v1[CGROUP_NKINDS][CGROUP_PATH_MAX];  /* each v1 controller's mount, "" if none */
	enum cgroup_how how[CGROUP_NKINDS];
	char why[CGROUP_NKINDS][CGROUP_WHY_MAX];  /* how == CGROUP_NONE: the reason */
	bool root;                                /* planned for uid 0 */
	bool systemd;                             /* wrap each jail in a delegated user scope */
	char systemd_run[CGROUP_PATH_MAX];        /* that program */
};

/* what one sandbox got (cgroup_enter) */
struct cgroup_got {
	enum cgroup_how how[CGROUP_NKINDS];
	char why[CGROUP_NKINDS][CGROUP_WHY_MAX];
	char leaf[CGROUP_PATH_MAX];               /* the v2 leaf, "" if none */
	char v1dir[CGROUP_NKINDS][CGROUP_PATH_MAX]; /* each v1 kind's group, "" if none */
};

extern const char *const cgroup_kind_name[CGROUP_NKINDS];

/* cgroup_parse_mounts - the cgroup2 mount and the v1 mounts of memory, pids and cpu from a
 * mountinfo text (NUL-terminated); 0 or -EINVAL for a line that is not mountinfo */
int cgroup_parse_mounts(const char *mountinfo, char v2[CGROUP_PATH_MAX],
			char v1[CGROUP_NKINDS][CGROUP_PATH_MAX]);

/* cgroup_list_has - is word one of the space-separated names in list (cgroup.controllers)? */
bool cgroup_list_has(const char *list, const char *word);

/* cgroup_parse_self - the unified hierarchy's path ("0::/a/b") from a /proc/PID/cgroup text */
int cgroup_parse_self(const char *text, char out[CGROUP_PATH_MAX]);

/* cgroup_parse_oom_kills - the "oom_kill N" count of a memory.events (v2) or memory.oom_control
 * (v1) text, or -1 */
long long cgroup_parse_oom_kills(const char *text);

/* the environment variable that hands the agent a read-only descriptor of that file */
#define CGROUP_OOM_FD_ENV "KG_OOM_EVENTS_FD"

/* cgroup_open_oom_events - a descriptor (not close-on-exec) of the file for a sandbox's memory
 * group, or -1 when memory is not limited through a cgroup */
int cgroup_open_oom_events(const struct cgroup_got *g);

/* cgroup_plan - decide per kind how limits can be set here. root: we are uid 0. v2_override is
 * for tests: a cgroup2 mount to use instead of the one /proc/self/mountinfo names (and no v1). */
void cgroup_plan(struct cgroup_plan *p, bool root, const char *v2_override);

/* cgroup_enter - in the jail, before anything that runs user code is forked: create this
 * sandbox's groups, set the limits, move the calling process in */
void cgroup_enter(const struct cgroup_plan *p, const char *name, const struct cgroup_limits *l,
		  struct cgroup_got *g);

/* cgroup_cpu_weight - the master's, as root (the only writer of a sandbox's cpu.weight or
 * cpu.shares: the jail enters the group but leaves the weight alone): set sandbox name's CPU
 * weight, the pre-start's or the session's; create: make its group first, before the jail is
 * forked, so that all the jail does runs at that weight. -EOPNOTSUPP when this plan has no CPU
 * group the master can make (no cpu controller; a normal user's jail makes its own in a systemd
 * scope, at the default weight), else 0 or a negative errno. */
int cgroup_cpu_weight(const struct cgroup_plan *p, const char *name, bool prestart, bool create);

/* cgroup_procs - the processes in sandbox name's groups (their cgroup.procs, each listed once),
 * at most max into pids; how many */
size_t cgroup_procs(const struct cgroup_plan *p, const char *name, pid_t *pids, size_t max);

/* cgroup_remove - after the jail's processes are gone: remove its groups (best effort); true
 * when nothing of them is left */
bool cgroup_remove(const struct cgroup_plan *p, const char *name);

/* cgroup_sweep - remove the empty sandbox groups under each kode-gopher subtree this plan uses
 * (left by a master that died before it could remove them); groups in use hold processes, which
 * the kernel's rmdir refuses, and a jail re-creates a leaf swept between its mkdir and its move */
void cgroup_sweep(const struct cgroup_plan *p);

/* cgroup_describe - one line for a kind: the limit and the mechanism, or why there is none and
 * what stands in. how/why from a plan or what a sandbox got. */
void cgroup_describe(enum cgroup_kind k, enum cgroup_how how, const char *why, bool systemd,
		     bool root, const struct cgroup_limits *l, char *out, size_t cap);

/* cgroup_log_plan - the start-up report: one log line per kind */
void cgroup_log_plan(const struct cgroup_plan *p, const struct cgroup_limits *l);

/* cgroup_scope_argv - the systemd-run words that put a jail in its own delegated user scope;
 * fills argv (at least 12 slots) and returns how many, unit gets the unit's name */
int cgroup_scope_argv(const struct cgroup_plan *p, const char *name, char *unit, size_t unitcap,
		      char **argv);

/* cgroup_read_knob - a small cgroup file's first line (tests, doctor) */
int cgroup_read_knob(const char *dir, const char *file, char *out, size_t cap);

#endif
