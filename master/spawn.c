/*
 * spawn.c - birth and death of workers (Postfix's master_spawn.c).
 *
 * A worker is started by fork+exec of /proc/self/exe: the master has nng threads by then, and
 * exec gives the worker a clean address space with nothing of other sessions in it. Its channel
 * is an nng pair1 socket on an ipc:// path inside the master's 0700 runtime directory, and only
 * the pid the master forked may connect to it.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "lib/proc.h"
#include "master/master.h"
#include "master/sandbox.h"
#include "master/monitor.h"
#include "policy/limits.h"

/* spawn_ended - see master.h (Postfix's master_spawn.c: a child that dies before serving
 * anything is a start-up failure, and nginx's "do not respawn" exit) */
bool spawn_ended(struct spawn_throttle *t, const struct worker *w, int status, bool served,
		 bool on_purpose)
{
	if (on_purpose)
		return false;
	char how[96];
	proc_status_text(status, how, sizeof(how));
	if (WIFEXITED(status) && WEXITSTATUS(status) == IPC_EXIT_CONFIG) {
		if (!t->stopped[0]) {
			snprintf(t->stopped, sizeof(t->stopped),
				 "worker pid %d exited with status %d: a configuration error (its log line "
				 "above says what); no more workers will be started until serve is "
				 "restarted with a configuration that works", (int)w->pid, IPC_EXIT_CONFIG);
			log_error("%s", t->stopped);
		}
		return true;
	}
	if (served)
		return false;
	double now = mono_s();
	spawn_start_failed(t);
	t->failures++;
	if (now >= t->logged_until) {
		log_warn("worker pid %d %s before serving any request: a start-up failure (%u since the "
			 "last report); the next worker starts in %.1f s", (int)w->pid, how, t->failures,
			 t->backoff_s);
		t->failures = 0;
		t->logged_until = now + t->backoff_s;
	}
	return true;
}

/* spawn_start_failed - see master.h */
void spawn_start_failed(struct spawn_throttle *t)
{
	t->backoff_s = t->backoff_s ? t->backoff_s * 2 : WORKER_START_BACKOFF_FIRST_MS / 1000.0;
	if (t->backoff_s > WORKER_START_BACKOFF_MAX_MS / 1000.0)
		t->backoff_s = WORKER_START_BACKOFF_MAX_MS / 1000.0;
	t->until = mono_s() + t->backoff_s;
}

/* spawn_served - see master.h */
void spawn_served(struct spawn_throttle *t)
{
	t->backoff_s = 0;
	t->until = 0;
}

/* spawn_may_start - see master.h */
bool spawn_may_start(const struct spawn_throttle *t)
{
	return !t->stopped[0] && mono_s() >= t->until;
}

/* spawn_hello_overdue - see master.h */
bool spawn_hello_overdue(const struct worker *w, double now)
{
	return w->pid > 0 && !w->hello && !w->ended &&
	       now - w->started > WORKER_HELLO_TIMEOUT_MS / 1000.0;
}

/* spawn_runtime_dir - create the master's private directory for sockets: 0700, or 0711 when
 * workers run as identities of their own (they must pass through to their own socket, which
 * is theirs alone; the directory cannot be listed) */
