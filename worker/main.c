/*
 * main.c - `kode-gopher worker`: one MCP session, started by the master with fork+exec.
 *
 * Start-up order matters: take the worker's own identity (a root serve names one: no uid 0, no
 * capability from then on), restrict files and ports with Landlock, dial the master, say HELLO,
 * ask for a sandbox (so it is warming while the client initializes), then lock down with
 * seccomp and serve. From then on the worker can neither exec nor open new kinds of sockets;
 * what it needs beyond that (a sandbox, the ADC file, Kubernetes access) it asks the master for.
 *
 * What the master sends is dispatched by the contract (ipc/ipc.h): a message the worker's phase
 * does not permit, a once-only one twice, or an answer to nothing it asked means the master side
 * is confused or hostile, and the worker exits.
 * Exit status: 0 normal end, 1 handled fatal error, IPC_EXIT_CONFIG when this machine does not
 * let a worker lock itself down (the master then stops starting workers), anything else a crash.
 */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <sys/prctl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lib/http_client.h"
#include "policy/landlock.h"
#include "policy/privdrop.h"
#include "policy/seccomp.h"
#include "worker/creds.h"
#include "worker/worker.h"

static const char worker_usage[] =
	"usage: kode-gopher worker --ipc URL --session ID [options]\n"
	"\n"
	"Internal: one MCP session, started by `kode-gopher serve`. Not for direct use.\n"
	"\n"
	"options:\n"
	"  --ipc URL              the master's ipc:// channel\n"
	"  --session ID           the session this worker serves\n"
	"  --log-level LEVEL      debug, info, warn, error or off\n"
	"  --seccomp MODE         kill (default), log or off\n"
	"  --timeout S            default execute timeout in seconds (60)\n"
	"  --max-timeout S        largest timeout a call may ask for (300)\n"
	"  --credentials MODE     adc, metadata, service-account:EMAIL, server, user or none\n"
	"                         (default none; see docs/credentials.md)\n"
	"  --token-endpoint URL   OAuth token endpoint (default " CREDS_DEFAULT_TOKEN_ENDPOINT ")\n"
	"  --iam-endpoint URL     IAM Credentials API (default " CREDS_DEFAULT_IAM_ENDPOINT ")\n"
	"  --metadata-host HOST   the host's metadata server (default $GCE_METADATA_HOST, else\n"
	"                         " CREDS_DEFAULT_METADATA_HOST ")\n"
	"  --project ID           the project programs see (default $GOOGLE_CLOUD_PROJECT, else\n"
	"                         the credentials')\n"
	"  --scopes LIST          comma-separated default OAuth scopes (default cloud-platform)\n"
	"  --uid N                the identity to run as (uid = gid; a root serve names one per\n"
	"                         worker)\n";

/* ---- the dispatch table ---- */

typedef void (*dispatch_fn)(struct session *s, struct ipc_msg *m);

/* on_req_mcp - a client message */
static void on_req_mcp(struct session *s, struct ipc_msg *m)
{
	mcp_handle(s, m->seq, m->u.mcp.msg.ptr, m->u.mcp.msg.len, m->u.mcp.replay);
}

/* on_toobig - a client message the master had to drop */
static void on_toobig(struct session *s, struct ipc_msg *m)
{
	mcp_handle_toobig(s, m->seq, &m->u.toobig);
}

/* on_ans_sandbox - the master answered our REQ_SANDBOX: its waiter takes it */
static void on_ans_sandbox(struct session *s, struct ipc_msg *m)
{
	sandbox_answer(s, m);
	mm_deliver(s, m);
}

/* on_sandbox_note - the master saw our sandbox end by itself */
static void on_sandbox_note(struct session *s, struct ipc_msg *m)
{
	sandbox_gone(s, m);
}

