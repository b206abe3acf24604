/*
 * monitor_wrap.c - the worker's requests to its master (OpenSSH's monitor_wrap.c): the one
 * request-and-wait primitive, and the requests built on it, each named for the master's answer
 * (mm_quota / mon_answer_quota, mm_sandbox / mon_answer_sandbox, mm_token / mon_answer_token,
 * mm_adc / mon_answer_adc in master/monitor.c).
 *
 * A request is sent from any thread; its answer arrives on the main thread, which hands it to
 * mm_deliver, and whoever waits takes it with mm_wait. One request of each kind is outstanding
 * at a time. An answer that matches no outstanding request is the master's breach: the caller
 * (worker_dispatch) exits. Both backends' sandboxes are asked for here (mm_sandbox): on
 * Kubernetes the master makes every API call, so there is no other request to wait for.
 */
#include <errno.h>
#include <openssl/crypto.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "worker/worker.h"

/* mm_send - register the request of kind k (answer type ans_type, seq) and send it */
int mm_send(struct session *s, enum mm_kind k, uint32_t ans_type, uint32_t seq, struct ipc_buf *b)
{
	struct mm_req *q = &s->mm[k];
	pthread_mutex_lock(&s->mu);
	if (q->answered)
		ipc_msg_free(&q->ans);
	q->answered = false;
	q->pending = true;
	q->seq = seq;
	q->ans_type = ans_type;
	pthread_mutex_unlock(&s->mu);
	int r = session_send(s, b);
	if (r != 0) {
		pthread_mutex_lock(&s->mu);
		q->pending = false;
		pthread_mutex_unlock(&s->mu);
	}
	return r;
}

/* mm_outstanding - a request of kind k is on its way or its answer waits to be taken */
bool mm_outstanding(struct session *s, enum mm_kind k)
{
	pthread_mutex_lock(&s->mu);
	bool o = s->mm[k].pending || s->mm[k].answered;
	pthread_mutex_unlock(&s->mu);
	return o;
}

/* mm_expects - main thread: is m the answer an outstanding request waits for? (under s->mu) */
bool mm_expects(struct session *s, const struct ipc_msg *m)
{
	for (int k = 0; k < MM_KINDS; k++)
		if (s->mm[k].pending && s->mm[k].seq == m->seq && s->mm[k].ans_type == m->type)
			return true;
	return false;
}

/* mm_deliver - main thread: hand the answer m to its waiter; m is moved (left empty) */
bool mm_deliver(struct session *s, struct ipc_msg *m)
{
	pthread_mutex_lock(&s->mu);
	for (int k = 0; k < MM_KINDS; k++) {
		struct mm_req *q = &s->mm[k];
		if (q->pending && q->seq == m->seq && q->ans_type == m->type) {
			q->ans = *m;
			msgpack_unpacked_init(&m->unp);
			m->raw = NULL;
			q->pending = false;
			q->answered = true;
			pthread_cond_broadcast(&s->cv);
			pthread_mutex_unlock(&s->mu);
			return true;
		}
	}
	pthread_mutex_unlock(&s->mu);
	return false;
}

/* mm_wait - wait up to timeout_ms for the answer of kind k and take it into *ans (free with
 * ipc_msg_free): 0, -ETIMEDOUT, or -ECANCELED when the session ends first */
int mm_wait(struct session *s, enum mm_kind k, int timeout_ms, struct ipc_msg *ans)
{
	struct mm_req *q = &s->mm[k];
	struct timespec until;
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += timeout_ms / 1000;
	until.tv_nsec += (long)(timeout_ms % 1000) * 1000000;
	if (until.tv_nsec >= 1000000000) {
		until.tv_sec++;
		until.tv_nsec -= 1000000000;
	}
	pthread_mutex_lock(&s->mu);
	int r = 0;
	while (!q->answered && r == 0) {
		if (s->state == WS_CLOSING)
			r = -ECANCELED;
		else if (pthread_cond_timedwait(&s->cv, &s->mu, &until) == ETIMEDOUT)
			r = q->answered ? 0 : -ETIMEDOUT;
	}
	if (q->answered) {
		*ans = q->ans;
		memset(&q->ans, 0, sizeof(q->ans));
		msgpack_unpacked_init(&q->ans.unp);
		q->answered = false;
		r = 0;
	}
	pthread_mutex_unlock(&s->mu);
	return r;
}

