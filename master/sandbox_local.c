/*
 * sandbox_local.c - local sandboxes, started by the master on a worker's request.
 *
 * A worker is locked down with seccomp and cannot exec, so when it needs a sandbox it sends
 * REQ_SANDBOX and the master (OpenSSH's monitor, in spirit) starts `kode-gopher agent` in a
 * directory of its own: <sandbox-root>/<name>/{app,state,agent.sock}. The agent belongs to that
 * worker: it is killed and its directory removed when the worker ends or asks for a new one,
 * unless the sandbox is kept (exec --keep, serve --persistent). Reached through
 * sandbox_local_backend (master/sandbox.h) by the monitor, supervision and the transports.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ipc/fsutil.h"
#include "lib/proc.h"
#include "master/master.h"
#include "master/sandbox.h"
#include "policy/cgroup.h"
#include "policy/jail.h"
#include "policy/limits.h"
#include "policy/volume.h"


/* ---- in use, kept, left behind ---- */

/*
 * A sandbox directory in use holds <dir>/lock, flocked by the master of its session (the
 * descriptor lives as long as the session's sandbox; a killed master drops it by dying). A
 * kept sandbox (--persistent, exec --keep) also has <dir>/kept. So a second session cannot
 * attach to a sandbox in use, `sandboxes rm` can tell, and a directory with a lock nobody holds
 * and no kept marker was left by a session that never released it: the next start sweeps it.
 * Directories from before this scheme have no lock file and are never swept.
 */
#define SANDBOX_LOCK "lock"
#define SANDBOX_KEPT VOLUME_KEPT

/* lock_read_pid - the holder's pid written in an open lock file, or 0 */
static long lock_read_pid(int fd)
{
	char buf[24] = "";
	ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
	return n > 0 ? strtol(buf, NULL, 10) : 0;
}

/* sandbox_lock - hold dir's lock (*lock: descriptor + 1); a fresh lock file is made locked under
 * a temporary name and renamed into place, so a sweep never sees an unheld lock of a sandbox
 * being born */
static int sandbox_lock(int *lock, const char *dir, const char *name, char *err, size_t errlen)
{
	char path[600], tmp[640];
	snprintf(path, sizeof(path), "%s/" SANDBOX_LOCK, dir);
	int fd = open(path, O_RDWR | O_CLOEXEC | O_NOFOLLOW);
	bool fresh = fd < 0 && errno == ENOENT;
	if (fresh) {
		snprintf(tmp, sizeof(tmp), "%s/." SANDBOX_LOCK ".%d", dir, (int)getpid());
		fd = open(tmp, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
	}
	if (fd < 0) {
		snprintf(err, errlen, "cannot lock the sandbox %s: %s", name, strerror(errno));
		return -errno;
	}
	if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
		long holder = lock_read_pid(fd);
		close(fd);
		if (holder > 0)
			snprintf(err, errlen, "sandbox %s is in use by another session (kode-gopher pid %ld); "
				 "end that session first", name, holder);
		else
			snprintf(err, errlen, "sandbox %s is in use by another session; end that session "
				 "first", name);
		return -EBUSY;
	}
	char pid[24];
	int n = snprintf(pid, sizeof(pid), "%d\n", (int)getpid());
	if (ftruncate(fd, 0) != 0 || pwrite(fd, pid, (size_t)n, 0) != n ||
	    (fresh && rename(tmp, path) != 0)) {
		snprintf(err, errlen, "cannot lock the sandbox %s: %s", name, strerror(errno));
		close(fd);
		if (fresh)
			unlink(tmp);
		return -EIO;
	}
	*lock = fd + 1;
	return 0;
}

/* sandbox_local_in_use - see master.h */
bool sandbox_local_in_use(const char *root, const char *name, long *holder)
{
	char path[PATH_MAX];
	*holder = 0;
	snprintf(path, sizeof(path), "%s/%s/" SANDBOX_LOCK, root, name);
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return false;
	bool busy = flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK;
	if (busy)
		*holder = lock_read_pid(fd);
	close(fd);
	return busy;
}

