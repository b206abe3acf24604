/*
 * runproc.c - spawn a child with a deadline, process-group kill and capped output capture.
 *
 * Called by agent/pipeline.c and agent/gobuild.c for every process the agent starts: the Go
 * toolchain and the user's binary. The child gets its own session so that one kill(-pgid)
 * reaches everything it forked; output is read with poll into a head buffer and a tail ring so
 * memory stays bounded however much the child writes, and the pipes are always drained so the
 * child never blocks on a full pipe.
 */
#include "agent/runproc.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ipc/fsutil.h"
#include "ipc/log.h"
#include "policy/caps.h"
#include "policy/limits.h"

#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif

struct cap_buf {
	size_t head_cap, tail_cap;
	char *head;
	size_t head_len, head_alloc;
	char *ring;
	size_t ring_pos, ring_len;
	uint64_t total;
};

/* runproc_signame - "SIGKILL" for SIGKILL, "SIG<n>" for a number without a name; thread-safe */
const char *runproc_signame(int sig)
{
	static __thread char buf[32];
	const char *abbrev = sigabbrev_np(sig);
	if (abbrev)
		snprintf(buf, sizeof(buf), "SIG%s", abbrev);
	else
		snprintf(buf, sizeof(buf), "SIG%d", sig);
	return buf;
}

/* ---- the thread's watch: cancellation and live lines ---- */

static __thread struct runproc_watch watch = { .cancel_fd = -1 };
static __thread bool watch_set;

/* runproc_watch_set - see runproc.h */
void runproc_watch_set(const struct runproc_watch *w)
{
	watch_set = w != NULL;
	watch = w ? *w : (struct runproc_watch){ .cancel_fd = -1 };
}

/* runproc_cancelled - is the watch's cancel descriptor readable (it is never drained)? */
bool runproc_cancelled(void)
{
	if (!watch_set || watch.cancel_fd < 0)
		return false;
	struct pollfd p = { .fd = watch.cancel_fd, .events = POLLIN };
	return poll(&p, 1, 0) > 0;
}

/* One stream's unfinished line, for the watch's line callback. */
struct line_buf {
	int stream;
	bool off;                 /* the watcher wants no more lines from this run */
	size_t len;
	char text[RUNPROC_LINE_MAX];
};

/* line_flush - hand the pending piece to the watcher */
static void line_flush(struct line_buf *l)
{
	if (!l->off && l->len && !watch.line(watch.ctx, l->stream, l->text, l->len))
		l->off = true;
	l->len = 0;
}

/* line_feed - split freshly read bytes into lines for the watcher */
static void line_feed(struct line_buf *l, const char *p, size_t n)
{
	if (!watch_set || !watch.line || l->off)
		return;
	while (n && !l->off) {
		const char *nl = memchr(p, '\n', n);
		size_t take = nl ? (size_t)(nl - p) : n;
		size_t room = RUNPROC_LINE_MAX - l->len;
		size_t k = take < room ? take : room;
		memcpy(l->text + l->len, p, k);
		l->len += k;
		if (k < take || l->len == RUNPROC_LINE_MAX) {
			line_flush(l); /* a long line goes in pieces */
			p += k;
			n -= k;
			continue;
		}
		p += take;
		n -= take;
		if (nl) {
			line_flush(l);
			p++;
			n--;
		}
	}
}

/* cap_init - split the cap into a head part and (optionally) a tail ring */
static void cap_init(struct cap_buf *c, size_t cap, bool keep_tail)
{
	memset(c, 0, sizeof(*c));
	if (cap == 0)
		cap = RUNPROC_DEFAULT_CAP_BYTES;
	if (keep_tail) {
		c->head_cap = cap / 2;
		c->tail_cap = cap - c->head_cap;
	} else {
		c->head_cap = cap;
	}
}

