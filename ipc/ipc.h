/*
 * ipc.h - the master <-> worker contract (Dovecot's master-interface.h, OpenSSH's monitor
 * tables): every message type once, in IPC_MESSAGES below. The enum, the names, the body
 * structs, the encoders (ipc_pack_<name>) and the strict decoders (ipc_decode) are all generated
 * from that table; the master's dispatch (master/monitor.c) and the worker's (worker/main.c)
 * take the direction, the phases and the flags from it. docs/architecture.md explains it.
 *
 * Transport: one nng pair1 socket per worker on an ipc:// path inside the master's runtime
 * directory (0700, or 0711 when workers have identities of their own; the socket is 0600 and
 * its worker's); the master listens, the worker dials, and the master admits only the pid it
 * forked.
 *
 * Every message is a msgpack array [version, type, seq, body] where body is a map with string
 * keys. Types come in request/answer pairs (IPC_REQ_x answered by IPC_ANS_x with the same seq)
 * plus notifications (IPC_NOTE_x). A decoder rejects a missing, duplicate, unknown or mistyped
 * key, a value outside the field's range (for str and bin: its length), trailing bytes and
 * anything over IPC_MAX_MSG.
 *
 * Phases (the same on both sides; each side keeps its own view of the pair's phase):
 *   STARTING  the worker was started and has not said HELLO
 *   IDLE      HELLO said, no session yet (a pre-started worker of serve --http)
 *   SESSION   serving its one session (stdio workers enter it with HELLO; pool workers with
 *             NOTE_ASSIGN, which the master counts from the moment it picks the worker)
 *   ENDING    REQ_SHUTDOWN sent: the worker winds down (deletes its claim) and exits
 * A message whose phases column does not include the receiver's current phase ends the sender
 * (the master kills such a worker; a worker exits). Flags: ONCE - at most once per worker;
 * ANSWER - only with the seq of a request of the other side that is still waiting for it.
 */
#ifndef KG_IPC_H
#define KG_IPC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <msgpack.h>

#define IPC_VERSION 1
/* A worker's exit status: 0 a normal end, 1 a handled fatal error, IPC_EXIT_CONFIG "this
 * machine's or this server's configuration does not let a worker run" (it could not lock itself
 * down, say): the master stops starting workers and says why. Anything else is a crash.
 * 78 is EX_CONFIG of sysexits.h. */
#define IPC_EXIT_CONFIG 78
/* A client message may be up to MCP_MAX_MESSAGE; the envelope adds little. */
#define MCP_MAX_MESSAGE (4u * 1024 * 1024)
#define IPC_MAX_MSG (MCP_MAX_MESSAGE + 64u * 1024)
#define IPC_TOOBIG_KEEP (16u * 1024) /* head and tail kept of an oversized line */
#define IPC_TOKEN_SCOPES_MAX 1200  /* REQ_TOKEN's comma-separated scopes */
#define IPC_TOKEN_MAX 8192         /* ANS_TOKEN's access token */