/* on_assign - a pre-started worker learns its session and user */
static void on_assign(struct session *s, struct ipc_msg *m)
{
	pthread_mutex_lock(&s->mu);
	ipc_bytes_str(m->u.assign.session, s->id, sizeof(s->id));
	ipc_bytes_str(m->u.assign.user, s->user, sizeof(s->user));
	s->phase = IPC_PH_SESSION;
	session_title(s);
	pthread_mutex_unlock(&s->mu);
	/* --credentials user: the programs' tokens are this user's, and only the master has them */
	if (s->creds && creds_mode(s->creds) == CREDS_USER && strchr(s->user, '@'))
		creds_set_user(s->creds, s->user, mm_token, s);
	log_info("serving session %.8s… for %s", s->id, s->user);
}

/* on_ans_token - the signed-in user's token (or why not): its waiter takes it */
static void on_ans_token(struct session *s, struct ipc_msg *m)
{
	mm_deliver(s, m);
}

/* on_ans_quota - the master's word on claiming a sandbox: its waiter takes it */
static void on_ans_quota(struct session *s, struct ipc_msg *m)
{
	mm_deliver(s, m);
}

/* on_ans_adc - the ADC file's text, for creds (worker/monitor_wrap.c mm_adc) */
static void on_ans_adc(struct session *s, struct ipc_msg *m)
{
	mm_deliver(s, m);
}

/* on_shutdown - end the session */
static void on_shutdown(struct session *s, struct ipc_msg *m)
{
	char why[128];
	ipc_bytes_str(m->u.shutdown.reason, why, sizeof(why));
	log_info("shutting down: %s", why);
	pthread_mutex_lock(&s->mu);
	s->phase = IPC_PH_ENDING;
	session_set_state(s, WS_CLOSING);
	pthread_mutex_unlock(&s->mu);
}

/* The handlers of what the master sends; which phases permit each, and its flags, are the
 * contract's (ipc/ipc.h IPC_MESSAGES), checked by worker_dispatch before a handler runs. */
static const dispatch_fn dispatch[IPC_TYPE_MAX] = {
	[IPC_REQ_MCP] = on_req_mcp,
	[IPC_REQ_MCP_TOOBIG] = on_toobig,
	[IPC_ANS_SANDBOX] = on_ans_sandbox,
	[IPC_REQ_SHUTDOWN] = on_shutdown,
	[IPC_NOTE_SANDBOX] = on_sandbox_note,
	[IPC_NOTE_ASSIGN] = on_assign,
	[IPC_ANS_QUOTA] = on_ans_quota,
	[IPC_ANS_TOKEN] = on_ans_token,
	[IPC_ANS_ADC] = on_ans_adc,
};

/* worker_dispatch - run the handler the contract permits in this phase, or die */
static void worker_dispatch(struct session *s, struct ipc_msg *m)
{
	const struct ipc_contract *c = ipc_contract_of(m->type);
	uint64_t bit = 1ull << (m->type < 64 ? m->type : 0);
	pthread_mutex_lock(&s->mu);
	unsigned ph = s->phase;
	/* ANSWER: only the seq of our request that still waits */
	bool unasked = c && (c->flags & IPC_ANSWER) && !mm_expects(s, m);
	bool again = c && (c->flags & IPC_ONCE) && (s->seen & bit);
	bool ok = c && ipc_permitted(m->type, IPC_M2W, ph) && dispatch[m->type] && !unasked && !again;
	if (ok)
		s->seen |= bit;
	pthread_mutex_unlock(&s->mu);
	if (ok) {
		dispatch[m->type](s, m);
		return;
	}
	log_error("message %s (seq %u) is not permitted in phase %s%s; exiting", ipc_type_name(m->type),
		  m->seq, ipc_phase_name(ph), unasked ? " (an answer to nothing we asked)" :
		  again ? " (a second time; it is allowed once)" : "");
	_exit(1);
}

