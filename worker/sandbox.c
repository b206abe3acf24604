/*
 * sandbox.c - the worker's side of its sandbox: ask the master for one, wait, claim it.
 *
 * The worker cannot start processes (seccomp), so the sandbox is started by the master on
 * REQ_SANDBOX. The first request goes out at start-up, so the sandbox warms up while the client
 * initializes; the first tool call then only waits for the agent to answer and performs the
 * one-time claim handshake that sets the bearer secret. Used by worker/call.c.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "worker/agent_client.h"
#include "worker/sandbox_kube.h"
#include "worker/worker.h"

static struct agent_endpoint sandbox_ep;
static char sandbox_path[600];
static bool sandbox_claimed;
/* The agent's socket, pinned once it answers (before any user code has run in the sandbox):
 * every later connection goes to that inode through /proc/self/fd, so nothing that renames
 * or replaces the path later (a symlink to a host socket) can redirect the session. */
static int sandbox_sock_fd = -1;
static char sandbox_pinned[64];

/* sandbox_pin - hold the socket at sandbox_path and connect through the descriptor from now */
static int sandbox_pin(char *err, size_t errlen)
{
	int fd = open(sandbox_path, O_PATH | O_NOFOLLOW | O_CLOEXEC);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) {
		snprintf(err, errlen, "the sandbox's socket %s is not a socket (%s)", sandbox_path,
			 fd < 0 ? strerror(errno) : "something else is there");
		if (fd >= 0)
			close(fd);
		return -EPROTO;
	}
	if (sandbox_sock_fd >= 0)
		close(sandbox_sock_fd);
	sandbox_sock_fd = fd;
	snprintf(sandbox_pinned, sizeof(sandbox_pinned), "/proc/self/fd/%d", fd);
	sandbox_ep.unix_path = sandbox_pinned;
	return 0;
}

/* sandbox_request - send REQ_SANDBOX (mm_sandbox); the answer is taken by sandbox_wait_answer */
void sandbox_request(struct session *s, const char *op)
{
	pthread_mutex_lock(&s->mu);
	s->sandbox_gone[0] = '\0';
	pthread_mutex_unlock(&s->mu);
	mm_sandbox(s, op);
}

/* sandbox_answer - main thread, before the answer goes to its waiter: its name, so that a
 * NOTE_SANDBOX about it counts even before the call thread has taken the answer */
void sandbox_answer(struct session *s, const struct ipc_msg *m)
{
	pthread_mutex_lock(&s->mu);
	ipc_bytes_str(m->u.sandbox_ans.name, s->sandbox_name, sizeof(s->sandbox_name));
	pthread_mutex_unlock(&s->mu);
}

/* sandbox_gone - main thread: the master reaped our sandbox's jail */
void sandbox_gone(struct session *s, const struct ipc_msg *m)
{
	char name[40], how[96];
	ipc_bytes_str(m->u.sandbox_note.name, name, sizeof(name));
	ipc_bytes_str(m->u.sandbox_note.status, how, sizeof(how));
	pthread_mutex_lock(&s->mu);
	if (strcmp(name, s->sandbox_name) == 0)
		snprintf(s->sandbox_gone, sizeof(s->sandbox_gone), "sandbox %s %s", name, how);
	pthread_cond_broadcast(&s->cv);
	pthread_mutex_unlock(&s->mu);
	log_warn("sandbox %s %s", name, how);
}

/* sandbox_wait_answer - call thread: take the outstanding REQ_SANDBOX's answer */
static int sandbox_wait_answer(struct session *s, char *err, size_t errlen)
{
	struct ipc_msg a;
	int r = mm_wait(s, MM_SANDBOX, MM_SANDBOX_WAIT_MS, &a);
	if (r == -ECANCELED) {
		snprintf(err, errlen, "no sandbox could be started: the session is ending");
		return -EIO;
	}
	if (r != 0) {
		snprintf(err, errlen, "no sandbox could be started: the server did not answer in %d s",
			 MM_SANDBOX_WAIT_MS / 1000);
		return -ETIMEDOUT;
	}
	const struct ipc_sandbox_ans *ans = &a.u.sandbox_ans;
	char why[256];
	pthread_mutex_lock(&s->mu);
	s->sandbox_ok = ans->ok;
	ipc_bytes_str(ans->socket, s->sandbox_socket, sizeof(s->sandbox_socket));
	ipc_bytes_str(ans->name, s->sandbox_name, sizeof(s->sandbox_name));
	snprintf(sandbox_path, sizeof(sandbox_path), "%s", s->sandbox_socket);
	pthread_mutex_unlock(&s->mu);
	ipc_bytes_str(ans->error, why, sizeof(why));
	bool ok = ans->ok;
	ipc_msg_free(&a);
	log_debug("sandbox %s: %s", s->sandbox_name, ok ? "started" : why);
	if (!ok) {
		snprintf(err, errlen, "no sandbox could be started: %s", why);
		return -EIO;
	}
	return 0;
}