/* sandbox_local_sweep - see master.h */
void sandbox_local_sweep(const char *root)
{
	int rfd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	DIR *d = rfd >= 0 ? fdopendir(rfd) : NULL;
	if (!d) {
		if (rfd >= 0)
			close(rfd);
		return;
	}
	struct dirent *e;
	while ((e = readdir(d)) != NULL) {
		if (e->d_name[0] == '.')
			continue;
		char lock[PATH_MAX], kept[PATH_MAX];
		snprintf(lock, sizeof(lock), "%s/" SANDBOX_LOCK, e->d_name);
		snprintf(kept, sizeof(kept), "%s/" SANDBOX_KEPT, e->d_name);
		if (faccessat(rfd, kept, F_OK, AT_SYMLINK_NOFOLLOW) == 0)
			continue;
		int fd = openat(rfd, lock, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
		if (fd < 0)
			continue; /* no lock file: not ours to judge */
		if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
			int r = fs_rm_tree_at(rfd, e->d_name);
			if (r == 0)
				log_info("removed sandbox %s, left in %s by a session that ended without "
					 "releasing it", e->d_name, root);
			else
				log_warn("sandbox %s in %s was left by an ended session and could not be "
					 "removed: %s", e->d_name, root, strerror(-r));
		}
		close(fd);
	}
	closedir(d);
}

/* ---- limits ---- */

/* how this host lets sandboxes be limited, decided once at start-up */
static struct cgroup_plan sb_plan;
static bool sb_planned;

/* sandbox_local_limits - see master.h */
void sandbox_local_limits(const struct serve_config *cfg)
{
	cgroup_plan(&sb_plan, getuid() == 0, NULL);
	sb_planned = true;
	cgroup_sweep(&sb_plan); /* what killed masters' sandboxes left */
	struct cgroup_limits l = { .memory = cfg->memory, .pids = cfg->pids };
	cgroup_log_plan(&sb_plan, &l);
	/* systemd-run finds the user's manager through it (still one thread here: setenv is safe) */
	if (sb_plan.systemd && !getenv("XDG_RUNTIME_DIR")) {
		char rt[64];
		snprintf(rt, sizeof(rt), "/run/user/%u", (unsigned)getuid());
		setenv("XDG_RUNTIME_DIR", rt, 0);
	}
}

/* jail_argv - the command that starts `kode-gopher jail ARGV...` (argv[0] "kode-gopher"): as a
 * normal user on cgroup v2, in a transient systemd scope delegated to us; returns the program */
static const char *jail_argv(const char *name, char **argv, char **full, size_t cap, char *unit,
			     size_t unitcap, char exe[PATH_MAX])
{
	size_t n = 0;
	if (sb_planned && sb_plan.systemd) {
		ssize_t el = readlink("/proc/self/exe", exe, PATH_MAX - 1);
		if (el > 0) {
			exe[el] = '\0';
			n = (size_t)cgroup_scope_argv(&sb_plan, name, unit, unitcap, full);
			full[n++] = exe;
		}
	}
	const char *path = n ? full[0] : "/proc/self/exe";
	for (size_t i = n ? 1 : 0; argv[i] && n + 1 < cap; i++)
		full[n++] = argv[i];
	full[n] = NULL;
	return path;
}