/*
 * The contract. One row per message:
 *   X(TYPE, fn, member, direction, phases, flags)
 * TYPE names IPC_TYPE; fn names the encoder ipc_pack_<fn>; member names the body, both the
 * union member ipc_msg.u.<member> and its type struct ipc_<member>, whose fields are listed in
 * IPC_BODY_<TYPE> as F(S, kind, name, min, max): kind UINT (uint64_t, value in [min,max]),
 * BOOL, STR or BIN (struct ipc_bytes, length in [min,max]). The encoder takes the fields in
 * that order (a BIN field as pointer and length). Adding a message: a row here, its body below,
 * its answer in master/monitor.c or its handler in worker/main.c, and its caller.
 *
 * What each message means:
 *   HELLO            the worker's first message: its pid and version
 *   REQ_MCP          one client JSON-RPC message (replay: the initialize replayed after a crash)
 *   ANS_MCP          its answer; empty = none (a notification)
 *   REQ_MCP_TOOBIG   the ends of a client line over the limit: the worker answers with an error
 *   NOTE_MCP         a server->client message; rel = seq of the REQ_MCP it belongs to
 *   NOTE_ACCEPTED    a slow request (seq) started; id = its JSON-RPC id as JSON
 *   NOTE_SESSION     initialize succeeded: the message to replay after a crash
 *   NOTE_STATE       "idle" | "busy"
 *   REQ_SANDBOX      op "spawn" | "release" the worker's sandbox; name must be "" (the master
 *                    names sandboxes and SandboxClaims). A second spawn replaces the sandbox
 *                    the worker has (it died or could not be used); one at a time: a second
 *                    while a local sandbox it asked for is still starting ends the worker
 *                    (master/monitor.c). On the Kubernetes backend
 *                    the master claims, watches, renews and deletes the SandboxClaim itself
 *                    (master/sandbox_kube.c); the worker never talks to the API server.
 *   ANS_SANDBOX      where its agent listens (socket: the local agent's, or on Kubernetes the
 *                    master's relay to that claim's pod only), the sandbox's or claim's name,
 *                    or why there is none
 *   REQ_SHUTDOWN     end the session and exit
 *   NOTE_SANDBOX     the worker's sandbox ended by itself ("exited with status 1")
 *   NOTE_ASSIGN      a pre-started worker is handed its session and user
 *   REQ_QUOTA        may this session claim a sandbox (the per-user limit)?
 *   ANS_QUOTA        yes, or why not
 *   NOTE_CALL        one finished tool call, for metrics and accounting
 *   REQ_TOKEN        --credentials user: an access token of the session's signed-in user for
 *                    these scopes (comma-separated). The worker names no user: the master
 *                    answers for the session it assigned, from the Google grant it keeps
 *                    (master/usertoken.c), within a rate bound
 *   ANS_TOKEN        the access token and its remaining seconds, or why not (status 403: sign
 *                    in again or a scope not granted; 503: try later); never a refresh token
 *   REQ_ADC          the text of the Application Default Credentials file, which the worker's
 *                    own identity cannot read (the operator's file; credential modes that use
 *                    one only)
 *   ANS_ADC          the text, or why there is none (absent: no file at all)
 */
#define IPC_W2M 1 /* worker -> master */
#define IPC_M2W 2 /* master -> worker */

#define IPC_PH_STARTING 0x1u
#define IPC_PH_IDLE 0x2u
#define IPC_PH_SESSION 0x4u
#define IPC_PH_ENDING 0x8u
#define IPC_PH_LIVE (IPC_PH_IDLE | IPC_PH_SESSION)
#define IPC_PH_SERVING (IPC_PH_SESSION | IPC_PH_ENDING)

#define IPC_ONCE 0x1u
#define IPC_ANSWER 0x2u

/* TYPE            fn               member        dir      phases                        flags */
#define IPC_MESSAGES(X)                                                                          \
	X(HELLO,          hello,           hello,        IPC_W2M, IPC_PH_STARTING,              IPC_ONCE)   \
	X(REQ_MCP,        req_mcp,         mcp,          IPC_M2W, IPC_PH_SESSION,               0)          \
	X(ANS_MCP,        ans_mcp,         mcp_ans,      IPC_W2M, IPC_PH_SERVING,               IPC_ANSWER) \
	X(REQ_MCP_TOOBIG, req_mcp_toobig,  toobig,       IPC_M2W, IPC_PH_SESSION,               0)          \
	X(NOTE_MCP,       note_mcp,        note_mcp,     IPC_W2M, IPC_PH_SERVING,               0)          \
	X(NOTE_ACCEPTED,  note_accepted,   accepted,     IPC_W2M, IPC_PH_SERVING,               IPC_ANSWER) \
	X(NOTE_SESSION,   note_session,    session,      IPC_W2M, IPC_PH_SESSION,               IPC_ONCE)   \
	X(NOTE_STATE,     note_state,      state,        IPC_W2M, IPC_PH_SERVING,               0)          \
	X(REQ_SANDBOX,    req_sandbox,     sandbox_req,  IPC_W2M, IPC_PH_LIVE | IPC_PH_ENDING,  0)          \
	X(ANS_SANDBOX,    ans_sandbox,     sandbox_ans,  IPC_M2W, IPC_PH_LIVE | IPC_PH_ENDING,  IPC_ANSWER) \
	X(REQ_SHUTDOWN,   req_shutdown,    shutdown,     IPC_M2W, IPC_PH_LIVE,                  IPC_ONCE)   \
	X(NOTE_SANDBOX,   note_sandbox,    sandbox_note, IPC_M2W, IPC_PH_LIVE,                  0)          \
	X(NOTE_ASSIGN,    note_assign,     assign,       IPC_M2W, IPC_PH_IDLE,                  IPC_ONCE)   \
	X(REQ_QUOTA,      req_quota,       quota_req,    IPC_W2M, IPC_PH_SERVING,               0)          \
	X(ANS_QUOTA,      ans_quota,       quota_ans,    IPC_M2W, IPC_PH_SESSION,               IPC_ANSWER) \
	X(NOTE_CALL,      note_call,       call,         IPC_W2M, IPC_PH_SERVING,               0)          \
	X(REQ_TOKEN,      req_token,       token_req,    IPC_W2M, IPC_PH_SERVING,               0)          \
	X(ANS_TOKEN,      ans_token,       token_ans,    IPC_M2W, IPC_PH_SESSION | IPC_PH_ENDING, IPC_ANSWER) \
	X(REQ_ADC,        req_adc,         adc_req,      IPC_W2M, IPC_PH_SERVING,               0)          \
	X(ANS_ADC,        ans_adc,         adc_ans,      IPC_M2W, IPC_PH_SERVING,               IPC_ANSWER)

