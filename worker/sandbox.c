/*
 * sandbox.c - the worker's side of its sandbox: ask the master for one, wait, claim it.
 *
 * The worker cannot start processes (seccomp) and holds no credential of the server, so its
 * sandbox comes from the master on REQ_SANDBOX, on either backend: a local jail, whose agent's
 * socket the answer names, or a SandboxClaim the master made Ready, reached through the relay
 * socket the master listens on for this worker alone (master/sandbox_kube.c). Locally the first
 * request goes out at start-up, so the sandbox warms up while the client initializes; a claim
 * waits for the first tool call (it counts against the user's limit). Either way the first call
 * then waits for the agent to answer and performs the one-time claim handshake that sets the
 * bearer secret, the one secret of its sandbox the worker holds. What differs between the two
 * backends is one table each, struct sandbox_ops (worker/worker.h); the state is the session's
 * (struct sandbox in struct session). Used by worker/call.c and worker/main.c.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "lib/mono.h"
#include "worker/agent_client.h"
#include "worker/worker.h"

/* ---- the two backends: what differs between a local jail and a Kubernetes claim ---- */

static int local_answer_wait_ms(const struct session *s)
{
	(void)s;
	return MM_SANDBOX_WAIT_MS;
}

/* a claim may take --claim-ready-timeout to be Ready, and the API calls around it; twice when
 * --claim's claim is tried once more before a new one */
static int kube_answer_wait_ms(const struct session *s)
{
	return (2 * s->sb.ready_s + 120) * 1000;
}

static bool local_lost(int rc)
{
	return agent_client_gone(rc);
}

/* a pod recreated under the same claim has a fresh agent that refuses our secret */
static bool kube_lost(int rc)
{
	return agent_client_gone(rc) || rc == -EACCES;
}

/* the master releases a local sandbox when the worker is gone */
static void local_end(struct session *s)
{
	(void)s;
}

/* a claim is released on purpose, and a kept one's agent first, so that a later --claim can
 * claim it again */
static void kube_end(struct session *s)
{
	char err[512];
	if (s->sb.persistent && s->sb.claimed &&
	    agent_client_release(&s->sb.ep, err, sizeof(err)) != 0)
		log_warn("SandboxClaim %s is kept, but its agent could not be released (%s); "
			 "reattaching will need a fresh pod", s->sandbox_name, err);
	if (s->sandbox_name[0])
		mm_sandbox(s, "release");
}

static void kube_refused(struct session *s, char *err, size_t errlen)
{
	snprintf(err, errlen, "the sandbox of SandboxClaim %s is still held by an earlier session "
		 "(its agent refused a new claim). If that session is gone, delete its pod so the "
		 "claim gets a fresh one (kubectl get sandbox to find it), or start without --claim",
		 s->sandbox_name);
}

/* A local jail: asked for at start-up (it warms while the client initializes); its agent is up
 * within moments of the answer. */
const struct sandbox_ops sandbox_local_ops = {
	.name = "local", .warm = true, .relay = false,
	.health_timeout_ms = 500, .agent_wait_ms = 20000, .poll_ms = 10,
	.answer_wait_ms = local_answer_wait_ms, .lost = local_lost, .end = local_end,
};

/* A Kubernetes claim: asked for at the first call (it counts against the user's limit), reached
 * through the master's relay; a Ready pod may still be binding its port. */
const struct sandbox_ops sandbox_kube_ops = {
	.name = "kubernetes", .warm = false, .relay = true,
	.health_timeout_ms = 3000, .agent_wait_ms = 30000, .poll_ms = 100,
	.answer_wait_ms = kube_answer_wait_ms, .lost = kube_lost, .end = kube_end,
	.refused = kube_refused,
};

/* ---- the same for both ---- */

