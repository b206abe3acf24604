/*
 * sandbox.c - the worker's side of its sandbox: ask the master for one, wait, claim it.
 *
 * The worker cannot start processes (seccomp), so the sandbox is started by the master on
 * REQ_SANDBOX. The first request goes out at start-up, so the sandbox warms up while the client
 * initializes; the first tool call then only waits for the agent to answer and performs the
 * one-time claim handshake that sets the bearer secret. Used by worker/call.c.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "worker/agent_client.h"
#include "worker/sandbox_kube.h"
#include "worker/worker.h"

static struct agent_endpoint sandbox_ep;
static char sandbox_path[600];
static bool sandbox_claimed;

/* sandbox_request - send REQ_SANDBOX; the answer lands in the session via sandbox_answer */
void sandbox_request(struct session *s, const char *op)
{
	struct ipc_buf b;
	pthread_mutex_lock(&s->mu);
	s->sandbox_gone[0] = '\0';
	s->sandbox_pending = true;
	s->sandbox_answered = false;
	s->sandbox_seq = session_next_seq(s);
	uint32_t seq = s->sandbox_seq;
	pthread_mutex_unlock(&s->mu);
	if (ipc_pack_req_sandbox(&b, seq, op, "") == 0)
		session_send(s, &b);
}

/* sandbox_answer - main thread: store the master's answer and wake the call thread */
void sandbox_answer(struct session *s, const struct ipc_msg *m)
{
	const struct ipc_sandbox_ans *a = &m->u.sandbox_ans;
	pthread_mutex_lock(&s->mu);
	s->sandbox_pending = false;
	s->sandbox_answered = true;
	s->sandbox_ok = a->ok;
	ipc_bytes_str(a->error, s->sandbox_error, sizeof(s->sandbox_error));
	ipc_bytes_str(a->socket, s->sandbox_socket, sizeof(s->sandbox_socket));
	ipc_bytes_str(a->name, s->sandbox_name, sizeof(s->sandbox_name));
	pthread_cond_broadcast(&s->cv);
	pthread_mutex_unlock(&s->mu);
	log_debug("sandbox %s: %s", s->sandbox_name, a->ok ? "started" : s->sandbox_error);
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

/* sandbox_wait_answer - call thread: wait for the outstanding REQ_SANDBOX's answer */
static int sandbox_wait_answer(struct session *s, char *err, size_t errlen)
{
	struct timespec until;
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += 60;
	pthread_mutex_lock(&s->mu);
	while (!s->sandbox_answered && s->state != WS_CLOSING)
		if (pthread_cond_timedwait(&s->cv, &s->mu, &until) == ETIMEDOUT)
			break;
	bool answered = s->sandbox_answered, ok = s->sandbox_ok;
	snprintf(sandbox_path, sizeof(sandbox_path), "%s", s->sandbox_socket);
	if (answered && !ok)
		snprintf(err, errlen, "no sandbox could be started: %s", s->sandbox_error);
	pthread_mutex_unlock(&s->mu);
	if (!answered) {
		snprintf(err, errlen, "no sandbox could be started: the server did not answer in 60 s");
		return -ETIMEDOUT;
	}
	return ok ? 0 : -EIO;
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
	if ((r = agent_client_claim(&sandbox_ep, err, errlen)) != 0)
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
			int q = quota_ask(s, err, errlen);
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
	int q = quota_ask(s, err, errlen);
	if (q != 0)
		return q;
	pthread_mutex_lock(&s->mu);
	bool need = !s->sandbox_pending && !(s->sandbox_answered && s->sandbox_ok);
	pthread_mutex_unlock(&s->mu);
	if (need)
		sandbox_request(s, "spawn");
	int r = sandbox_wait_answer(s, err, errlen);
	if (r == 0)
		r = sandbox_claim(s, err, errlen);
	if (r == 0) {
		*ep = &sandbox_ep;
		log_info("session %.8s… claimed sandbox %s", s->id, s->sandbox_name);
	} else {
		/* next call asks again */
		pthread_mutex_lock(&s->mu);
		s->sandbox_answered = false;
		pthread_mutex_unlock(&s->mu);
	}
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