int spawn_runtime_dir(char *out, size_t cap)
{
	const char *xdg = getenv("XDG_RUNTIME_DIR");
	bool pass = identity_on();
	mode_t mode = pass ? 0711 : 0700;
	char base[PATH_MAX];
	struct stat st;
	if (pass) {
		if (!identity_base())
			return -EPERM; /* identity_init said why */
		snprintf(base, sizeof(base), "%s", identity_base());
	} else if (xdg && *xdg && stat(xdg, &st) == 0 && S_ISDIR(st.st_mode) && access(xdg, W_OK) == 0)
		snprintf(base, sizeof(base), "%s", xdg);
	else {
		snprintf(base, sizeof(base), "/tmp/kode-gopher-%u", (unsigned)getuid());
		if (mkdir(base, 0700) != 0 && errno != EEXIST)
			return -errno;
		/* someone else's directory at our name would let them see our sockets */
		if (lstat(base, &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != getuid() ||
		    (st.st_mode & 077) != 0) {
			log_error("%s is not a private directory of this user; remove it", base);
			return -EPERM;
		}
	}
	char rnd[17];
	random_hex(rnd, 8);
	if ((size_t)snprintf(out, cap, "%s/kode-gopher.%d.%s", base, (int)getpid(), rnd) >= cap)
		return -ENAMETOOLONG;
	if (mkdir(out, 0700) != 0 || chmod(out, mode) != 0)
		return -errno;
	return 0;
}

/* spawn_runtime_dir_remove - remove the sockets and the directory */
void spawn_runtime_dir_remove(const char *dir)
{
	DIR *d = opendir(dir);
	if (d) {
		struct dirent *e;
		while ((e = readdir(d)) != NULL)
			if (e->d_name[0] != '.')
				unlinkat(dirfd(d), e->d_name, 0);
		closedir(d);
	}
	rmdir(dir);
}

/* spawn_worker - listen on a fresh ipc path, then fork+exec `kode-gopher worker` */
int spawn_worker(struct worker *w, const struct serve_config *cfg, const char *runtime_dir,
		 unsigned n, const char *session)
{
	char url[300], level[16];
	memset(w, 0, sizeof(*w));
	w->cfg = cfg;
	w->recv_fd = -1;
	snprintf(w->session, sizeof(w->session), "%s", session);
	w->prestart = strcmp(session, "-") == 0;
	if ((size_t)snprintf(w->ipc_path, sizeof(w->ipc_path), "%s/w%u.ipc", runtime_dir, n) >=
	    sizeof(w->ipc_path))
		return -ENAMETOOLONG;
	snprintf(url, sizeof(url), "ipc://%s", w->ipc_path);
	int r = identity_take(w);
	if (r == 0 && (r = channel_listen(w)) != 0)
		identity_release(w);
	if (r)
		return r;
	char uid[16] = "";
	if (w->uid && chown(w->ipc_path, w->uid, w->uid) != 0) {
		r = -errno;
		log_error("cannot give worker identity %u its channel %s: %s", (unsigned)w->uid,
			  w->ipc_path, strerror(errno));
		nng_close(w->sock);
		identity_release(w);
		return r;
	}
	snprintf(uid, sizeof(uid), "%u", (unsigned)w->uid);

	static const char *const names[] = { "debug", "info", "warn", "error", "off" };
	snprintf(level, sizeof(level), "%s", names[cfg->log_level]);
	char tmo[16], maxtmo[16];
	snprintf(tmo, sizeof(tmo), "%d", cfg->default_timeout_s);
	snprintf(maxtmo, sizeof(maxtmo), "%d", cfg->max_timeout_s);
	char ready[16];
	snprintf(ready, sizeof(ready), "%d", cfg->claim_ready_timeout_s);
	pid_t pid;
	{
		char *argv[64] = { "kode-gopher", "worker", "--ipc", url, "--session", (char *)session,
				   "--log-level", level, "--seccomp", (char *)cfg->seccomp,
				   "--timeout", tmo, "--max-timeout", maxtmo, NULL };
		/* the credential settings (docs/credentials.md), those that are set */
		const char *const cred[][2] = {
			{ "--credentials", cfg->credentials }, { "--token-endpoint", cfg->token_endpoint },
			{ "--iam-endpoint", cfg->iam_endpoint }, { "--metadata-host", cfg->metadata_host },
			{ "--project", cfg->project }, { "--scopes", cfg->scopes } };
		int argc = 14;
		for (size_t i = 0; i < sizeof(cred) / sizeof(cred[0]); i++)
			if (cred[i][1]) {
				argv[argc++] = (char *)cred[i][0];
				argv[argc++] = (char *)cred[i][1];
			}
		/* the Kubernetes backend: the master claims and renews; the worker needs to know
		 * how long a claim may take, and whether to release its agent for a later --claim */
		const char *const kube[][2] = {
			{ "--backend", "kubernetes" }, { "--claim-ready-timeout", ready } };
		for (size_t i = 0; cfg->kubernetes && i < sizeof(kube) / sizeof(kube[0]); i++)
			if (kube[i][1]) {
				argv[argc++] = (char *)kube[i][0];
				argv[argc++] = (char *)kube[i][1];
			}
		if (cfg->kubernetes && cfg->persistent)
			argv[argc++] = "--persistent";
		/* its own identity, which it takes before anything else (policy/privdrop.c) */
		if (uid[0] && strcmp(uid, "0") != 0) {
			argv[argc++] = "--uid";
			argv[argc++] = uid;
		}
		argv[argc] = NULL;
		/* a worker started ahead of need yields to serving while it starts; root can give
		 * the priority back when a session takes it (spawn_prestart_done), others could not */
		struct proc_how how = { .nice = w->prestart && geteuid() == 0 ? WORKER_PRESTART_NICE : 0 };
		__atomic_store_n(&w->spawning, 1, __ATOMIC_SEQ_CST);
		pid = proc_spawn("/proc/self/exe", argv, &how);
		if (pid > 0)
			__atomic_store_n(&w->pid, pid, __ATOMIC_SEQ_CST);
		__atomic_store_n(&w->spawning, 0, __ATOMIC_SEQ_CST);
	}
	if (pid < 0) {
		nng_close(w->sock);
		identity_release(w);
		return (int)pid;
	}
	__atomic_store_n(&w->pid, pid, __ATOMIC_SEQ_CST);
	w->started = mono_s();
	if (w->uid)
		log_info("started worker pid %d for session %.8s… as uid %u", (int)pid, session,
			 (unsigned)w->uid);
	else
		log_info("started worker pid %d for session %.8s…", (int)pid, session);
	return 0;
}

/* spawn_prestart_done - a session took this pre-started worker: its sandbox's CPU weight up to
 * a session's now; every thread of it back to the normal priority is spawn_renice's, without the
 * transport's lock: the returned descriptor (its /proc task directory, or -1) is for that */
int spawn_prestart_done(struct worker *w)
{
	if (!w->prestart)
		return -1;
	w->prestart = false;
	const struct sandbox_backend *b = sandbox_backend(w->cfg);
	if (b->taken)
		b->taken(w);
	if (w->pid <= 0 || geteuid() != 0)
		return -1;
	/* opened while the worker cannot have been reaped (the lock is held), so the directory is
	 * that process's even if its pid is reused before spawn_renice reads it */
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/task", (int)w->pid);
	return open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
}

/* spawn_renice - see master.h: nice is per thread on Linux; twice, for a thread born meanwhile */
void spawn_renice(int tasks)
{
	DIR *d = tasks >= 0 ? fdopendir(tasks) : NULL;
	if (!d) {
		if (tasks >= 0)
			close(tasks);
		return;
	}
	for (int pass = 0; pass < 2; pass++) {
		struct dirent *e;
		while ((e = readdir(d)) != NULL)
			if (e->d_name[0] != '.')
				setpriority(PRIO_PROCESS, (id_t)atoi(e->d_name), 0);
		rewinddir(d);
	}
	closedir(d);
}

/* spawn_stop - see master.h */
void spawn_stop(struct worker *w, int grace_ms, bool wait)
{
	if (w->pid > 0) {
		struct ipc_buf b;
		/* never wait here: the worker may have been told already and be gone */
		if (w->hello && ipc_pack_req_shutdown(&b, 0, "the server is shutting down") == 0)
			chan_send_flags(w->sock, &b, NNG_FLAG_NONBLOCK);
		int status;
		/* on its pidfd: a worker that leaves at once is seen at once, not at the next 10 ms */
		if (proc_wait_exit(w->pid, grace_ms, &status) == 0) {
			kill(w->pid, SIGKILL);
			waitpid(w->pid, &status, 0);
		}
		w->pid = 0;
	}
	spawn_forget(w, wait);
	channel_close(w);
}

/* spawn_forget - see master.h. A dead worker's last words: a release still queued (sent as
 * the worker left) gives its sandbox back on purpose; then the backend lets go of the rest,
 * and only after that its identity (a release of its sandbox under way takes a reference of
 * its own, master/identity.c) */
void spawn_forget(struct worker *w, bool wait)
{
	const struct sandbox_backend *b = sandbox_backend(w->cfg);
	struct ipc_msg m;
	while (b->released && w->recv_fd >= 0 && chan_recv(w->sock, &m, NNG_FLAG_NONBLOCK, NULL) == 0) {
		if (m.type == IPC_REQ_SANDBOX && !w->ended && m.u.sandbox_req.op.len == 7 &&
		    memcmp(m.u.sandbox_req.op.ptr, "release", 7) == 0)
			b->released(w);
		ipc_msg_free(&m);
	}
	b->release(w, wait);
	identity_release(w);
}