/* sandbox_local_probe - see master.h */
int sandbox_local_probe(const struct serve_config *cfg, FILE *out)
{
	char name[40], mem[32], pids[16];
	snprintf(name, sizeof(name), "doctor-%d", (int)getpid());
	snprintf(mem, sizeof(mem), "%lld", cfg->memory);
	snprintf(pids, sizeof(pids), "%d", cfg->pids);
	char *argv[] = { "kode-gopher", "jail", "--cgroup-probe", "--name", name, "--memory", mem,
			 "--pids", pids, NULL };
	char *full[32], unit[128], exe[PATH_MAX];
	const char *path = jail_argv(name, argv, full, sizeof(full) / sizeof(full[0]), unit,
				     sizeof(unit), exe);
	cgroup_cpu_weight(&sb_plan, name, false, true); /* as a session's sandbox would have it */
	int pfd[2];
	if (pipe2(pfd, O_CLOEXEC) != 0)
		return -errno;
	pid_t pid = fork();
	if (pid < 0) {
		int e = errno;
		close(pfd[0]);
		close(pfd[1]);
		return -e;
	}
	if (pid == 0) {
		dup2(pfd[1], STDOUT_FILENO);
		execv(path, full);
		fprintf(stderr, "kode-gopher doctor: cannot run %s: %s\n", path, strerror(errno));
		_exit(127);
	}
	close(pfd[1]);
	FILE *in = fdopen(pfd[0], "r");
	char line[1024];
	int lines = 0;
	while (in && fgets(line, sizeof(line), in)) {
		fprintf(out, "  %s", line);
		lines++;
	}
	if (in)
		fclose(in);
	int status = 0;
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	for (int ms = 0; ms < SANDBOX_PROBE_CGROUP_RM_WAIT_MS && !cgroup_remove(&sb_plan, name);
	     ms += SANDBOX_CGROUP_RM_POLL_MS)
		usleep(SANDBOX_CGROUP_RM_POLL_MS * 1000);
	return WIFEXITED(status) && WEXITSTATUS(status) == 0 && lines > 0 ? 0 : -EIO;
}

/* sandbox_local_plan - see master.h */
const struct cgroup_plan *sandbox_local_plan(void)
{
	return sb_planned ? &sb_plan : NULL;
}

/* ---- releasing: the signal now, the waiting and removing after ---- */

/* What a release still has to do once the agent has been sent SIGKILL: reap it, remove its
 * cgroups and (unless kept) its directory, drop its lock. Nothing here signals: the pid may
 * have been reaped by the master's main loop meanwhile (wait4(-1)) and even reused. */
struct sandbox_gone {
	pid_t pid;
	char name[64];
	char dir[512];
	bool keep;
	int lock; /* descriptor + 1, or 0 */
	uid_t worker_uid; /* a reference to the worker's identity (its gid is on the directory), or 0 */
};

/* sandbox_signal - SIGKILL the agent's whole process group; what is left to do goes to g */
static void sandbox_signal(struct worker *w, struct sandbox_gone *g)
{
	if (w->sandbox_pid > 0) {
		kill(-w->sandbox_pid, SIGKILL);
		kill(w->sandbox_pid, SIGKILL);
	}
	g->pid = w->sandbox_pid;
	snprintf(g->name, sizeof(g->name), "%s", w->sandbox_name);
	snprintf(g->dir, sizeof(g->dir), "%s", w->sandbox_dir);
	g->keep = w->sandbox_keep;
	g->lock = w->sandbox_lock;
	/* the worker's gid stays on the directory and socket until they are gone: no new worker
	 * may get it before (master/identity.c) */
	g->worker_uid = w->id_held ? w->uid : 0;
	if (g->worker_uid)
		identity_ref(g->worker_uid);
	w->sandbox_pid = 0;
	w->sandbox_lock = 0;
	w->sandbox_dir[0] = '\0';
	w->sandbox_name[0] = '\0';
}

/* sandbox_forget_worker - a kept sandbox outlives its worker, whose uid a later worker may get:
 * the directory and sock/ go back to the sandbox's own group (the next jail sets its worker's) */
static void sandbox_forget_worker(const char *dir)
{
	char sock[600];
	struct stat st;
	snprintf(sock, sizeof(sock), "%s/sock", dir);
	if (lstat(dir, &st) == 0 && S_ISDIR(st.st_mode))
		if (lchown(dir, (uid_t)-1, (gid_t)st.st_uid) != 0 || lchown(sock, (uid_t)-1, (gid_t)st.st_uid) != 0)
			log_warn("kept sandbox %s: cannot take its worker's group off it: %s", dir, strerror(errno));
}