/* cap_append - keep bytes in the head until it is full, then in the ring; count everything */
static int cap_append(struct cap_buf *c, const char *p, size_t n)
{
	c->total += n;
	if (c->head_len < c->head_cap) {
		size_t take = c->head_cap - c->head_len;
		if (take > n)
			take = n;
		if (c->head_len + take > c->head_alloc) {
			/* grow geometrically but never past the head cap, so small outputs stay small */
			size_t want = c->head_alloc ? c->head_alloc * 2 : 16384;
			while (want < c->head_len + take)
				want *= 2;
			if (want > c->head_cap)
				want = c->head_cap;
			char *nh = realloc(c->head, want);
			if (!nh)
				return -ENOMEM;
			c->head = nh;
			c->head_alloc = want;
		}
		memcpy(c->head + c->head_len, p, take);
		c->head_len += take;
		p += take;
		n -= take;
	}
	if (n == 0 || c->tail_cap == 0)
		return 0;
	if (!c->ring) {
		c->ring = malloc(c->tail_cap);
		if (!c->ring)
			return -ENOMEM;
	}
	if (n >= c->tail_cap) {
		/* only the last tail_cap bytes of this chunk can survive */
		memcpy(c->ring, p + n - c->tail_cap, c->tail_cap);
		c->ring_pos = 0;
		c->ring_len = c->tail_cap;
		return 0;
	}
	size_t first = c->tail_cap - c->ring_pos;
	if (first > n)
		first = n;
	memcpy(c->ring + c->ring_pos, p, first);
	memcpy(c->ring, p + first, n - first);
	c->ring_pos = (c->ring_pos + n) % c->tail_cap;
	c->ring_len = c->ring_len + n > c->tail_cap ? c->tail_cap : c->ring_len + n;
	return 0;
}

/* cap_finish - assemble head, omission marker and tail into one NUL-terminated string */
static int cap_finish(struct cap_buf *c, struct runproc_capture *out)
{
	char marker[96];
	size_t mlen = 0;
	uint64_t kept = c->head_len + c->ring_len;
	out->total = c->total;
	out->truncated = c->total > kept;
	if (out->truncated && c->tail_cap > 0)
		mlen = (size_t)snprintf(marker, sizeof(marker),
					"\n\xe2\x80\xa6 [%llu bytes omitted] \xe2\x80\xa6\n",
					(unsigned long long)(c->total - kept));
	size_t len = c->head_len + mlen + c->ring_len;
	char *d = malloc(len + 1);
	if (!d)
		return -ENOMEM;
	if (c->head_len)
		memcpy(d, c->head, c->head_len);
	memcpy(d + c->head_len, marker, mlen);
	char *t = d + c->head_len + mlen;
	if (c->ring_len == 0) {
		/* nothing past the head */
	} else if (c->ring_len < c->tail_cap) {
		/* never wrapped: the ring holds bytes 0..ring_len in order */
		memcpy(t, c->ring, c->ring_len);
	} else {
		memcpy(t, c->ring + c->ring_pos, c->tail_cap - c->ring_pos);
		memcpy(t + c->tail_cap - c->ring_pos, c->ring, c->ring_pos);
	}
	d[len] = '\0';
	out->data = d;
	out->len = len;
	return 0;
}

/* cap_free - release both buffers */
static void cap_free(struct cap_buf *c)
{
	free(c->head);
	free(c->ring);
	c->head = c->ring = NULL;
}

/* resolve_path - find argv0 in the child's PATH the way execvp would, before fork */
static int resolve_path(const char *argv0, const char *const *envp, char *out, size_t outlen)
{
	if (strchr(argv0, '/')) {
		if (strlen(argv0) >= outlen)
			return -ENAMETOOLONG;
		strcpy(out, argv0);
		return 0;
	}
	const char *path = NULL;
	for (const char *const *e = envp; e && *e; e++)
		if (strncmp(*e, "PATH=", 5) == 0)
			path = *e + 5;
	if (!path)
		path = "/usr/local/bin:/usr/bin:/bin";
	int err = -ENOENT;
	while (*path) {
		const char *colon = strchrnul(path, ':');
		size_t dlen = (size_t)(colon - path);
		int n = snprintf(out, outlen, "%.*s%s%s", (int)dlen, path, dlen ? "/" : "./", argv0);
		path = *colon ? colon + 1 : colon;
		if (n < 0 || (size_t)n >= outlen)
			continue;
		struct stat st;
		if (stat(out, &st) == 0 && S_ISREG(st.st_mode)) {
			if (access(out, X_OK) == 0)
				return 0;
			err = -EACCES;
		}
	}
	return err;
}

