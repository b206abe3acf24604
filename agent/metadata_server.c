/*
 * metadata_server.c - the metadata-server emulator's listener, one per run (see metadata.h).
 *
 * The pipeline (agent/pipeline.c) begins it just before the user's binary starts and ends it
 * right after, so nothing answers on the address while no program of this sandbox runs. It
 * listens on a random 127.x.y.z address with an ephemeral port: in the local jail the sandbox
 * may share the host's network namespace, and an address of its own keeps two sandboxes'
 * emulators apart (with --sandbox-network none, and in a pod, the loopback is the sandbox's own).
 *
 * A token the run's view does not hold (other scopes, a refreshed one, an ID token) is asked of
 * the worker: a "token_request" event goes onto the running call's stream and the requesting
 * connection waits until the worker's POST /token arrives (metadata_server_deliver, called from
 * agent/server.c's thread for that request), the run ends, or METADATA_FETCH_TIMEOUT_MS passes.
 * Concurrent requests for the same token share one token_request.
 */
#include "agent/metadata.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <openssl/rand.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "ipc/log.h"
#include "lib/mono.h"
#include "lib/secret.h"
#include "policy/limits.h"

/* One token_request sent to the worker and not yet settled. */
struct ms_pending {
	bool used;
	int64_t id;
	enum metadata_need kind;
	char *key;           /* the scope key, or audience + format + licenses */
	bool done;
	int status;          /* nonzero: the worker could not mint it */
	char *error;
	char *id_token;      /* an identity answer */
	int waiters;
};

struct metadata_server {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct MHD_Daemon *mhd;
	bool live;                    /* between begin and end */
	struct metadata_view view;
	metadata_event_fn ev;
	void *ev_ctx;
	int64_t next_id;
	struct ms_pending pending[METADATA_MAX_PENDING];
};

/* ms_pending_clear - forget one settled request */
static void ms_pending_clear(struct ms_pending *p)
{
	free(p->key);
	free(p->error);
	secret_free(p->id_token);
	memset(p, 0, sizeof(*p));
}

/* metadata_server_new - see metadata.h */
struct metadata_server *metadata_server_new(void)
{
	struct metadata_server *s = calloc(1, sizeof(*s));
	if (!s)
		return NULL;
	pthread_mutex_init(&s->mu, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&s->cv, &ca);
	pthread_condattr_destroy(&ca);
	return s;
}

/* ---- HTTP ---- */

/* ms_uri - MHD's URI logger: the raw request-target (MHD decodes the one it hands the access
 * handler), kept as the request's state; bounded so a huge one is merely refused */
static void *ms_uri(void *cls, const char *uri, struct MHD_Connection *c)
{
	(void)cls;
	(void)c;
	return strndup(uri ? uri : "", METADATA_MAX_TARGET + 1);
}

/* ms_completed - free the request's state */
static void ms_completed(void *cls, struct MHD_Connection *c, void **con_cls,
			 enum MHD_RequestTerminationCode toe)
{
	(void)cls;
	(void)c;
	(void)toe;
	free(*con_cls);
	*con_cls = NULL;
}

/* ms_send - queue a response with the headers every answer carries */
static enum MHD_Result ms_send(struct MHD_Connection *c, int status, const char *ctype,
			       const char *body, size_t len)
{
	struct MHD_Response *r = MHD_create_response_from_buffer(len, (void *)body,
								 MHD_RESPMEM_MUST_COPY);
	if (!r)
		return MHD_NO;
	MHD_add_response_header(r, "Metadata-Flavor", "Google");
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
	MHD_add_response_header(r, MHD_HTTP_HEADER_SERVER, "Metadata Server for VM");
	MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
	if (status == 405)
		MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, "GET");
	enum MHD_Result ret = MHD_queue_response(c, (unsigned int)status, r);
	MHD_destroy_response(r);
	return ret;
}

