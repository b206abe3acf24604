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
#include <openssl/rand.h>
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

#include "master/sandbox_kube.h"
#include "master/master.h"
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
	spawn_describe_status(status, how, sizeof(how));
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

/* spawn_random_hex - nbytes random bytes from libcrypto, as 2*nbytes hex digits */
void spawn_random_hex(char *out, size_t nbytes)
{
	unsigned char b[64];
	if (nbytes > sizeof(b))
		nbytes = sizeof(b);
	if (RAND_bytes(b, (int)nbytes) != 1)
		abort(); /* no randomness: session ids would be guessable */
	for (size_t i = 0; i < nbytes; i++)
		sprintf(out + 2 * i, "%02x", b[i]);
	out[2 * nbytes] = '\0';
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
	spawn_random_hex(rnd, 8);
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

/* spawn_pipe_check - nng calls this before admitting a connection: only our child may talk */
static void spawn_pipe_check(nng_pipe p, nng_pipe_ev ev, void *arg)
{
	struct worker *w = arg;
	uint64_t pid = 0;
	(void)ev;
	if (nng_pipe_get_uint64(p, NNG_OPT_IPC_PEER_PID, &pid) != 0 ||
	    pid != (uint64_t)__atomic_load_n(&w->pid, __ATOMIC_SEQ_CST)) {
		log_warn("refusing an ipc connection from pid %d (expected worker %d)", (int)pid, (int)w->pid);
		nng_pipe_close(p);
	}
}

/* spawn_child_setup - in a forked child before exec (async-signal-safe calls only): die with
 * the master, stdin from /dev/null, stdout to /dev/null (the MCP stream is never a child's) or to
 * stderr, default signal state, no inherited descriptors. Returns only if all went well. */
void spawn_child_setup(pid_t parent, bool stdout_to_stderr)
{
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != parent)
		_exit(1);
	int devnull = open("/dev/null", O_RDWR);
	if (devnull >= 0) {
		dup2(devnull, STDIN_FILENO);
		dup2(stdout_to_stderr ? STDERR_FILENO : devnull, STDOUT_FILENO);
		if (devnull > 2)
			close(devnull);
	}
	sigset_t none;
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	signal(SIGPIPE, SIG_DFL);
	closefrom(3);
}