/* mm_quota - may this session claim a sandbox? 0, or -EDQUOT / -EIO with err set */
int mm_quota(struct session *s, char *err, size_t errlen)
{
	struct ipc_buf b;
	uint32_t seq = session_next_seq(s);
	struct ipc_msg a;
	int r = ipc_pack_req_quota(&b, seq);
	if (r == 0)
		r = mm_send(s, MM_QUOTA, IPC_ANS_QUOTA, seq, &b);
	if (r == 0)
		r = mm_wait(s, MM_QUOTA, MM_QUOTA_WAIT_MS, &a);
	if (r == -ECANCELED) {
		snprintf(err, errlen, "the session is ending");
		return -EDQUOT;
	}
	if (r != 0) {
		snprintf(err, errlen, "the server did not answer whether this session may have a sandbox");
		return -EIO;
	}
	bool ok = a.u.quota_ans.ok;
	if (!ok)
		ipc_bytes_str(a.u.quota_ans.error, err, errlen);
	ipc_msg_free(&a);
	return ok ? 0 : -EDQUOT;
}

/* mm_sandbox - ask for op ("spawn", "release") on the session's sandbox; the answer is
 * taken later with mm_wait(MM_SANDBOX) */
int mm_sandbox(struct session *s, const char *op)
{
	struct ipc_buf b;
	uint32_t seq = session_next_seq(s);
	int r = ipc_pack_req_sandbox(&b, seq, op, "");
	return r ? r : mm_send(s, MM_SANDBOX, IPC_ANS_SANDBOX, seq, &b);
}

/* mm_token - see worker.h */
int mm_token(void *arg, const char *scopes, char **token, long *expires_in, int *status, char *err,
	     size_t errlen)
{
	struct session *s = arg;
	struct ipc_buf b;
	uint32_t seq = session_next_seq(s);
	struct ipc_msg a;
	*token = NULL;
	*status = 503;
	int r = ipc_pack_req_token(&b, seq, scopes);
	if (r == 0)
		r = mm_send(s, MM_TOKEN, IPC_ANS_TOKEN, seq, &b);
	if (r == 0)
		r = mm_wait(s, MM_TOKEN, MM_TOKEN_WAIT_MS, &a);
	if (r != 0) {
		snprintf(err, errlen, r == -ECANCELED ? "the session is ending"
			 : "the server did not hand out the signed-in user's Google token in time; try again");
		return -EIO;
	}
	const struct ipc_token_ans *t = &a.u.token_ans;
	if (t->ok && t->token.len > 0 && t->expires_in > 0) {
		*token = strndup(t->token.ptr, t->token.len);
		*expires_in = (long)t->expires_in;
		*status = 200;
		explicit_bzero((void *)t->token.ptr, t->token.len);
		ipc_msg_free(&a);
		return *token ? 0 : -ENOMEM;
	}
	ipc_bytes_str(t->error, err, errlen);
	if (!err[0])
		snprintf(err, errlen, "the server gave no Google token for the signed-in user");
	*status = t->status == 403 ? 403 : t->status == 404 ? 404 : 503;
	ipc_msg_free(&a);
	return *status == 403 ? -EACCES : -EAGAIN;
}

/* mm_adc - see worker.h */
char *mm_adc(void *session, size_t *len, bool *absent, char *err, size_t errlen)
{
	struct session *s = session;
	struct ipc_buf b;
	struct ipc_msg a;
	uint32_t seq = session_next_seq(s);
	*absent = false;
	int r = ipc_pack_req_adc(&b, seq);
	if (r == 0)
		r = mm_send(s, MM_ADC, IPC_ANS_ADC, seq, &b);
	if (r == 0)
		r = mm_wait(s, MM_ADC, MM_ADC_WAIT_MS, &a);
	if (r != 0) {
		snprintf(err, errlen, "the server did not hand over the Application Default Credentials "
			 "(%s)", r == -ECANCELED ? "the session is ending" : "no answer");
		return NULL;
	}
	char *text = NULL;
	if (a.u.adc_ans.ok && (text = malloc(a.u.adc_ans.text.len + 1)) != NULL) {
		memcpy(text, a.u.adc_ans.text.ptr, a.u.adc_ans.text.len);
		text[a.u.adc_ans.text.len] = '\0';
		*len = a.u.adc_ans.text.len;
	} else if (a.u.adc_ans.ok) {
		snprintf(err, errlen, "no memory for the Application Default Credentials");
	} else {
		*absent = a.u.adc_ans.absent;
		ipc_bytes_str(a.u.adc_ans.error, err, errlen);
	}
	/* the message's bytes held the secret too */
	if (a.raw && a.u.adc_ans.text.len)
		OPENSSL_cleanse((char *)a.u.adc_ans.text.ptr, a.u.adc_ans.text.len);
	ipc_msg_free(&a);
	return text;
}