/* ms_send_text - a short text answer */
static enum MHD_Result ms_send_text(struct MHD_Connection *c, int status, const char *text)
{
	return ms_send(c, status, "text/plain; charset=utf-8", text, strlen(text));
}

/* ms_request_event - the token_request event for a pending slot */
static json_t *ms_request_event(const struct ms_pending *p, const struct metadata_response *r)
{
	json_t *ev = json_pack("{s:s, s:I}", "event", "token_request", "id", (json_int_t)p->id);
	if (!ev)
		return NULL;
	if (p->kind == METADATA_NEED_ACCESS) {
		json_t *sc = json_array();
		char *copy = strdup(r->need_scopes);
		char *save = NULL;
		for (char *t = copy ? strtok_r(copy, ",", &save) : NULL; t && sc;
		     t = strtok_r(NULL, ",", &save))
			json_array_append_new(sc, json_string(t));
		free(copy);
		json_object_set_new(ev, "kind", json_string("access"));
		json_object_set_new(ev, "scopes", sc ? sc : json_array());
	} else {
		json_object_set_new(ev, "kind", json_string("identity"));
		json_object_set_new(ev, "audience", json_string(r->need_audience));
		json_object_set_new(ev, "format", json_string(r->need_full ? "full" : "standard"));
		json_object_set_new(ev, "licenses", json_boolean(r->need_licenses));
	}
	return ev;
}

/* ms_fetch - ask the worker for what r needs and wait for it (called with s->mu held; returns
 * with it held). Returns the settled slot (the caller drops its wait with ms_release), or NULL
 * with *status and *msg set. */
static struct ms_pending *ms_fetch(struct metadata_server *s, const struct metadata_response *r,
				   int *status, const char **msg)
{
	char idkey[METADATA_MAX_FIELD + 32];
	const char *key = r->need_scopes;
	if (r->need == METADATA_NEED_IDENTITY) {
		snprintf(idkey, sizeof(idkey), "%s\n%d%d", r->need_audience, r->need_full,
			 r->need_licenses);
		key = idkey;
	}
	struct ms_pending *p = NULL, *free_slot = NULL;
	for (size_t i = 0; i < METADATA_MAX_PENDING; i++) {
		struct ms_pending *q = &s->pending[i];
		if (q->used && q->kind == r->need && !q->done && strcmp(q->key, key) == 0)
			p = q;
		else if (!q->used && !free_slot)
			free_slot = q;
	}
	if (!p) {
		if (!free_slot) {
			*status = 503;
			*msg = "Too many token requests are waiting for the worker; try again.\n";
			return NULL;
		}
		p = free_slot;
		p->key = strdup(key);
		if (!p->key) {
			*status = 503;
			*msg = "Out of memory.\n";
			return NULL;
		}
		p->used = true;
		p->kind = r->need;
		p->id = ++s->next_id;
		json_t *ev = ms_request_event(p, r);
		if (!ev || !s->ev) {
			json_decref(ev);
			ms_pending_clear(p);
			*status = 503;
			*msg = "The token request could not be sent to the worker.\n";
			return NULL;
		}
		log_debug("asking the worker for %s token (request %lld)",
			  r->need == METADATA_NEED_ACCESS ? "an access" : "an ID", (long long)p->id);
		s->ev(s->ev_ctx, ev);
	}
	p->waiters++;
	struct timespec until = mono_after(METADATA_FETCH_TIMEOUT_MS);
	while (!p->done && s->live)
		if (pthread_cond_timedwait(&s->cv, &s->mu, &until) == ETIMEDOUT)
			break;
	if (!p->done) {
		*status = 503;
		*msg = s->live ? "The worker did not answer the token request in time.\n"
			       : "The program's run has ended.\n";
		if (--p->waiters == 0)
			ms_pending_clear(p);
		return NULL;
	}
	return p;
}

/* ms_release - one waiter is done with a settled slot */
static void ms_release(struct ms_pending *p)
{
	if (--p->waiters <= 0)
		ms_pending_clear(p);
}

