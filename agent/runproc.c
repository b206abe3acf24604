/*
 * runproc.c - the agent's launcher for runproc_run (lib/runproc.c): the user's program in
 * namespaces of its own, below a small init.
 *
 * Called by agent/agent_main.c (runproc_isolation_init, once) and agent/pipeline.c (the
 * launcher, for every run of the user's binary and tests). The running, capturing and killing
 * are lib/runproc.c's; this file adds only what needs the policy/ layer (capabilities) and the
 * namespaces.
 */
#include "agent/runproc.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ipc/fsutil.h"
#include "policy/caps.h"


#define ISO_CLONE_FLAGS (CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWIPC)
#define ISO_TMPFS_DEFAULT_BYTES (1ull << 30)

struct iso_path {
	char path[PATH_MAX];
	unsigned long flags; /* fs_locked_flags, read before any fork */
};

/* Filled once by runproc_isolation_init, read-only afterwards: the forked init uses it with no
 * allocation. */
static struct {
	bool on;
	struct iso_path hide[RUNPROC_ISO_MAX_PATHS], ro[RUNPROC_ISO_MAX_PATHS],
		rw[RUNPROC_ISO_MAX_PATHS], tmp[RUNPROC_ISO_MAX_PATHS];
	size_t nhide, nro, nrw, ntmp;
	char tmpfs_opts[64];
	char uid_map[48], gid_map[48];
} iso;

/* iso_write - a small string into a /proc file; async-signal-safe; 0 or an errno */
static int iso_write(const char *path, const char *text)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return errno;
	size_t n = strlen(text);
	ssize_t w = write(fd, text, n);
	int e = w == (ssize_t)n ? 0 : (w < 0 ? errno : EIO);
	close(fd);
	return e;
}

/* iso_enter - first thing in the namespaces' init: our ids mapped, the program's view of the
 * file system mounted. Async-signal-safe; 0 or an errno. */
static int iso_enter(void)
{
	int e;
	/* the agent is not dumpable, which leaves our /proc/self files to root: writing our own
	 * id maps needs them to be ours (iso_init makes us undumpable again before the program) */
	prctl(PR_SET_DUMPABLE, 1, 0, 0, 0);
	if ((e = iso_write("/proc/self/uid_map", iso.uid_map)) != 0 ||
	    (e = iso_write("/proc/self/setgroups", "deny")) != 0 ||
	    (e = iso_write("/proc/self/gid_map", iso.gid_map)) != 0)
		return e;
	/* a /proc of this pid namespace: the agent and the jail are not in it */
	if (mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) != 0)
		return errno;
	for (size_t i = 0; i < iso.ntmp; i++)
		if (mount("tmpfs", iso.tmp[i].path, "tmpfs", MS_NOSUID | MS_NODEV, iso.tmpfs_opts) != 0)
			return errno;
	/* writable places under read-only ones first, so the recursive binds below carry them */
	for (size_t i = 0; i < iso.nrw; i++)
		if (mount(iso.rw[i].path, iso.rw[i].path, NULL, MS_BIND | MS_REC, NULL) != 0)
			return errno;
	for (size_t i = 0; i < iso.nro; i++) {
		if (mount(iso.ro[i].path, iso.ro[i].path, NULL, MS_BIND | MS_REC, NULL) != 0)
			return errno;
		if (mount(NULL, iso.ro[i].path, NULL,
			  MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | iso.ro[i].flags, NULL) != 0)
			return errno;
	}
	for (size_t i = 0; i < iso.nhide; i++)
		if (mount("tmpfs", iso.hide[i].path, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_RDONLY,
			  "mode=0555,size=4k") != 0)
			return errno;
	return 0;
}

/* iso_report - tell the agent why the program could not start, and end */
static void __attribute__((noreturn)) iso_report(int report, int e)
{
	if (write(report, &e, sizeof(e)) < 0) {
		/* nothing more a dying child can do */
	}
	_exit(127);
}

/* iso_prep - in the program, just before its seccomp filter and exec: in its own user
 * namespace it starts with every capability there (enough to unmount what hides the agent's
 * files), and keeps none, even as root after exec */
static int iso_prep(void)
{
	return -caps_drop_all();
}

/* iso_init - pid 1 of the program's namespaces: mount its view, start it (pid 2), reap
 * whatever is orphaned to us, and end when the program ends, which ends everything else in
 * the namespace. Its wait status goes to the agent through statusw. A raw clone of a
 * threaded process: async-signal-safe calls only, no libc fork. */