/* sandbox_claim - wait until the agent answers, then claim it */
static int sandbox_claim(struct session *s, char *err, size_t errlen)
{
	memset(&sandbox_ep, 0, sizeof(sandbox_ep));
	sandbox_ep.unix_path = sandbox_path;
	sandbox_ep.base_url = "http://localhost";
	int r = -ETIMEDOUT;
	char gone[200] = "";
	for (int tries = 0; tries < 2000 && !gone[0]; tries++) { /* 20 s for the agent to come up */
		r = agent_client_health(&sandbox_ep, 500, err, errlen);
		if (r == 0)
			break;
		usleep(10000);
		pthread_mutex_lock(&s->mu);
		snprintf(gone, sizeof(gone), "%s", s->sandbox_gone);
		pthread_mutex_unlock(&s->mu);
	}
	if (r != 0) {
		if (gone[0])
			snprintf(err, errlen, "the sandbox did not start (%s); the server's log says why", gone);
		else
			snprintf(err, errlen, "the sandbox did not start: its agent never answered");
		return r;
	}
	if ((r = sandbox_pin(err, errlen)) != 0 || (r = agent_client_claim(&sandbox_ep, err, errlen)) != 0)
		return r;
	sandbox_claimed = true;
	return 0;
}

/* sandbox_get - the session's sandbox, claimed, ready for calls */
int sandbox_get(struct session *s, struct agent_endpoint **ep, char *err, size_t errlen)
{
	if (kube_settings.on) {
		static bool quota_granted;
		if (!quota_granted) {
			int q = mm_quota(s, err, errlen);
			if (q != 0)
				return q;
			quota_granted = true;
		}
		return sandbox_kube_get(s, ep, err, errlen);
	}
	if (sandbox_claimed) {
		*ep = &sandbox_ep;
		return 0;
	}
	/* the per-user limit is the master's to keep: ask before claiming */
	int q = mm_quota(s, err, errlen);
	if (q != 0)
		return q;
	/* the warm request from start-up may still be on its way, or answered and not yet taken */
	if (!mm_outstanding(s, MM_SANDBOX))
		sandbox_request(s, "spawn");
	int r = sandbox_wait_answer(s, err, errlen);
	if (r == 0)
		r = sandbox_claim(s, err, errlen);
	if (r == 0) {
		*ep = &sandbox_ep;
		log_info("session %.8s… claimed sandbox %s", s->id, s->sandbox_name);
	}
	/* on failure the answer was taken: the next call asks again */
	return r;
}

/* sandbox_replace - the old sandbox is gone: a fresh one, claimed */
int sandbox_replace(struct session *s, struct agent_endpoint **ep, char *err, size_t errlen)
{
	if (kube_settings.on)
		return sandbox_kube_replace(s, ep, err, errlen);
	sandbox_claimed = false;
	sandbox_request(s, "spawn");
	return sandbox_get(s, ep, err, errlen);
}

bool sandbox_have(void)
{
	return kube_settings.on ? sandbox_kube_have() : sandbox_claimed;
}

const char *sandbox_name(struct session *s)
{
	return kube_settings.on ? sandbox_kube_name() : s->sandbox_name;
}

bool sandbox_lost(int rc)
{
	return kube_settings.on ? sandbox_kube_lost(rc) : agent_client_gone(rc);
}

void sandbox_end(struct session *s)
{
	/* the master releases a local sandbox when the worker is gone */
	if (kube_settings.on)
		sandbox_kube_release(s);
}