/* ms_access - MHD's access handler: everything is answered from the headers */
static enum MHD_Result ms_access(void *cls, struct MHD_Connection *c, const char *url,
				 const char *method, const char *version, const char *upload_data,
				 size_t *upload_data_size, void **con_cls)
{
	struct metadata_server *s = cls;
	(void)url;
	(void)version;
	(void)upload_data;
	if (*upload_data_size) {
		*upload_data_size = 0; /* a body is never wanted; the answer went out already */
		return MHD_YES;
	}
	const char *target = *con_cls;
	if (!target)
		return MHD_NO;
	struct metadata_request rq = {
		.method = method,
		.target = target,
		.target_len = strlen(target),
		.flavor = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Metadata-Flavor"),
		.forwarded = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-Forwarded-For") != NULL,
	};
	struct metadata_response r;
	pthread_mutex_lock(&s->mu);
	if (!s->live) {
		pthread_mutex_unlock(&s->mu);
		return ms_send_text(c, 503, "The program's run has ended.\n");
	}
	int rc = metadata_answer(&s->view, &rq, mono_s(), METADATA_MIN_LIFETIME, &r);
	if (rc < 0) {
		pthread_mutex_unlock(&s->mu);
		return ms_send_text(c, 503, "Out of memory.\n");
	}
	if (r.need == METADATA_NEED_NONE) {
		pthread_mutex_unlock(&s->mu);
		enum MHD_Result ret = ms_send(c, r.status, r.content_type, r.body, r.len);
		metadata_response_free(&r);
		return ret;
	}
	int status = 0;
	const char *msg = NULL;
	struct ms_pending *p = ms_fetch(s, &r, &status, &msg);
	char errbuf[MS_ERROR_MAX_BYTES + 2];
	enum MHD_Result ret;
	if (!p) {
		pthread_mutex_unlock(&s->mu);
		ret = ms_send_text(c, status, msg);
	} else if (p->status) {
		status = p->status;
		snprintf(errbuf, sizeof(errbuf), "%s\n", p->error ? p->error : "no token");
		ms_release(p);
		pthread_mutex_unlock(&s->mu);
		ret = ms_send_text(c, status, errbuf);
	} else if (r.need == METADATA_NEED_IDENTITY) {
		char *tok = strdup(p->id_token ? p->id_token : "");
		ms_release(p);
		pthread_mutex_unlock(&s->mu);
		ret = tok ? ms_send(c, 200, "application/text", tok, strlen(tok))
			  : ms_send_text(c, 503, "Out of memory.\n");
		secret_free(tok);
	} else {
		/* the token is in the view now; answer as if it had been there, taking it however
		 * short its life (a source may have nothing fresher) */
		ms_release(p);
		struct metadata_response again;
		rc = metadata_answer(&s->view, &rq, mono_s(), 1, &again);
		pthread_mutex_unlock(&s->mu);
		if (rc < 0)
			ret = ms_send_text(c, 503, "Out of memory.\n");
		else if (again.need != METADATA_NEED_NONE)
			ret = ms_send_text(c, 503, "The worker's token had already expired.\n");
		else
			ret = ms_send(c, again.status, again.content_type, again.body, again.len);
		metadata_response_free(&again);
	}
	metadata_response_free(&r);
	return ret;
}

/* ms_mhd_log - libmicrohttpd's own complaints, into our log */
static void ms_mhd_log(void *cls, const char *fmt, va_list ap)
{
	(void)cls;
	char line[256];
	vsnprintf(line, sizeof(line), fmt, ap);
	size_t n = strlen(line);
	while (n && (line[n - 1] == '\n' || line[n - 1] == '\r'))
		line[--n] = '\0';
	log_debug("metadata emulator: libmicrohttpd: %s", line);
}