/* sandbox_finish - the slow part of a release: wait, remove cgroups and directory, unlock */
static void sandbox_finish(struct sandbox_gone *g)
{
	if (g->pid > 0)
		waitpid(g->pid, NULL, 0); /* ECHILD when the main loop reaped it first */
	/* the jail's pid namespace empties a moment after its init dies: wait for the processes
	 * still in its groups on their pidfds, then remove the groups (the loop is for a process
	 * the wait could not watch) */
	if (sb_planned && g->name[0]) {
		pid_t left[64];
		size_t n = cgroup_procs(&sb_plan, g->name, left, sizeof(left) / sizeof(left[0]));
		if (n)
			proc_wait_gone(left, n, SANDBOX_CGROUP_RM_WAIT_MS);
	}
	for (int ms = 0; sb_planned && g->name[0] && !cgroup_remove(&sb_plan, g->name);
	     ms += SANDBOX_CGROUP_RM_POLL_MS) {
		if (ms >= SANDBOX_CGROUP_RM_WAIT_MS) {
			log_warn("sandbox %s: its cgroups still hold processes %d ms after it was killed; "
				 "the next start removes them", g->name, SANDBOX_CGROUP_RM_WAIT_MS);
			break;
		}
		usleep(SANDBOX_CGROUP_RM_POLL_MS * 1000);
	}
	if (g->dir[0] && g->keep && g->worker_uid)
		sandbox_forget_worker(g->dir);
	if (g->dir[0] && !g->keep) {
		int r = fs_rm_tree_at(AT_FDCWD, g->dir);
		if (r != 0) {
			/* the jail's last mounts may go a moment after its processes: once more */
			usleep(SANDBOX_RM_RETRY_MS * 1000);
			r = fs_rm_tree_at(AT_FDCWD, g->dir);
		}
		if (r != 0)
			log_error("sandbox %s could not be removed from %s: %s; remove it with "
				  "`kode-gopher sandboxes rm %s`", g->name, g->dir, strerror(-r), g->name);
		else
			log_info("released sandbox %s", g->name);
	}
	if (g->lock > 0)
		close(g->lock - 1);
	if (g->worker_uid)
		identity_unref(g->worker_uid);
}

/* sandbox_local_release - kill the worker's sandbox and remove it unless it is kept; returns
 * when all is done (stdio sessions, exec, a kept sandbox about to be attached again) */
static void sandbox_local_release(struct worker *w)
{
	struct sandbox_gone g;
	sandbox_signal(w, &g);
	sandbox_finish(&g);
}

/* sandbox_finish_job - sandbox_finish for later_run */
static void sandbox_finish_job(void *arg)
{
	sandbox_finish(arg);
	free(arg);
}

/* sandbox_local_release_later - SIGKILL w's sandbox now and take it off w. Killing a jail is a
 * signal, but reaping it, removing its cgroups and deleting its directory (a fresh sandbox's
 * cache layers already hold a thousand files) took 0.3-0.9 s on the thread that routes every
 * session's messages; that part goes to master/later.c. A sandbox's name is never reused meanwhile (fresh names are
 * random; a kept one is released synchronously before it is attached again). */
static void sandbox_local_release_later(struct worker *w)
{
	if (!w->sandbox_dir[0] && w->sandbox_pid <= 0 && !w->sandbox_lock)
		return;
	log_info("releasing sandbox %s of session %.8s…", w->sandbox_name, w->session);
	struct sandbox_gone *g = malloc(sizeof(*g));
	struct sandbox_gone here;
	sandbox_signal(w, g ? g : &here);
	if (!g)
		sandbox_finish(&here); /* no memory: do it now */
	else if (!later_run(sandbox_finish_job, g))
		sandbox_finish_job(g);
}