/* sandbox_pin - hold the socket at sandbox_path and connect through the descriptor from now */
static int sandbox_pin(struct sandbox *sb, char *err, size_t errlen)
{
	int fd = open(sb->path, O_PATH | O_NOFOLLOW | O_CLOEXEC);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) {
		snprintf(err, errlen, "the sandbox's socket %s is not a socket (%s)", sb->path,
			 fd < 0 ? strerror(errno) : "something else is there");
		if (fd >= 0)
			close(fd);
		return -EPROTO;
	}
	if (sb->sock_fd > 0)
		close(sb->sock_fd - 1);
	sb->sock_fd = fd + 1;
	snprintf(sb->pinned, sizeof(sb->pinned), "/proc/self/fd/%d", fd);
	sb->ep.unix_path = sb->pinned;
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
	int wait_ms = s->sb.ops->answer_wait_ms(s);
	int r = mm_wait(s, MM_SANDBOX, wait_ms, &a);
	if (r == -ECANCELED) {
		snprintf(err, errlen, "no sandbox could be started: the session is ending");
		return -EIO;
	}
	if (r != 0) {
		snprintf(err, errlen, "no sandbox could be started: the server did not answer in %d s",
			 wait_ms / 1000);
		return -ETIMEDOUT;
	}
	const struct ipc_sandbox_ans *ans = &a.u.sandbox_ans;
	char why[256];
	pthread_mutex_lock(&s->mu);
	s->sandbox_ok = ans->ok;
	ipc_bytes_str(ans->socket, s->sandbox_socket, sizeof(s->sandbox_socket));
	ipc_bytes_str(ans->name, s->sandbox_name, sizeof(s->sandbox_name));
	snprintf(s->sb.path, sizeof(s->sb.path), "%s", s->sandbox_socket);
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
	struct sandbox *sb = &s->sb;
	const struct sandbox_ops *ops = sb->ops;
	memset(&sb->ep, 0, sizeof(sb->ep));
	sb->ep.unix_path = sb->path;
	sb->ep.base_url = "http://localhost";
	sb->ep.relay = ops->relay;
	int r = -ETIMEDOUT;
	char gone[200] = "";
	int64_t until = mono_ms() + ops->agent_wait_ms;
	while (!gone[0]) {
		r = agent_client_health(&sb->ep, ops->health_timeout_ms, err, errlen);
		/* through the relay, an answer that is not "gone" is the agent's own: no use waiting */
		if (r == 0 || (ops->relay && !agent_client_gone(r)) || mono_ms() > until)
			break;
		usleep((useconds_t)ops->poll_ms * 1000);
		pthread_mutex_lock(&s->mu);
		snprintf(gone, sizeof(gone), "%s", s->sandbox_gone);
		pthread_mutex_unlock(&s->mu);
	}
	if (r != 0) {
		if (gone[0])
			snprintf(err, errlen, "the sandbox did not start (%s); the server's log says why", gone);
		else if (!ops->relay)
			snprintf(err, errlen, "the sandbox did not start: its agent never answered");
		return r;
	}
	if ((r = sandbox_pin(sb, err, errlen)) != 0)
		return r;
	r = agent_client_claim(&sb->ep, err, errlen);
	if (r == -EALREADY && ops->refused)
		ops->refused(s, err, errlen);
	if (r != 0)
		return r;
	sb->claimed = true;
	return 0;
}

/* sandbox_init - the session's backend, before anything else of the sandbox is used */
void sandbox_init(struct session *s, bool kube, bool persistent, int ready_s)
{
	s->sb.ops = kube ? &sandbox_kube_ops : &sandbox_local_ops;
	s->sb.persistent = persistent;
	s->sb.ready_s = ready_s > 0 ? ready_s : 120;
}

/* sandbox_start - at start-up: a backend that warms asks for its sandbox now */
void sandbox_start(struct session *s)
{
	if (s->sb.ops->warm)
		sandbox_request(s, "spawn");
}

/* sandbox_get - the session's sandbox, claimed, ready for calls */
int sandbox_get(struct session *s, struct agent_endpoint **ep, char *err, size_t errlen)
{
	struct sandbox *sb = &s->sb;
	if (sb->claimed) {
		*ep = &sb->ep;
		return 0;
	}
	/* the per-user limit is the master's to keep: ask before claiming (it checks again) */
	if (!sb->quota_granted) {
		int q = mm_quota(s, err, errlen);
		if (q != 0)
			return q;
		sb->quota_granted = true;
	}
	/* the warm request from start-up may still be on its way, or answered and not yet taken;
	 * after a failure, a new request replaces what could not be used */
	if (!mm_outstanding(s, MM_SANDBOX))
		sandbox_request(s, "spawn");
	int r = sandbox_wait_answer(s, err, errlen);
	if (r == 0)
		r = sandbox_claim(s, err, errlen);
	if (r == 0) {
		*ep = &sb->ep;
		log_info("session %.8s… claimed %s sandbox %s", s->id, sb->ops->name, s->sandbox_name);
	}
	/* on failure the answer was taken: the next call asks again */
	return r;
}

/* sandbox_replace - the old sandbox is gone: a fresh one, claimed */
int sandbox_replace(struct session *s, struct agent_endpoint **ep, char *err, size_t errlen)
{
	s->sb.claimed = false;
	sandbox_request(s, "spawn");
	return sandbox_get(s, ep, err, errlen);
}

bool sandbox_have(struct session *s)
{
	return s->sb.claimed;
}

const char *sandbox_name(struct session *s)
{
	return s->sandbox_name;
}

bool sandbox_lost(struct session *s, int rc)
{
	return s->sb.ops->lost(rc);
}

void sandbox_end(struct session *s)
{
	s->sb.ops->end(s);
}