/* ms_listen - a TCP socket on a random 127.x.y.z, ephemeral port */
static int ms_listen(char *host, size_t hostlen, char *err, size_t errlen)
{
	int e = EADDRNOTAVAIL;
	for (int attempt = 0; attempt < 4; attempt++) {
		unsigned char b[3];
		if (RAND_bytes(b, sizeof(b)) != 1) {
			snprintf(err, errlen, "no randomness for the metadata emulator's address");
			return -EIO;
		}
		/* 127.1.0.0 to 127.254.255.254: clear of 127.0.0.x, where local services live */
		b[0] = (unsigned char)(1 + b[0] % 254);
		if (b[2] == 0 || b[2] == 255)
			b[2] = 1;
		struct sockaddr_in sa = { .sin_family = AF_INET };
		sa.sin_addr.s_addr = htonl((127u << 24) | ((unsigned)b[0] << 16) |
					   ((unsigned)b[1] << 8) | b[2]);
		int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd < 0) {
			e = errno;
			break;
		}
		socklen_t sl = sizeof(sa);
		if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 && listen(fd, 64) == 0 &&
		    getsockname(fd, (struct sockaddr *)&sa, &sl) == 0) {
			char ip[INET_ADDRSTRLEN];
			inet_ntop(AF_INET, &sa.sin_addr, ip, sizeof(ip));
			snprintf(host, hostlen, "%s:%u", ip, (unsigned)ntohs(sa.sin_port));
			return fd;
		}
		e = errno;
		close(fd);
	}
	snprintf(err, errlen, "the metadata emulator cannot listen on the loopback: %s (is the "
		 "sandbox's loopback interface up?)", strerror(e));
	return -e;
}

/* metadata_server_begin - see metadata.h */
int metadata_server_begin(struct metadata_server *s, struct metadata_view *v,
			  metadata_event_fn ev, void *ev_ctx, char *host, size_t hostlen,
			  char *err, size_t errlen)
{
	if (s->live)
		metadata_server_end(s);
	int fd = ms_listen(host, hostlen, err, errlen);
	if (fd < 0) {
		metadata_view_free(v);
		return fd;
	}
	pthread_mutex_lock(&s->mu);
	s->view = *v;
	memset(v, 0, sizeof(*v));
	s->ev = ev;
	s->ev_ctx = ev_ctx;
	s->live = true;
	pthread_mutex_unlock(&s->mu);
	s->mhd = MHD_start_daemon(
		MHD_USE_AUTO_INTERNAL_THREAD | MHD_USE_THREAD_PER_CONNECTION | MHD_USE_ERROR_LOG,
		0, NULL, NULL, ms_access, s,
		MHD_OPTION_EXTERNAL_LOGGER, ms_mhd_log, (void *)NULL,
		MHD_OPTION_LISTEN_SOCKET, (MHD_socket)fd,
		MHD_OPTION_CONNECTION_LIMIT, (unsigned int)MS_CONN_LIMIT,
		MHD_OPTION_CONNECTION_TIMEOUT, (unsigned int)MS_CONN_TIMEOUT_S,
		MHD_OPTION_URI_LOG_CALLBACK, ms_uri, (void *)NULL,
		MHD_OPTION_NOTIFY_COMPLETED, ms_completed, (void *)NULL,
		MHD_OPTION_END);
	if (!s->mhd) {
		close(fd);
		metadata_server_end(s);
		snprintf(err, errlen, "the metadata emulator could not start (libmicrohttpd)");
		return -EIO;
	}
	log_debug("metadata emulator on %s for this run", host);
	return 0;
}

/* metadata_server_end - see metadata.h */
void metadata_server_end(struct metadata_server *s)
{
	pthread_mutex_lock(&s->mu);
	s->live = false;
	pthread_cond_broadcast(&s->cv);
	pthread_mutex_unlock(&s->mu);
	/* waiting connections wake on the broadcast and answer 503; MHD joins them */
	if (s->mhd)
		MHD_stop_daemon(s->mhd);
	s->mhd = NULL;
	pthread_mutex_lock(&s->mu);
	metadata_view_free(&s->view);
	for (size_t i = 0; i < METADATA_MAX_PENDING; i++)
		ms_pending_clear(&s->pending[i]);
	s->ev = NULL;
	s->ev_ctx = NULL;
	pthread_mutex_unlock(&s->mu);
}