/* sandbox_cpu - the CPU weight of sandbox name: a pre-start's, or a session's; create: before
 * its jail starts (the master alone writes it: policy/cgroup.c) */
static void sandbox_cpu(bool prestart, const char *name, bool create)
{
	if (!sb_planned)
		return;
	int r = cgroup_cpu_weight(&sb_plan, name, prestart, create);
	if (r != 0 && r != -EOPNOTSUPP)
		log_warn("sandbox %s: cannot set its CPU weight (%s): %s", name, prestart ?
			 "a pre-start's, low until a session takes it" : "a session's", strerror(-r));
}

/* ---- starting: off the main loop ---- */

/*
 * A start (directories, lock, CPU group, the jail's posix_spawn: 20-60 ms on a loaded host)
 * runs on the sandbox spawner (kg-sandboxes, master/later.c) when the worker's transport serves
 * other sessions too (w->mu: the shared server), so that the main loop goes on routing their
 * messages; inline otherwise (stdio, exec). While a start runs, w->sandbox_start points at it: it holds a copy
 * of all it needs, and reaches the worker only under w->mu and only while sst->w is set. The
 * worker's release clears that (sandbox_local_gone), after which its slot may be closed and
 * reused; the start then undoes itself: its jail is killed, and its directory, cgroups and
 * lock go as in a release. Until then its reference to the worker's identity keeps that uid
 * (the group of the directory and socket) from a new worker. A second REQ_SANDBOX meanwhile
 * ends the worker (master/monitor.c).
 */
struct sandbox_start {
	struct sandbox_start *next;  /* the spawner's queue */
	struct worker *w;            /* NULL once the worker is gone (under mu) */
	pthread_mutex_t *mu;         /* w->mu; NULL: started inline */
	const struct serve_config *cfg;
	uint32_t seq;                /* of the REQ_SANDBOX it answers */
	pid_t wpid;                  /* the worker's, for log lines */
	const char *want;            /* --claim's kept sandbox, or NULL: a fresh one */
	bool keep;                   /* --persistent */
	bool taken;                  /* a session took the worker meanwhile (under mu) */
	uid_t sock_gid;              /* the worker's uid = gid; 0: it has none of its own */
	uid_t uid_ref;               /* that uid, referenced (master/identity.c); 0: none */
	bool has_old;                /* old: the same kept sandbox, wholly released first */
	struct sandbox_gone old;
};

static void st_lock(struct sandbox_start *j)
{
	if (j->mu)
		pthread_mutex_lock(j->mu);
}

static void st_unlock(struct sandbox_start *j)
{
	if (j->mu)
		pthread_mutex_unlock(j->mu);
}

/* sandbox_jail - make <root>/<name> and start its jail: the pid, or a negative errno and why
 * in err. name, dir: what it chose; *lock: the directory's lock once held (descriptor + 1) */
