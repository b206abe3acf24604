/*
 * runproc.c - spawn a child with a deadline, process-group kill and capped output capture.
 *
 * Called by the agent for every process it starts (the Go toolchain and the user's binary,
 * through agent/runproc.c's namespace launcher) and by master/kubecfg.c for a credential
 * plugin. The child gets its own session so that one kill(-pgid) reaches everything it forked;
 * with .contain it runs below a reaper of ours (a subreaper, so orphans come to it) which kills
 * whatever the child left, inside the group or not. Output is read with poll into a head buffer
 * and a tail ring so memory stays bounded however much the child writes, and the pipes are
 * always drained so the child never blocks on a full pipe.
 */
#include "lib/runproc.h"

#include <errno.h>
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "policy/limits.h" /* RUNPROC_*: macros only, lib/ calls nothing above it */

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

/* runproc_child_exec - see runproc.h; runs in the forked child: async-signal-safe calls only */
void runproc_child_exec(const struct runproc_child *c, bool own_session, int (*prep)(void))
{
	static const char *const empty_env[] = { NULL };
	const struct runproc_opts *o = c->o;
	int e;

	if (own_session && setsid() < 0)
		goto fail;
	/* PDEATHSIG fires when the forking thread ends: that thread waits for us, so the child
	 * dies exactly when its runner (or that thread) dies. */
	if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0)
		goto fail;
	if (getppid() != c->parent)
		_exit(127);
	if (dup2(c->in, 0) < 0 || dup2(c->out, 1) < 0 || dup2(o->merge_stderr ? c->out : c->err, 2) < 0)
		goto fail;
	if (o->cwd && chdir(o->cwd) < 0)
		goto fail;
	/* the runner may ignore or block signals (SIGPIPE, SIGCHLD...): the program must not
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
	/* no descriptor of the runner (listening socket, other calls' files) may leak into the
	 * program */
	if (syscall(SYS_close_range, 3U, ~0U, CLOSE_RANGE_CLOEXEC) < 0) {
		struct rlimit rl;
		long max = 65536;
		if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
		    (long)rl.rlim_cur < max)
			max = (long)rl.rlim_cur;
		for (int fd = 3; fd < max; fd++)
			if (fd != c->report)
				fcntl(fd, F_SETFD, FD_CLOEXEC);
	}
	if (prep && (e = prep()) != 0) {
		errno = e;
		goto fail;
	}
	/* the filter was compiled before the fork: installing it is two plain syscalls */
	if (o->seccomp && (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 ||
			   prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, o->seccomp) < 0))
		goto fail;
	execve(c->path, (char *const *)o->argv, (char *const *)(o->envp ? o->envp : empty_env));
fail:
	e = errno;
	if (write(c->report, &e, sizeof(e)) < 0) {
		/* nothing more a dying child can do */
	}
	_exit(127);
}

/* runproc_close_except - see runproc.h; async-signal-safe (keep is sorted in place) */
void runproc_close_except(int *keep, size_t n)
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

/* ---- contain: the reaper above the program ---- */

/* reaper_kill_children - SIGKILL every process whose parent is me, read from /proc (the
 * kernel's per-task children lists are not always built in); the number found, or -1 when
 * /proc cannot be read. Async-signal-safe: raw getdents64, no allocation. */