/* The bodies: F(S, kind, name, min, max). */
#define IPC_BODY_HELLO(F, S) F(S, UINT, pid, 1, INT32_MAX) F(S, STR, version, 0, 64)
#define IPC_BODY_REQ_MCP(F, S) F(S, BIN, msg, 0, MCP_MAX_MESSAGE) F(S, BOOL, replay, 0, 1)
#define IPC_BODY_ANS_MCP(F, S) F(S, BIN, msg, 0, MCP_MAX_MESSAGE)
#define IPC_BODY_REQ_MCP_TOOBIG(F, S)                                                             \
	F(S, BIN, head, 0, IPC_TOOBIG_KEEP) F(S, BIN, tail, 0, IPC_TOOBIG_KEEP)                   \
	F(S, UINT, size, 0, UINT64_MAX)
#define IPC_BODY_NOTE_MCP(F, S) F(S, UINT, rel, 0, UINT32_MAX) F(S, BIN, msg, 0, MCP_MAX_MESSAGE)
#define IPC_BODY_NOTE_ACCEPTED(F, S) F(S, BIN, id, 1, 1024)
#define IPC_BODY_NOTE_SESSION(F, S) F(S, BIN, init, 0, MCP_MAX_MESSAGE) F(S, STR, protocol, 0, 32)
#define IPC_BODY_NOTE_STATE(F, S) F(S, STR, state, 0, 16)
#define IPC_BODY_REQ_SANDBOX(F, S) F(S, STR, op, 0, 16) F(S, STR, name, 0, 63)
#define IPC_BODY_ANS_SANDBOX(F, S)                                                                \
	F(S, BOOL, ok, 0, 1) F(S, STR, error, 0, 1024) F(S, STR, socket, 0, 599)                  \
	F(S, STR, name, 0, 253) F(S, STR, dir, 0, 511)
#define IPC_BODY_REQ_SHUTDOWN(F, S) F(S, STR, reason, 0, 256)
#define IPC_BODY_NOTE_SANDBOX(F, S) F(S, STR, name, 0, 63) F(S, STR, status, 0, 256)
#define IPC_BODY_NOTE_ASSIGN(F, S) F(S, STR, session, 1, 64) F(S, STR, user, 0, 256)
#define IPC_BODY_REQ_QUOTA(F, S)
#define IPC_BODY_ANS_QUOTA(F, S) F(S, BOOL, ok, 0, 1) F(S, STR, error, 0, 1024)
#define IPC_BODY_NOTE_CALL(F, S)                                                                  \
	F(S, STR, tool, 0, 64) F(S, STR, kind, 0, 64) F(S, UINT, build_ms, 0, UINT64_MAX)         \
	F(S, UINT, run_ms, 0, UINT64_MAX) F(S, UINT, cpu_user_ms, 0, UINT64_MAX)                  \
	F(S, UINT, cpu_sys_ms, 0, UINT64_MAX) F(S, UINT, max_rss_kb, 0, UINT64_MAX)               \
	F(S, UINT, bytes_in, 0, UINT64_MAX) F(S, UINT, bytes_out, 0, UINT64_MAX)
#define IPC_BODY_REQ_TOKEN(F, S) F(S, STR, scopes, 1, IPC_TOKEN_SCOPES_MAX)
#define IPC_BODY_ANS_TOKEN(F, S)                                                                  \
	F(S, BOOL, ok, 0, 1) F(S, STR, error, 0, 1024) F(S, UINT, status, 0, 599)                 \
	F(S, STR, token, 0, IPC_TOKEN_MAX) F(S, UINT, expires_in, 0, 86400)
#define IPC_BODY_REQ_ADC(F, S)
#define IPC_BODY_ANS_ADC(F, S)                                                                    \
	F(S, BOOL, ok, 0, 1) F(S, BOOL, absent, 0, 1) F(S, STR, error, 0, 1024)                   \
	F(S, BIN, text, 0, 64 * 1024)