/* child_exec - runs in the forked child: async-signal-safe calls only, then execve */
static void child_exec(const char *path, const struct runproc_opts *o, pid_t parent, int devnull,
		       int outw, int errw, int report, bool isolated)
{
	static const char *const empty_env[] = { NULL };
	int e;

	/* isolated, we stay in the group of the namespace's init, which the agent signals */
	if (!isolated && setsid() < 0)
		goto fail;
	/* PDEATHSIG fires when the forking thread ends: the pipeline thread waits for us, so the
	 * child dies exactly when the agent (or that thread) dies. */
	if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0)
		goto fail;
	if (getppid() != parent)
		_exit(127);
	if (dup2(devnull, 0) < 0 || dup2(outw, 1) < 0 || dup2(o->merge_stderr ? outw : errw, 2) < 0)
		goto fail;
	if (o->cwd && chdir(o->cwd) < 0)
		goto fail;
	/* the agent may ignore or block signals (SIGPIPE, SIGCHLD...): the program must not
	 * inherit that */
	struct sigaction dfl;
	memset(&dfl, 0, sizeof(dfl));
	dfl.sa_handler = SIG_DFL;
	for (int s = 1; s < NSIG; s++)
		if (s != SIGKILL && s != SIGSTOP)
			sigaction(s, &dfl, NULL);
	sigset_t none;
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	/* no agent descriptor (listening socket, other calls' files) may leak into the program */
	if (syscall(SYS_close_range, 3U, ~0U, CLOSE_RANGE_CLOEXEC) < 0) {
		struct rlimit rl;
		long max = 65536;
		if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
		    (long)rl.rlim_cur < max)
			max = (long)rl.rlim_cur;
		for (int fd = 3; fd < max; fd++)
			if (fd != report)
				fcntl(fd, F_SETFD, FD_CLOEXEC);
	}
	/* in its own user namespace the program starts with every capability there (enough to
	 * unmount what hides the agent's files): it keeps none, even as root after exec */
	if (isolated && (e = caps_drop_all()) != 0) {
		errno = -e;
		goto fail;
	}
	/* the filter was compiled before the fork: installing it is two plain syscalls */
	if (o->seccomp && (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 ||
			   prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, o->seccomp) < 0))
		goto fail;
	execve(path, (char *const *)o->argv, (char *const *)(o->envp ? o->envp : empty_env));
fail:
	e = errno;
	if (write(report, &e, sizeof(e)) < 0) {
		/* nothing more a dying child can do */
	}
	_exit(127);
}

/* ---- the program's own namespaces (runproc.h) ---- */

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

/* iso_close_except - close every descriptor but the few in keep (async-signal-safe): the init
 * lives as long as the program and must not hold the agent's sockets or other runs' pipes */
static void iso_close_except(int *keep, size_t n)
{
	for (size_t i = 1; i < n; i++)
		for (size_t j = i; j > 0 && keep[j - 1] > keep[j]; j--) {
			int t = keep[j];
			keep[j] = keep[j - 1];
			keep[j - 1] = t;
		}
	unsigned lo = 3;
	for (size_t i = 0; i < n; i++) {
		if (keep[i] < (int)lo)
			continue;
		if ((unsigned)keep[i] > lo)
			syscall(SYS_close_range, lo, (unsigned)keep[i] - 1, 0);
		lo = (unsigned)keep[i] + 1;
	}
	syscall(SYS_close_range, lo, ~0U, 0);
}