/* spawn_pipe_up - the worker's pipe is connected, or gone: sends may wait only while it lives */
static void spawn_pipe_up(nng_pipe p, nng_pipe_ev ev, void *arg)
{
	(void)p;
	struct worker *w = arg;
	__atomic_store_n(&w->connected, ev == NNG_PIPE_EV_ADD_POST, __ATOMIC_SEQ_CST);
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
	if ((size_t)snprintf(w->ipc_path, sizeof(w->ipc_path), "%s/w%u.ipc", runtime_dir, n) >=
	    sizeof(w->ipc_path))
		return -ENAMETOOLONG;
	snprintf(url, sizeof(url), "ipc://%s", w->ipc_path);
	int r = identity_take(w);
	if (r == 0 && (r = chan_listen(&w->sock, url)) != 0)
		identity_release(w);
	if (r)
		return r;
	nng_pipe_notify(w->sock, NNG_PIPE_EV_ADD_PRE, spawn_pipe_check, w);
	nng_pipe_notify(w->sock, NNG_PIPE_EV_ADD_POST, spawn_pipe_up, w);
	nng_pipe_notify(w->sock, NNG_PIPE_EV_REM_POST, spawn_pipe_up, w);
	w->recv_fd = chan_recv_fd(w->sock);
	/* the socket file must not be reachable by anyone else even if the dir were: it is the
	 * worker's own identity's, or root's */
	chmod(w->ipc_path, 0600);
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
	pid_t parent = getpid();
	pid_t pid = fork();
	if (pid < 0) {
		r = -errno;
		nng_close(w->sock);
		identity_release(w);
		return r;
	}
	if (pid == 0) {
		/* child: only async-signal-safe calls until exec */
		spawn_child_setup(parent, false);
		/* a worker started ahead of need yields to serving while it starts; root can give
		 * the priority back when a session takes it (spawn_prestart_done), others could not */
		if (strcmp(session, "-") == 0 && geteuid() == 0)
			setpriority(PRIO_PROCESS, 0, WORKER_PRESTART_NICE);
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
		execv("/proc/self/exe", argv);
		_exit(127);
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

/* spawn_prestart_done - a session took this pre-started worker: every thread of it back to
 * the normal priority (nice is per thread on Linux; twice, for a thread born meanwhile) */
void spawn_prestart_done(const struct worker *w)
{
	if (w->pid <= 0 || geteuid() != 0)
		return;
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/task", (int)w->pid);
	for (int pass = 0; pass < 2; pass++) {
		DIR *d = opendir(path);
		if (!d)
			return;
		struct dirent *e;
		while ((e = readdir(d)) != NULL)
			if (e->d_name[0] != '.')
				setpriority(PRIO_PROCESS, (id_t)atoi(e->d_name), 0);
		closedir(d);
	}
}

/* spawn_send - send to a worker; a failure means the worker is gone. A queue full of messages
 * for a live worker is waited out (up to the send timeout); a worker whose channel is gone is
 * not, so a master that holds a lock never hangs on a dead worker. */
int spawn_send(struct worker *w, struct ipc_buf *b)
{
	if (w->pid <= 0 || !w->hello) {
		ipc_buf_free(b);
		return -ESRCH;
	}
	struct ipc_buf copy;
	msgpack_sbuffer_init(&copy.sb);
	msgpack_sbuffer_write(&copy.sb, b->sb.data, b->sb.size);
	int r = chan_send_flags(w->sock, b, NNG_FLAG_NONBLOCK);
	if (r == -EAGAIN && __atomic_load_n(&w->connected, __ATOMIC_SEQ_CST))
		r = chan_send(w->sock, &copy);
	else
		ipc_buf_free(&copy);
	return r;
}

/* spawn_describe_status - "exited with status 1" / "killed by signal 9 (SIGKILL)" */
const char *spawn_describe_status(int status, char *buf, size_t cap)
{
	if (WIFEXITED(status))
		snprintf(buf, cap, "exited with status %d", WEXITSTATUS(status));
	else if (WIFSIGNALED(status))
		snprintf(buf, cap, "killed by signal %d (SIG%s)%s", WTERMSIG(status),
			 sigabbrev_np(WTERMSIG(status)) ? sigabbrev_np(WTERMSIG(status)) : "?",
			 WCOREDUMP(status) ? ", core dumped" : "");
	else
		snprintf(buf, cap, "status 0x%x", status);
	return buf;
}

/* spawn_stop - ask a worker to leave, wait up to grace_ms, then kill it; reaps it */
void spawn_stop(struct worker *w, int grace_ms)
{
	if (w->pid > 0) {
		struct ipc_buf b;
		/* never wait here: the worker may have been told already and be gone */
		if (w->hello && ipc_pack_req_shutdown(&b, 0, "the server is shutting down") == 0)
			chan_send_flags(w->sock, &b, NNG_FLAG_NONBLOCK);
		int status;
		pid_t got = 0;
		for (int waited = 0; waited < grace_ms; waited += 10) {
			got = waitpid(w->pid, &status, WNOHANG);
			if (got != 0)
				break;
			usleep(10000);
		}
		if (got == 0) {
			kill(w->pid, SIGKILL);
			waitpid(w->pid, &status, 0);
		}
		w->pid = 0;
	}
	sandbox_local_release(w);
	spawn_forget(w);
	spawn_close_channel(w);
}

/* spawn_forget - a dead worker's last words: a release still queued (sent as the worker left)
 * gives its claim back on purpose; what it still held is let go (its identity: a release of its
 * sandbox under way keeps its own reference; its claim and relay: master/sandbox_kube.c) */
void spawn_forget(struct worker *w)
{
	identity_release(w);
	struct ipc_msg m;
	while (w->kube && w->recv_fd >= 0 && chan_recv(w->sock, &m, NNG_FLAG_NONBLOCK, NULL) == 0) {
		if (m.type == IPC_REQ_SANDBOX && !w->ended && m.u.sandbox_req.op.len == 7 &&
		    memcmp(m.u.sandbox_req.op.ptr, "release", 7) == 0)
			sandbox_kube_released(w);
		ipc_msg_free(&m);
	}
	sandbox_kube_worker_gone(w);
}

/* spawn_close_channel - close the worker's socket (nng waits for its threads: up to 50 ms on a
 * loaded host) and remove its path; w must not be reused before this returns, since nng's pipe
 * callbacks point at it */
void spawn_close_channel(struct worker *w)
{
	nng_close(w->sock);
	w->recv_fd = -1;
	unlink(w->ipc_path);
}