enum ipc_type {
	IPC_TYPE_NONE = 0,
#define IPC_X_ENUM(T, fn, member, dir, ph, fl) IPC_##T,
	IPC_MESSAGES(IPC_X_ENUM)
#undef IPC_X_ENUM
	IPC_TYPE_MAX
};

/* A byte range pointing into the decoded message; not NUL-terminated unless noted. */
struct ipc_bytes {
	const char *ptr;
	size_t len;
};

/* the body structs */
#define IPC_CTYPE_UINT uint64_t
#define IPC_CTYPE_BOOL bool
#define IPC_CTYPE_STR struct ipc_bytes
#define IPC_CTYPE_BIN struct ipc_bytes
#define IPC_X_MEMBER(S, kind, name, lo, hi) IPC_CTYPE_##kind name;
#define IPC_X_STRUCT(T, fn, member, dir, ph, fl) struct ipc_##member { IPC_BODY_##T(IPC_X_MEMBER, _) };
IPC_MESSAGES(IPC_X_STRUCT)
#undef IPC_X_STRUCT

struct ipc_msg {
	uint32_t type;
	uint32_t seq;
	union {
#define IPC_X_UNION(T, fn, member, dir, ph, fl) struct ipc_##member member;
		IPC_MESSAGES(IPC_X_UNION)
#undef IPC_X_UNION
	} u;
	msgpack_unpacked unp; /* the decoded tree; its strings point into raw */
	char *raw;            /* our copy of the message bytes */
};

/* The table as data, for the dispatchers and the decoder. */
enum ipc_kind { IPC_K_UINT, IPC_K_BOOL, IPC_K_STR, IPC_K_BIN };
struct ipc_field {
	const char *key;
	enum ipc_kind kind;
	size_t off;            /* in the body struct */
	uint64_t min, max;
};
struct ipc_contract {
	const char *name;      /* "REQ_SANDBOX" */
	unsigned dir, phases, flags;
	const struct ipc_field *fields;
	size_t nfields;
};
/* ipc_contract_of - the row of a type, or NULL for an unknown type */
const struct ipc_contract *ipc_contract_of(uint32_t type);
/* ipc_body_in_range - is every field of a body struct within its row's bounds (a number's
 * value, a byte string's length)? What ipc_pack refuses to send otherwise */
bool ipc_body_in_range(const struct ipc_contract *c, const void *body);
/* ipc_permitted - may `type`, sent in direction dir, arrive in phase (one IPC_PH_ bit)? */
bool ipc_permitted(uint32_t type, unsigned dir, unsigned phase);
const char *ipc_phase_name(unsigned phase);

/* Growable output buffer for one encoded message. */
struct ipc_buf {
	msgpack_sbuffer sb;
};

const char *ipc_type_name(uint32_t type);

/* ipc_decode - envelope + the type's decoder. 0, or -EMSGSIZE, -EPROTO (malformed, wrong
 * version, trailing bytes, bad body). On success call ipc_msg_free. */
int ipc_decode(const void *buf, size_t len, struct ipc_msg *out);
void ipc_msg_free(struct ipc_msg *m);
/* Copy a byte range into a NUL-terminated string (truncating to cap-1). */
void ipc_bytes_str(struct ipc_bytes b, char *dst, size_t cap);

/* Encoders: one per type, generated from the table. Each fills b (initialised by the call; free
 * with ipc_buf_free) and refuses (-EMSGSIZE, -EINVAL) what the other side's decoder would reject.
 * A STR argument is a C string (NULL = ""); a BIN argument is a pointer and a length. */
void ipc_buf_free(struct ipc_buf *b);
/* ipc_pack - the same from a filled body struct (its byte ranges point at the caller's data) */
int ipc_pack(struct ipc_buf *b, uint32_t type, uint32_t seq, const void *body);
#define IPC_PARAM_UINT(n) , uint64_t n
#define IPC_PARAM_BOOL(n) , bool n
#define IPC_PARAM_STR(n) , const char *n
#define IPC_PARAM_BIN(n) , const void *n, size_t n##_len
#define IPC_X_PARAM(S, kind, name, lo, hi) IPC_PARAM_##kind(name)
#define IPC_X_PROTO(T, fn, member, dir, ph, fl) \
	int ipc_pack_##fn(struct ipc_buf *b, uint32_t seq IPC_BODY_##T(IPC_X_PARAM, _));
IPC_MESSAGES(IPC_X_PROTO)
#undef IPC_X_PROTO

#endif