/* iso_report - tell the agent why the program could not start, and end */
static void __attribute__((noreturn)) iso_report(int report, int e)
{
	if (write(report, &e, sizeof(e)) < 0) {
		/* nothing more a dying child can do */
	}
	_exit(127);
}

/* iso_init - pid 1 of the program's namespaces: mount its view, start it (pid 2), reap
 * whatever is orphaned to us, and end when the program ends, which ends everything else in
 * the namespace. Its wait status goes to the agent through statusw. A raw clone of a
 * threaded process: async-signal-safe calls only, no libc fork. */
static void __attribute__((noreturn)) iso_init(const char *path, const struct runproc_opts *o,
					      int devnull, int outw, int errw, int report, int statusw)
{
	if (setsid() < 0)
		iso_report(report, errno);
	/* no parent check possible from here (the agent's pid is not in this namespace): the
	 * pipeline thread waits for us, so it cannot have gone before this line */
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	int keep[] = { devnull, outw, errw, report, statusw };
	iso_close_except(keep, sizeof(keep) / sizeof(keep[0]));
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
		child_exec(path, o, 1, devnull, outw, errw, ip[1], true);
	}
	close(ip[1]);
	close(outw);
	close(errw);
	close(devnull);
	int child_errno = 0;
	ssize_t got;
	do
		got = read(ip[0], &child_errno, sizeof(child_errno));
	while (got < 0 && errno == EINTR);
	close(ip[0]);
	if (got == (ssize_t)sizeof(child_errno))
		iso_report(report, child_errno ? child_errno : EIO);
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