static int reaper_kill_children(pid_t me)
{
	int dfd = open("/proc", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		return -1;
	int found = 0;
	char ents[4096];
	for (;;) {
		long n = syscall(SYS_getdents64, dfd, ents, sizeof(ents));
		if (n <= 0)
			break;
		for (long off = 0; off < n;) {
			struct dirent64 *d = (struct dirent64 *)(ents + off);
			off += d->d_reclen;
			long pid = 0;
			const char *p = d->d_name;
			for (; *p >= '0' && *p <= '9' && pid < INT_MAX / 10; p++)
				pid = pid * 10 + (*p - '0');
			if (*p || pid <= 0)
				continue;
			char stat[512];
			int fd = openat(dfd, d->d_name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
			if (fd < 0)
				continue;
			int sfd = openat(fd, "stat", O_RDONLY | O_CLOEXEC);
			close(fd);
			fd = sfd;
			if (fd < 0)
				continue;
			ssize_t k = read(fd, stat, sizeof(stat) - 1);
			close(fd);
			if (k <= 0)
				continue;
			stat[k] = '\0';
			/* "pid (comm) S ppid ...": comm may hold ')' and spaces; the last ')' ends it */
			char *close_paren = NULL;
			for (char *q = stat; *q; q++)
				if (*q == ')')
					close_paren = q;
			if (!close_paren || strlen(close_paren) < 5)
				continue;
			long ppid = 0;
			for (const char *q = close_paren + 4; *q >= '0' && *q <= '9' && ppid < INT_MAX / 10; q++)
				ppid = ppid * 10 + (*q - '0');
			if (ppid == me) {
				kill((pid_t)pid, SIGKILL);
				found++;
			}
		}
	}
	close(dfd);
	return found;
}

/* reaper_sweep - kill and reap every descendant: as a subreaper we inherit each orphan, so we
 * repeat until no child of ours is left */
static void reaper_sweep(void)
{
	pid_t me = getpid();
	for (;;) {
		int st;
		pid_t w = waitpid(-1, &st, WNOHANG | __WALL);
		if (w > 0)
			continue;
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			return; /* ECHILD: nothing is left */
		if (reaper_kill_children(me) <= 0)
			return; /* no /proc: what is left escapes, as without contain */
		while ((w = waitpid(-1, &st, __WALL)) < 0 && errno == EINTR)
			;
		if (w < 0)
			return;
	}
}

/* runproc_report_errno - see runproc.h */
int runproc_report_errno(int fd)
{
	int e = 0;
	ssize_t got;
	while ((got = read(fd, &e, sizeof(e))) < 0 && errno == EINTR)
		;
	return got == (ssize_t)sizeof(e) ? (e ? e : EIO) : 0;
}

/* reaper_fail - report why the program did not start, clean up, end */
static void __attribute__((noreturn)) reaper_fail(int report, int e)
{
	if (write(report, &e, sizeof(e)) < 0) {
		/* nothing more a dying child can do */
	}
	reaper_sweep();
	_exit(127);
}

/* reaper - the forked process runproc_run waits for under .contain: the program is its child,
 * in a session of its own; signals for it come on ctl as ints (EOF: kill it), its wait status
 * goes out on statusw, and when it ends everything it left is killed before we exit. A fork of
 * a possibly threaded process: async-signal-safe calls only, a raw clone for the program. */
static void __attribute__((noreturn)) reaper(const struct runproc_child *c, int ctl, int statusw)
{
	if (setsid() < 0)
		reaper_fail(c->report, errno);
	if (getppid() != c->parent)
		_exit(127);
	if (prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) < 0)
		reaper_fail(c->report, errno);
	/* the runner's signals go to the program (through ctl); ours are all held */
	sigset_t all;
	sigfillset(&all);
	sigprocmask(SIG_SETMASK, &all, NULL);
	int keep[] = { c->in, c->out, c->err, c->report, ctl, statusw };
	runproc_close_except(keep, sizeof(keep) / sizeof(keep[0]));
	int ip[2];
	if (pipe2(ip, O_CLOEXEC) != 0)
		reaper_fail(c->report, errno);
	pid_t me = getpid();
	pid_t prog = (pid_t)syscall(SYS_clone, SIGCHLD, 0, 0, 0, 0);
	if (prog < 0)
		reaper_fail(c->report, errno);
	if (prog == 0) {
		struct runproc_child pc = *c;
		pc.parent = me;
		pc.report = ip[1];
		close(ip[0]);
		close(ctl);
		close(statusw);
		close(c->report);
		runproc_child_exec(&pc, true, NULL);
	}
	close(ip[1]);
	close(c->in);
	close(c->out);
	close(c->err);
	int e = runproc_report_errno(ip[0]);
	close(ip[0]);
	if (e)
		reaper_fail(c->report, e);
	close(c->report); /* started: the runner stops waiting for an exec error */

	int pidfd = (int)syscall(SYS_pidfd_open, prog, 0);
	bool ctl_open = true;
	for (;;) {
		siginfo_t si;
		memset(&si, 0, sizeof(si));
		if (waitid(P_PID, (id_t)prog, &si, WEXITED | WNOHANG | WNOWAIT) == 0 && si.si_pid == prog)
			break;
		struct pollfd p[2] = { { .fd = ctl_open ? ctl : -1, .events = POLLIN },
				       { .fd = pidfd, .events = POLLIN } };
		if (poll(p, 2, pidfd >= 0 ? -1 : RUNPROC_TICK_MS) < 0 && errno != EINTR)
			break;
		if (!ctl_open || !p[0].revents)
			continue;
		int sig = 0;
		ssize_t k = read(ctl, &sig, sizeof(sig));
		if (k < 0 && errno == EINTR)
			continue;
		if (k == (ssize_t)sizeof(sig) && sig > 0 && sig != SIGKILL) {
			kill(-prog, sig);
			continue;
		}
		/* EOF (the runner is done with it, or gone) or SIGKILL: kill it, without grace */
		kill(-prog, SIGKILL);
		kill(prog, SIGKILL);
		ctl_open = false;
	}
	/* still a zombie, so its group id is not reused: what is left in it goes first */
	kill(-prog, SIGKILL);
	int st = 0;
	while (waitpid(prog, &st, 0) < 0 && errno == EINTR)
		;
	if (write(statusw, &st, sizeof(st)) < 0) {
		/* the runner then reports how we ended instead */
	}
	reaper_sweep();
	_exit(0);
}

/* reaper_start - fork the reaper; its pid, the read end of its status pipe and the write end
 * of its signal pipe, or a negative errno */
static pid_t reaper_start(const struct runproc_child *c, int *status_fd, int *ctl_fd)
{
	int st[2], ctl[2];
	if (pipe2(st, O_CLOEXEC | O_NONBLOCK) != 0)
		return -errno;
	if (pipe2(ctl, O_CLOEXEC) != 0) {
		int e = -errno;
		close(st[0]);
		close(st[1]);
		return e;
	}
	pid_t pid = fork();
	if (pid == 0) {
		close(st[0]);
		close(ctl[1]);
		reaper(c, ctl[0], st[1]);
	}
	int e = pid < 0 ? -errno : 0;
	close(st[1]);
	close(ctl[0]);
	if (pid < 0) {
		close(st[0]);
		close(ctl[1]);
		return e;
	}
	*status_fd = st[0];
	*ctl_fd = ctl[1];
	return pid;
}

/* group_kill - signal the child's process group: with .contain through the reaper, which
 * forwards it to the program's group (SIGKILL: closes the pipe, and it kills everything) */
static void group_kill(pid_t pid, int *ctl, int sig)
{
	if (*ctl < 0) {
		kill(-pid, sig);
		if (sig == SIGKILL)
			kill(pid, SIGKILL);
		return;
	}
	if (sig != SIGKILL && write(*ctl, &sig, sizeof(sig)) == (ssize_t)sizeof(sig))
		return;
	close(*ctl);
	*ctl = -1;
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
	int status_fd = -1; /* a launcher's or the reaper's: the program's own wait status */
	int ctl = -1;       /* contain: the reaper's signal pipe */
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
	    pipe2(rep, O_CLOEXEC) < 0) {
		rc = -errno;
		goto out_fds;
	}

	struct timespec start;
	clock_gettime(CLOCK_MONOTONIC, &start);
	struct runproc_child child = { .path = path, .o = o, .parent = getpid(), .in = devnull,
				       .out = outp[1], .err = errp[1], .report = rep[1] };
	pid_t pid;
	if (o->launcher) {
		pid = o->launcher->start(&child, &status_fd);
	} else if (o->contain) {
		pid = reaper_start(&child, &status_fd, &ctl);
	} else {
		pid = fork();
		if (pid == 0)
			runproc_child_exec(&child, true, NULL);
		if (pid < 0)
			pid = -errno;
	}
	if (pid < 0) {
		rc = pid;
		goto out_fds;
	}

	close(outp[1]);
	close(errp[1]);
	close(rep[1]);
	close(devnull);
	outp[1] = errp[1] = rep[1] = devnull = -1;

	int child_errno = runproc_report_errno(rep[0]);
	close(rep[0]);
	rep[0] = -1;
	if (child_errno) {
		waitpid(pid, NULL, 0);
		rc = -child_errno;
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
				group_kill(pid, &ctl, SIGKILL);
				stage = 2;
			}
		}
		(void)ip;
		if (o->kill_at_cap && !r->over_cap && stage < 2 &&
		    (oc.total > oc.head_cap + oc.tail_cap || ec.total > ec.head_cap + ec.tail_cap)) {
			/* a child flooding its output is stopped at the cap, not read to its end */
			r->over_cap = true;
			group_kill(pid, &ctl, SIGKILL);
			stage = 2;
		}

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
				group_kill(pid, &ctl, o->term_signal);
			stage = 1;
			kill_at = now + (o->grace_ms > 0 ? o->grace_ms : 0);
		}
		if (!exited && stage == 1 && now >= kill_at) {
			group_kill(pid, &ctl, SIGKILL);
			stage = 2;
		}
		if (rc == -ENOMEM) {
			/* cannot capture any more: stop the child rather than let it block on a pipe */
			group_kill(pid, &ctl, SIGKILL);
			stage = 2;
			rc = 0;
		}
	}
	if (!exited) {
		/* poll failed: make sure nothing is left running */
		group_kill(pid, &ctl, SIGKILL);
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

	/* with a launcher or the reaper, the child we reaped was an init above the program; the
	 * program's own status came through the pipe, unless the init was killed (the deadline)
	 * before it could say it */
	int prog_status;
	if (status_fd >= 0 &&
	    read(status_fd, &prog_status, sizeof(prog_status)) == (ssize_t)sizeof(prog_status))
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
	}
	if (status_fd >= 0)
		close(status_fd);
	if (ctl >= 0)
		close(ctl);
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