int worker_main(int argc, char **argv)
{
	static struct session sess;
	struct session *s = &sess;
	const char *url = NULL, *seccomp_mode = "kill";
	enum log_level lvl = LOG_LVL_INFO;
	s->default_timeout_s = 60;
	s->max_timeout_s = 300;
	static const struct option opts[] = {
		{ "ipc", required_argument, 0, 'i' },     { "session", required_argument, 0, 's' },
		{ "log-level", required_argument, 0, 'l' }, { "seccomp", required_argument, 0, 'c' },
		{ "timeout", required_argument, 0, 't' }, { "max-timeout", required_argument, 0, 'm' },
		{ "credentials", required_argument, 0, 'C' },
		{ "token-endpoint", required_argument, 0, 'T' },
		{ "iam-endpoint", required_argument, 0, 'I' },
		{ "metadata-host", required_argument, 0, 'M' },
		{ "project", required_argument, 0, 'P' },
		{ "scopes", required_argument, 0, 'S' },
		{ "backend", required_argument, 0, 'B' },
		{ "claim-ready-timeout", required_argument, 0, 'R' },
		{ "persistent", no_argument, 0, 'K' },
		{ "uid", required_argument, 0, 'U' },
		{ "help", no_argument, 0, 'h' },          { 0, 0, 0, 0 }
	};
	struct creds_config ccfg = { .mode = CREDS_NONE, .read_adc = mm_adc, .read_adc_arg = s };
	unsigned long run_uid = 0;
	bool kube = false, persistent = false;
	int ready_s = 120;
	char cerr[256];
	int c;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 'i': url = optarg; break;
		case 's': snprintf(s->id, sizeof(s->id), "%s", optarg); break;
		case 'l':
			if (log_parse_level(optarg, &lvl) != 0)
				lvl = LOG_LVL_INFO;
			break;
		case 'c': seccomp_mode = optarg; break;
		case 't': s->default_timeout_s = atoi(optarg) > 0 ? atoi(optarg) : 60; break;
		case 'm': s->max_timeout_s = atoi(optarg) > 0 ? atoi(optarg) : 300; break;
		case 'C':
			if (gcreds_parse_mode(optarg, &ccfg.mode, &ccfg.service_account, cerr, sizeof(cerr)) != 0) {
				fprintf(stderr, "kode-gopher worker: %s\n", cerr);
				return 2;
			}
			break;
		case 'T': ccfg.token_endpoint = optarg; break;
		case 'I': ccfg.iam_endpoint = optarg; break;
		case 'M': ccfg.metadata_host = optarg; break;
		case 'P': ccfg.project = optarg; break;
		case 'S': ccfg.scopes = optarg; break;
		case 'B': kube = strcmp(optarg, "kubernetes") == 0; break;
		case 'R': ready_s = atoi(optarg); break;
		case 'K': persistent = true; break;
		case 'U': run_uid = strtoul(optarg, NULL, 10); break;
		case 'h': fputs(worker_usage, stdout); return 0;
		default: fputs(worker_usage, stderr); return 2;
		}
	}
	if (!url || !s->id[0]) {
		fputs(worker_usage, stderr);
		return 2;
	}
	log_init("worker", lvl);
	sandbox_init(s, kube, persistent, ready_s);
	signal(SIGPIPE, SIG_IGN);
	/* what only the start-up identity may read, then the worker's own identity, before any
	 * thread exists (the bounding set and securebits are per thread) */
	if (ccfg.mode != CREDS_NONE)
		creds_load_ca();
	if (run_uid) {
		const char *step = "";
		pid_t master = getppid();
		int pr = run_uid > UINT32_MAX ? -EINVAL : privdrop_to((uid_t)run_uid, (gid_t)run_uid, &step);
		if (pr != 0) {
			log_error("cannot run as the worker's own identity %lu (%s: %s); refusing to serve "
				  "with root's powers", run_uid, step, strerror(-pr));
			return IPC_EXIT_CONFIG;
		}
		/* the change of uid cleared the parent-death signal: a killed master's workers
		 * would live on, idle, holding their uids */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != master)
			return 1;
		log_debug("running as uid and gid %lu, no capabilities, no_new_privs", run_uid);
	}
	/* Landlock first: it binds this thread and the threads started later (nng's, the call
	 * thread), so it must come before any of them. --seccomp off (debugging) skips it too. */
	bool landlocked = false;
	if (strcmp(seccomp_mode, "off") != 0) {
		struct landlock_worker lw = { 0 };
		int nx = 0;
		/* (the ADC file is the master's to read: REQ_ADC) a private CA for the token
		 * endpoints, which OpenSSL may look up by itself */
		const char *ca = getenv("SSL_CERT_FILE"), *cadir = getenv("SSL_CERT_DIR");
		if (ca && *ca)
			lw.extra_read[nx++] = ca;
		if (cadir && *cadir)
			lw.extra_read[nx++] = cadir;
		/* without an endpoint to mint tokens at (user mode asks its master), a worker has no
		 * TCP to open at all: its sandbox is a unix socket on both backends (a Kubernetes
		 * sandbox's is the master's relay); the modes that mint keep TCP
		 * (docs/architecture.md) */
		lw.restrict_tcp = ccfg.mode == CREDS_NONE || ccfg.mode == CREDS_ADC ||
				  ccfg.mode == CREDS_USER;
		int ll = landlock_worker_apply(&lw);
		if (ll == -EOPNOTSUPP) {
			log_warn("this kernel has no Landlock: the worker's view of files and ports is "
				 "limited by its seccomp filter only");
		} else if (ll < 0) {
			log_error("cannot restrict the worker with Landlock: %s; refusing to serve "
				  "unconfined", strerror(-ll));
			return IPC_EXIT_CONFIG;
		} else {
			landlocked = true;
			log_debug("landlock ABI %d enforced%s", ll, lw.restrict_tcp ? ", no TCP" : "");
		}
	}
	pthread_mutex_init(&s->mu, NULL);
	pthread_cond_init(&s->cv, NULL);
	s->mcp_log_level = 4; /* "warning" until the client says otherwise (logging/setLevel) */
	if (http_global_init() != 0 || chan_dial(&s->sock, url) != 0)
		return 1;
	if (ccfg.mode != CREDS_NONE && !(s->creds = creds_new(&ccfg)))
		return 1;
	log_debug("credentials: %s", gcreds_mode_name(ccfg.mode));

	struct ipc_buf b;
	if (ipc_pack_hello(&b, session_next_seq(s), (uint32_t)getpid(), KG_VERSION) != 0 ||
	    session_send(s, &b) != 0)
		return 1;
	s->state = WS_BEFORE_INIT;
	/* a pre-started worker (--session -) waits idle for NOTE_ASSIGN; a stdio worker has its
	 * session from the start */
	s->phase = strcmp(s->id, "-") == 0 ? IPC_PH_IDLE : IPC_PH_SESSION;
	session_title(s);
	/* warm: a local sandbox starts while the client initializes (a claim waits for a call) */
	sandbox_start(s);
	if (call_start(s) != 0)
		return 1;
	/* without Landlock, the filter keeps files to reading */
	int lr = seccomp_worker_lockdown(seccomp_mode, landlocked ? 0 : SECCOMP_WORKER_READ_ONLY);
	if (lr != 0) {
		/* no retry can help: the master stops starting workers when it sees this status */
		log_error("cannot lock the worker down (no_new_privs and the seccomp filter: %s); "
			  "refusing to serve unconfined. The kernel or a preloaded library refuses it: "
			  "run serve where seccomp is available, or with --seccomp off only to debug",
			  strerror(-lr));
		return IPC_EXIT_CONFIG;
	}
	log_debug("serving session %.8s…", s->id);

	for (;;) {
		struct ipc_msg m;
		int r = chan_recv(s->sock, &m, 0, NULL);
		if (r == -ESHUTDOWN)
			break;
		if (r == -EPROTO) {
			log_error("undecodable message from the master; exiting");
			_exit(1);
		}
		if (r != 0)
			continue;
		worker_dispatch(s, &m);
		ipc_msg_free(&m);
		pthread_mutex_lock(&s->mu);
		bool closing = s->state == WS_CLOSING;
		pthread_mutex_unlock(&s->mu);
		if (closing)
			break;
	}
	/* a call still running is cancelled in the sandbox, so that nothing the session started
	 * runs on (a kept sandbox is free at once); the master releases a local sandbox when we
	 * are gone, a claim is ours to end */
	call_stop_running(s, WORKER_STOP_CALL_WAIT_MS);
	sandbox_end(s);
	_exit(0);
}