/* drain - read what is available on one pipe; closes it at EOF */
static int drain(int *fd, struct cap_buf *c, struct line_buf *l, char *buf, size_t buflen)
{
	for (int i = 0; i < 16; i++) {
		ssize_t n = read(*fd, buf, buflen);
		if (n > 0) {
			if (cap_append(c, buf, (size_t)n) < 0)
				return -ENOMEM;
			line_feed(l, buf, (size_t)n);
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return 0;
		close(*fd);
		*fd = -1;
		return 0;
	}
	return 0;
}

/* runproc_run - start, supervise and reap one child; see runproc.h */
int runproc_run(const struct runproc_opts *o, struct runproc_result *r)
{
	char path[PATH_MAX];
	int outp[2] = { -1, -1 }, errp[2] = { -1, -1 }, rep[2] = { -1, -1 }, devnull = -1;
	int stp[2] = { -1, -1 }; /* isolated: the program's wait status, from its namespace's init */
	bool isolated = o->isolate && iso.on;
	struct cap_buf oc, ec;
	int rc;

	memset(r, 0, sizeof(*r));
	r->exit_code = -1;
	cap_init(&oc, o->out_cap, o->keep_tail);
	cap_init(&ec, o->err_cap, o->keep_tail);
	if (!o->argv || !o->argv[0])
		return -EINVAL;
	rc = resolve_path(o->argv[0], o->envp, path, sizeof(path));
	if (rc < 0)
		return rc;
	if (runproc_cancelled()) {
		r->cancelled = true;
		return -ECANCELED;
	}
	struct line_buf lo = { .stream = o->merge_stderr ? 2 : 1 }, le = { .stream = 2 };
	int cancel_fd = watch_set ? watch.cancel_fd : -1;

	devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (devnull < 0 || pipe2(outp, O_CLOEXEC) < 0 || pipe2(errp, O_CLOEXEC) < 0 ||
	    pipe2(rep, O_CLOEXEC) < 0 || (isolated && pipe2(stp, O_CLOEXEC | O_NONBLOCK) < 0)) {
		rc = -errno;
		goto out_fds;
	}

	struct timespec start;
	clock_gettime(CLOCK_MONOTONIC, &start);
	pid_t parent = getpid();
	pid_t pid = isolated ? (pid_t)syscall(SYS_clone, SIGCHLD | ISO_CLONE_FLAGS, 0, 0, 0, 0)
			     : fork();
	if (pid < 0) {
		rc = -errno;
		goto out_fds;
	}
	if (pid == 0 && isolated) {
		close(stp[0]);
		iso_init(path, o, devnull, outp[1], errp[1], rep[1], stp[1]);
	}
	if (pid == 0)
		child_exec(path, o, parent, devnull, outp[1], errp[1], rep[1], false);
	if (isolated) {
		close(stp[1]);
		stp[1] = -1;
	}

	close(outp[1]);
	close(errp[1]);
	close(rep[1]);
	close(devnull);
	outp[1] = errp[1] = rep[1] = devnull = -1;

	int child_errno = 0;
	ssize_t got;
	do
		got = read(rep[0], &child_errno, sizeof(child_errno));
	while (got < 0 && errno == EINTR);
	close(rep[0]);
	rep[0] = -1;
	if (got == (ssize_t)sizeof(child_errno)) {
		waitpid(pid, NULL, 0);
		rc = -(child_errno ? child_errno : EIO);
		goto out_fds;
	}

	fcntl(outp[0], F_SETFL, O_NONBLOCK);
	fcntl(errp[0], F_SETFL, O_NONBLOCK);
	int pidfd = (int)syscall(SYS_pidfd_open, pid, 0);

	char buf[65536];
	bool exited = false;
	int stage = 0; /* 0 running, 1 deadline passed (grace), 2 SIGKILL sent */
	long deadline = o->timeout_ms > 0 ? o->timeout_ms : -1;
	long kill_at = -1, drain_until = -1;
	int status = 0;
	struct rusage ru;
	memset(&ru, 0, sizeof(ru));
	rc = 0;

	while (!exited || outp[0] >= 0 || errp[0] >= 0) {
		long now = mono_since_ms(&start);
		long wait_ms = -1;
		if (!exited) {
			if (stage == 0 && deadline >= 0)
				wait_ms = deadline - now;
			else if (stage == 1)
				wait_ms = kill_at - now;
			if (pidfd < 0 && (wait_ms < 0 || wait_ms > RUNPROC_TICK_MS))
				wait_ms = RUNPROC_TICK_MS;
		} else {
			if (now >= drain_until)
				break;
			wait_ms = drain_until - now;
		}
		if (wait_ms < -1)
			wait_ms = 0;

		struct pollfd pfd[4];
		int nfd = 0, io = -1, ie = -1, ip = -1, ic = -1;
		if (outp[0] >= 0) {
			io = nfd;
			pfd[nfd++] = (struct pollfd){ .fd = outp[0], .events = POLLIN };
		}
		if (errp[0] >= 0) {
			ie = nfd;
			pfd[nfd++] = (struct pollfd){ .fd = errp[0], .events = POLLIN };
		}
		if (!exited && pidfd >= 0) {
			ip = nfd;
			pfd[nfd++] = (struct pollfd){ .fd = pidfd, .events = POLLIN };
		}
		if (!exited && !r->cancelled && cancel_fd >= 0) {
			ic = nfd;
			pfd[nfd++] = (struct pollfd){ .fd = cancel_fd, .events = POLLIN };
		}
		int pr = poll(pfd, (nfds_t)nfd, (int)wait_ms);
		if (pr < 0 && errno != EINTR) {
			rc = -errno;
			break;
		}
		if (pr > 0) {
			if (io >= 0 && pfd[io].revents && drain(&outp[0], &oc, &lo, buf, sizeof(buf)) < 0)
				rc = -ENOMEM;
			if (ie >= 0 && pfd[ie].revents && drain(&errp[0], &ec, &le, buf, sizeof(buf)) < 0)
				rc = -ENOMEM;
			if (ic >= 0 && pfd[ic].revents) {
				/* cancelled: the group (isolated: the namespace's init, and with it
				 * every process in the namespace) goes now, without grace */
				r->cancelled = true;
				kill(-pid, SIGKILL);
				kill(pid, SIGKILL);
				stage = 2;
			}
		}
		(void)ip;

		if (!exited) {
			siginfo_t si;
			memset(&si, 0, sizeof(si));
			if (waitid(P_PID, (id_t)pid, &si, WEXITED | WNOHANG | WNOWAIT) == 0 &&
			    si.si_pid == pid) {
				/* still a zombie, so the pgid cannot be reused: kill what it left */
				kill(-pid, SIGKILL);
				while (wait4(pid, &status, 0, &ru) < 0 && errno == EINTR)
					;
				r->wall_ms = mono_since_ms(&start);
				exited = true;
				drain_until = r->wall_ms + RUNPROC_DRAIN_MS;
				continue;
			}
		}
		now = mono_since_ms(&start);
		if (!exited && stage == 0 && deadline >= 0 && now >= deadline) {
			r->timed_out = true;
			if (o->term_signal > 0)
				kill(-pid, o->term_signal);
			stage = 1;
			kill_at = now + (o->grace_ms > 0 ? o->grace_ms : 0);
		}
		if (!exited && stage == 1 && now >= kill_at) {
			kill(-pid, SIGKILL);
			stage = 2;
		}
		if (rc == -ENOMEM) {
			/* cannot capture any more: stop the child rather than let it block on a pipe */
			kill(-pid, SIGKILL);
			stage = 2;
			rc = 0;
			log_warn("out of memory capturing output; killed the child");
		}
	}
	if (!exited) {
		/* poll failed: make sure nothing is left running */
		kill(-pid, SIGKILL);
		while (wait4(pid, &status, 0, &ru) < 0 && errno == EINTR)
			;
		r->wall_ms = mono_since_ms(&start);
	}
	if (pidfd >= 0)
		close(pidfd);
	if (watch_set && watch.line) {
		line_flush(&lo);
		line_flush(&le);
	}
	/* what the child left in its group (never-waited children, a fork bomb's remains) was
	 * killed above; wait until the sandbox's init has reaped it, so the next call starts in
	 * a clean sandbox and counts none of it */
	for (int i = 0; i < RUNPROC_REAP_WAIT_MS / 10 && kill(-pid, 0) == 0; i++) {
		kill(-pid, SIGKILL);
		usleep(10000);
	}

	/* isolated, the child we reaped was the namespace's init; the program's own status came
	 * through the pipe, unless the init was killed (the deadline) before it could say it */
	int prog_status;
	if (isolated && read(stp[0], &prog_status, sizeof(prog_status)) == (ssize_t)sizeof(prog_status))
		status = prog_status;
	if (WIFEXITED(status)) {
		r->exit_code = WEXITSTATUS(status);
	} else if (WIFSIGNALED(status)) {
		r->signal = WTERMSIG(status);
	}
	r->user_ms = ru.ru_utime.tv_sec * 1000L + ru.ru_utime.tv_usec / 1000;
	r->sys_ms = ru.ru_stime.tv_sec * 1000L + ru.ru_stime.tv_usec / 1000;
	r->maxrss_kb = ru.ru_maxrss;
	if (rc == 0 && (cap_finish(&oc, &r->out) < 0 || cap_finish(&ec, &r->err) < 0))
		rc = -ENOMEM;

out_fds:
	for (int i = 0; i < 2; i++) {
		if (outp[i] >= 0)
			close(outp[i]);
		if (errp[i] >= 0)
			close(errp[i]);
		if (rep[i] >= 0)
			close(rep[i]);
		if (stp[i] >= 0)
			close(stp[i]);
	}
	if (devnull >= 0)
		close(devnull);
	cap_free(&oc);
	cap_free(&ec);
	if (rc < 0)
		runproc_result_free(r);
	return rc;
}

/* runproc_result_free - release the captured output */
void runproc_result_free(struct runproc_result *r)
{
	free(r->out.data);
	free(r->err.data);
	r->out.data = r->err.data = NULL;
	r->out.len = r->err.len = 0;
}