static pid_t sandbox_jail(struct sandbox_start *j, bool prestart, char name[64], char dir[512],
			  int *lock, char *err, size_t errlen)
{
	const struct serve_config *cfg = j->cfg;
	char sock[600];
	if (j->has_old)
		sandbox_finish(&j->old);
	j->has_old = false;
	if (j->want) {
		snprintf(name, 64, "%s", j->want);
	} else {
		char rnd[17];
		random_hex(rnd, 6);
		snprintf(name, 64, "kg-%s", rnd);
	}
	for (const char *p = name; *p; p++)
		if (!(*p == '-' || *p == '_' || (*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9'))) {
			snprintf(err, errlen, "invalid sandbox name \"%s\"", name);
			return -EINVAL;
		}
	snprintf(dir, 512, "%s/%s", cfg->sandbox_root, name);
	snprintf(sock, sizeof(sock), "%s/sock/agent.sock", dir);
	if (strlen(sock) >= 108) {
		snprintf(err, errlen, "sandbox root %s is too long for a unix socket path", cfg->sandbox_root);
		return -ENAMETOOLONG;
	}
	struct stat st;
	if (j->want && stat(dir, &st) != 0) {
		snprintf(err, errlen, "no kept sandbox named \"%s\" (see `kode-gopher sandboxes list`)", name);
		return -ENOENT;
	}
	/* sandboxes run as uids of their own, which must pass through the root directory */
	int r = fs_mkdir_p(cfg->sandbox_root, 0711);
	if (r == 0 && getuid() == 0)
		chmod(cfg->sandbox_root, 0711);
	static const char *const subs[] = { "", "/app", "/app/persist", "/state", "/sock", "/cache" };
	for (size_t i = 0; r == 0 && i < sizeof(subs) / sizeof(subs[0]); i++) {
		char p[700];
		snprintf(p, sizeof(p), "%s%s", dir, subs[i]);
		r = fs_mkdir_p(p, 0700);
	}
	if (r) {
		snprintf(err, errlen, "cannot create the sandbox directory %s: %s", dir, strerror(-r));
		return r;
	}
	if ((r = sandbox_lock(lock, dir, name, err, errlen)) != 0)
		return r;
	char kept[620];
	snprintf(kept, sizeof(kept), "%s/" SANDBOX_KEPT, dir);
	if (j->keep) {
		int kfd = open(kept, O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
		if (kfd >= 0)
			close(kfd);
	} else {
		unlink(kept); /* a kept sandbox claimed without --persistent goes at session end */
	}
	unlink(sock);

	static const char *const names[] = { "debug", "info", "warn", "error", "off" };
	char mem[32], disk[32], pids[16], maxtmo[16], modcache[600], gocache[600];
	snprintf(modcache, sizeof(modcache), "%s/gomodcache", cfg->runtime_dir);
	snprintf(gocache, sizeof(gocache), "%s/gocache", cfg->runtime_dir);
	snprintf(mem, sizeof(mem), "%lld", cfg->memory);
	snprintf(disk, sizeof(disk), "%lld", cfg->disk);
	snprintf(pids, sizeof(pids), "%d", cfg->pids);
	snprintf(maxtmo, sizeof(maxtmo), "%d", cfg->max_timeout_s);
	const char *level = names[cfg->log_level];
	char wgid[16];
	snprintf(wgid, sizeof(wgid), "%u", (unsigned)j->sock_gid);
	char *argv[] = { "kode-gopher", "jail", "--dir", dir, "--name", name,
			 "--runtime-dir", (char *)cfg->runtime_dir, "--memory", mem, "--pids", pids,
			 "--disk", disk,
			 "--network", (char *)cfg->network, "--log-level", (char *)level,
			 "--sock-gid", wgid, "--",
			 "kode-gopher", "agent", "--listen", "unix:" JAIL_SOCK_DIR "/agent.sock",
			 "--app-dir", JAIL_APP, "--state-dir", JAIL_STATE,
			 "--runtime-dir", (char *)cfg->runtime_dir, "--gomodcache", modcache,
			 "--gocache", gocache,
			 "--log-level", (char *)level, "--max-timeout", maxtmo,
			 "--memory-limit", mem, "--pids-limit", pids, "--disk-limit", disk, NULL };
	char *full[96], unit[128], exe[PATH_MAX];
	const char *path = jail_argv(name, argv, full, sizeof(full) / sizeof(full[0]), unit,
				     sizeof(unit), exe);
	sandbox_cpu(prestart, name, true); /* its CPU group at its weight before the jail enters it */
	/* its own process group: killing the sandbox kills all it started */
	struct proc_how how = { .stdout_to_stderr = true, .setsid = true };
	pid_t pid = proc_spawn(path, full, &how);
	if (pid < 0)
		snprintf(err, errlen, "cannot start a sandbox: %s", strerror((int)-pid));
	return pid;
}

/* sandbox_lost - w's jail pid is gone (how): the worker is told at once (NOTE_SANDBOX) */
static void sandbox_lost(struct worker *w, pid_t pid, const char *how)
{
	log_warn("sandbox %s (agent pid %d) %s", w->sandbox_name, (int)pid, how);
	kill(-pid, SIGKILL); /* whatever it left running */
	w->sandbox_pid = 0;
	/* tell the worker now, so it need not wait for an agent that will never answer */
	struct ipc_buf b;
	if (w->pid > 0 && w->hello && ipc_pack_note_sandbox(&b, 0, w->sandbox_name, how) == 0)
		channel_send(w, &b);
}

/* sandbox_start_detach - w is gone (under w->mu): a start of its still running undoes itself */
static void sandbox_start_detach(struct worker *w)
{
	if (w->sandbox_start) {
		w->sandbox_start->w = NULL;
		w->sandbox_start = NULL;
	}
}

/* sandbox_start_run - one start, to its answer (ANS_SANDBOX) or, if its worker went meanwhile,
 * undone */
static void sandbox_start_run(struct sandbox_start *j)
{
	char err[1024] = "", name[64] = "", dir[512] = "";
	int lock = 0;
	pid_t pid = -ESRCH;
	st_lock(j);
	bool went = !j->w;
	bool prestart = j->w && j->w->prestart;
	st_unlock(j);
	if (!went)
		pid = sandbox_jail(j, prestart, name, dir, &lock, err, sizeof(err));
	else
		log_info("a sandbox for worker pid %d was not started: the worker went while it "
			 "waited for the spawner", (int)j->wpid);
	if (went && j->has_old)
		sandbox_finish(&j->old);
	st_lock(j);
	struct worker *w = j->w;
	bool raise = w && prestart && j->taken;
	if (w) {
		w->sandbox_start = NULL;
		if (pid > 0) {
			w->sandbox_pid = pid;
			w->sandbox_lock = lock;
			w->sandbox_keep = j->keep;
			snprintf(w->sandbox_name, sizeof(w->sandbox_name), "%s", name);
			snprintf(w->sandbox_dir, sizeof(w->sandbox_dir), "%s", dir);
			log_info("sandbox %s: agent pid %d in %s", name, (int)pid, dir);
		}
		char sock[600] = "";
		if (pid > 0)
			snprintf(sock, sizeof(sock), "%s/sock/agent.sock", dir);
		struct ipc_buf b;
		if (ipc_pack_ans_sandbox(&b, j->seq, pid > 0, err, sock, w->sandbox_name,
					 w->sandbox_dir) == 0)
			channel_send(w, &b);
		/* the main loop reaps every child (wait4(-1), under mu): a jail that died before its
		 * pid was on w went unrecognized; its log lines say why */
		siginfo_t si;
		if (pid > 0 && waitid(P_PID, (id_t)pid, &si, WEXITED | WNOHANG | WNOWAIT) != 0 &&
		    errno == ECHILD)
			sandbox_lost(w, pid, "ended as it started");
	}
	st_unlock(j);
	if (raise)
		sandbox_cpu(false, name, false);
	if (w && pid > 0) {
		if (j->uid_ref)
			identity_unref(j->uid_ref);
		free(j);
		return;
	}
	/* no sandbox for the worker: what was made goes (a directory only once its lock is ours:
	 * a kept one another session holds is not touched) */
	struct sandbox_gone g = { .pid = pid > 0 ? pid : 0, .keep = j->keep || j->want != NULL,
				  .lock = lock, .worker_uid = j->uid_ref };
	if (name[0] && (pid > 0 || lock))
		snprintf(g.name, sizeof(g.name), "%s", name);
	if (lock)
		snprintf(g.dir, sizeof(g.dir), "%s", dir);
	if (pid > 0) {
		log_info("sandbox %s: its worker (pid %d) went while it started; removing it", name,
			 (int)j->wpid);
		kill(-pid, SIGKILL);
		kill(pid, SIGKILL);
	}
	bool here = !j->mu; /* started inline: done when this returns */
	free(j);
	struct sandbox_gone *gp = here ? NULL : malloc(sizeof(*gp));
	if (gp)
		*gp = g;
	if (!gp || !later_run(sandbox_finish_job, gp)) {
		sandbox_finish(&g);
		free(gp);
	}
}

/* sandbox_start_job - sandbox_start_run for later_spawn */
static void sandbox_start_job(void *arg)
{
	sandbox_start_run(arg);
}

/* sandbox_local_taken - a session took w: its sandbox's weight up to a session's (one still
 * starting gets it when its jail is up) */
static void sandbox_local_taken(struct worker *w)
{
	if (w->sandbox_start)
		w->sandbox_start->taken = true;
	else if (w->sandbox_name[0])
		sandbox_cpu(false, w->sandbox_name, false);
}

/* sandbox_local_reaped - the agent died by itself: the worker is told at once (NOTE_SANDBOX) */
static bool sandbox_local_reaped(struct worker *w, pid_t pid, int status)
{
	if (w->sandbox_pid != pid || pid <= 0)
		return false;
	char how[96];
	sandbox_lost(w, pid, proc_status_text(status, how, sizeof(how)));
	return true;
}

/* sandbox_local_answer - serve one REQ_SANDBOX from worker w (master/sandbox.h): a release at
 * once, a spawn by the spawner (the shared server) or here */
static void sandbox_local_answer(struct worker *w, uint32_t seq, bool spawn, const char *user)
{
	const struct serve_config *cfg = w->cfg;
	(void)user;
	if (!spawn) {
		sandbox_local_release_later(w);
		struct ipc_buf b;
		if (ipc_pack_ans_sandbox(&b, seq, true, "", "", "", "") == 0)
			channel_send(w, &b);
		return;
	}
	struct sandbox_start *j = calloc(1, sizeof(*j));
	if (!j) {
		struct ipc_buf b;
		if (ipc_pack_ans_sandbox(&b, seq, false, "cannot start a sandbox: out of memory", "",
					 "", "") == 0)
			channel_send(w, &b);
		return;
	}
	sandbox_start_detach(w); /* none runs: master/monitor.c ends a worker that asks twice */
	j->w = w;
	j->mu = w->mu;
	j->cfg = cfg;
	j->seq = seq;
	j->wpid = w->pid;
	j->keep = cfg->persistent;
	j->sock_gid = w->uid;
	j->uid_ref = w->id_held ? w->uid : 0;
	if (j->uid_ref)
		identity_ref(j->uid_ref);
	/* --claim NAME: the first sandbox is that one, and if it dies it is tried once more
	 * before the session carries on in a fresh one */
	if (cfg->claim && w->claim_attempts < 2) {
		j->want = cfg->claim;
		w->claim_attempts++;
	}
	/* a second spawn replaces a dead or stuck sandbox: the old one goes first, and wholly
	 * before a kept one of the same name is locked again */
	if (j->want && strcmp(j->want, w->sandbox_name) == 0) {
		sandbox_signal(w, &j->old);
		j->has_old = true;
	} else {
		sandbox_local_release_later(w);
	}
	w->sandbox_start = j;
	if (j->mu && later_spawn(LATER_SANDBOXES, sandbox_start_job, j))
		return;
	j->mu = NULL; /* here, then: the caller holds w->mu, if any */
	sandbox_start_run(j);
}

/* sandbox_local_gone - the worker is gone: kill its sandbox; remove it now or in the background */
static void sandbox_local_gone(struct worker *w, bool wait)
{
	sandbox_start_detach(w);
	if (wait)
		sandbox_local_release(w);
	else
		sandbox_local_release_later(w);
}

const struct sandbox_backend sandbox_local_backend = {
	.name = "local",
	.answer = sandbox_local_answer,
	.reaped = sandbox_local_reaped,
	.release = sandbox_local_gone,
	.taken = sandbox_local_taken,
};