/* ms_sentence - a worker's error sentence: printable, bounded */
static char *ms_sentence(const char *msg)
{
	char *out = strndup(msg && *msg ? msg : "the worker could not mint the token", MS_ERROR_MAX_BYTES);
	for (char *p = out; p && *p; p++)
		if ((unsigned char)*p < 0x20 || *p == 0x7f)
			*p = ' ';
	return out;
}

/* metadata_server_deliver - see metadata.h */
int metadata_server_deliver(struct metadata_server *s, json_t *answer, char *err, size_t errlen)
{
	json_t *jid = json_object_get(answer, "id");
	if (!json_is_integer(jid)) {
		snprintf(err, errlen, "the token answer needs the integer id of its token_request");
		return -EINVAL;
	}
	json_t *jerr = json_object_get(answer, "error");
	json_t *jat = json_object_get(answer, "access_token");
	json_t *jit = json_object_get(answer, "id_token");
	json_t *jexp = json_object_get(answer, "expires_in");
	json_t *jst = json_object_get(answer, "status");
	pthread_mutex_lock(&s->mu);
	struct ms_pending *p = NULL;
	for (size_t i = 0; s->live && i < METADATA_MAX_PENDING; i++)
		if (s->pending[i].used && !s->pending[i].done &&
		    s->pending[i].id == json_integer_value(jid))
			p = &s->pending[i];
	int rc = 0;
	if (!p) {
		snprintf(err, errlen, "no token request with that id is waiting (the run ended, or "
			 "it timed out)");
		rc = -ENOENT;
	} else if (jerr) {
		p->status = json_is_integer(jst) && json_integer_value(jst) >= 400 &&
					    json_integer_value(jst) <= 599
				    ? (int)json_integer_value(jst)
				    : 503;
		p->error = ms_sentence(json_string_value(jerr));
	} else if (p->kind == METADATA_NEED_ACCESS) {
		if (!json_is_string(jat) || !json_is_integer(jexp) || json_integer_value(jexp) <= 0 ||
		    json_integer_value(jexp) > 86400 * 7 ||
		    metadata_view_add_token(&s->view, p->key, json_string_value(jat),
					    json_string_value(json_object_get(answer, "token_type")),
					    mono_s() + (double)json_integer_value(jexp)) < 0) {
			snprintf(err, errlen, "an access token answer needs access_token (visible "
				 "ASCII) and a positive expires_in");
			rc = -EINVAL;
		}
	} else {
		size_t n = json_string_length(jit);
		bool ok = json_is_string(jit) && n > 0 && n <= METADATA_MAX_TOKEN;
		for (size_t i = 0; ok && i < n; i++)
			ok = json_string_value(jit)[i] > 0x20 && json_string_value(jit)[i] < 0x7f;
		if (!ok || !(p->id_token = strdup(json_string_value(jit)))) {
			snprintf(err, errlen, "an identity answer needs id_token (visible ASCII)");
			rc = -EINVAL;
		}
	}
	if (p && rc == -EINVAL) {
		/* the waiting program learns that something is off, rather than waiting it out */
		p->status = 503;
		p->error = ms_sentence("the worker's answer to the token request was malformed");
	}
	if (p) {
		p->done = true;
		pthread_cond_broadcast(&s->cv);
	}
	pthread_mutex_unlock(&s->mu);
	return rc;
}

/* metadata_server_free - end any run and free */
void metadata_server_free(struct metadata_server *s)
{
	if (!s)
		return;
	metadata_server_end(s);
	pthread_cond_destroy(&s->cv);
	pthread_mutex_destroy(&s->mu);
	free(s);
}