static void __attribute__((noreturn)) iso_init(const struct runproc_child *c, int statusw)
{
	int report = c->report;
	if (setsid() < 0)
		iso_report(report, errno);
	/* no parent check possible from here (the agent's pid is not in this namespace): the
	 * pipeline thread waits for us, so it cannot have gone before this line */
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	int keep[] = { c->in, c->out, c->err, report, statusw };
	runproc_close_except(keep, sizeof(keep) / sizeof(keep[0]));
	int e = iso_enter();
	if (e != 0)
		iso_report(report, e);
	/* our memory is a copy of the agent's: out of the program's reach (/proc/1/mem, ptrace) */
	prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
	int ip[2];
	if (pipe2(ip, O_CLOEXEC) != 0)
		iso_report(report, errno);
	pid_t prog = (pid_t)syscall(SYS_clone, SIGCHLD, 0, 0, 0, 0);
	if (prog < 0)
		iso_report(report, errno);
	if (prog == 0) {
		close(ip[0]);
		close(statusw);
		close(report);
		struct runproc_child pc = *c;
		pc.parent = 1;
		pc.report = ip[1];
		/* we stay in the group of the namespace's init, which the agent signals */
		runproc_child_exec(&pc, false, iso_prep);
	}
	close(ip[1]);
	close(c->out);
	close(c->err);
	close(c->in);
	int child_errno = runproc_report_errno(ip[0]);
	close(ip[0]);
	if (child_errno)
		iso_report(report, child_errno);
	close(report); /* started: the agent stops waiting for an exec error */
	for (;;) {
		int st;
		pid_t w = waitpid(-1, &st, 0);
		if (w == prog) {
			if (write(statusw, &st, sizeof(st)) < 0) {
				/* the agent then reports how we ended instead */
			}
			_exit(0);
		}
		if (w < 0 && errno != EINTR)
			_exit(0);
	}
}

/* iso_add - one configured path into a table, if it exists here */
static void iso_add(struct iso_path *tab, size_t *n, const char *path)
{
	struct stat st;
	if (!path || *n >= RUNPROC_ISO_MAX_PATHS || strlen(path) >= PATH_MAX || stat(path, &st) != 0 ||
	    !S_ISDIR(st.st_mode))
		return;
	strcpy(tab[*n].path, path);
	tab[*n].flags = fs_locked_flags(path);
	(*n)++;
}

/* runproc_isolation_init - see runproc.h */
int runproc_isolation_init(const struct runproc_isolation *cfg)
{
	memset(&iso, 0, sizeof(iso));
	for (size_t i = 0; i < RUNPROC_ISO_MAX_PATHS; i++) {
		iso_add(iso.hide, &iso.nhide, cfg->hide[i]);
		iso_add(iso.ro, &iso.nro, cfg->readonly[i]);
		iso_add(iso.rw, &iso.nrw, cfg->writable[i]);
		iso_add(iso.tmp, &iso.ntmp, cfg->tmpfs[i]);
	}
	snprintf(iso.tmpfs_opts, sizeof(iso.tmpfs_opts), "mode=1777,size=%llu",
		 cfg->tmpfs_bytes ? cfg->tmpfs_bytes : ISO_TMPFS_DEFAULT_BYTES);
	snprintf(iso.uid_map, sizeof(iso.uid_map), "%u %u 1\n", (unsigned)getuid(), (unsigned)getuid());
	snprintf(iso.gid_map, sizeof(iso.gid_map), "%u %u 1\n", (unsigned)getgid(), (unsigned)getgid());

	/* try it: an init that builds the namespaces and the mounts, then ends */
	int rep[2];
	if (pipe2(rep, O_CLOEXEC) != 0)
		return -errno;
	pid_t pid = (pid_t)syscall(SYS_clone, SIGCHLD | ISO_CLONE_FLAGS, 0, 0, 0, 0);
	if (pid == 0) {
		close(rep[0]);
		int e = iso_enter();
		if (e != 0)
			iso_report(rep[1], e);
		_exit(0);
	}
	int e = pid < 0 ? errno : 0;
	close(rep[1]);
	if (pid > 0) {
		ssize_t got;
		do
			got = read(rep[0], &e, sizeof(e));
		while (got < 0 && errno == EINTR);
		if (got != (ssize_t)sizeof(e))
			e = 0;
		int st = 0;
		while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
			;
		if (e == 0 && !(WIFEXITED(st) && WEXITSTATUS(st) == 0))
			e = EIO;
	}
	close(rep[0]);
	iso.on = e == 0;
	return -e;
}

/* iso_start - the launcher: the init in new namespaces, the program's status on a pipe */
static pid_t iso_start(const struct runproc_child *c, int *status_fd)
{
	int stp[2];
	if (pipe2(stp, O_CLOEXEC | O_NONBLOCK) != 0)
		return -errno;
	pid_t pid = (pid_t)syscall(SYS_clone, SIGCHLD | ISO_CLONE_FLAGS, 0, 0, 0, 0);
	if (pid == 0) {
		close(stp[0]);
		iso_init(c, stp[1]);
	}
	int e = pid < 0 ? -errno : 0;
	close(stp[1]);
	if (pid < 0) {
		close(stp[0]);
		return e;
	}
	*status_fd = stp[0];
	return pid;
}

static const struct runproc_launcher iso_launcher = { .start = iso_start };

/* runproc_isolated - see runproc.h */
const struct runproc_launcher *runproc_isolated(void)
{
	return iso.on ? &iso_launcher : NULL;
}

