/*
 * ipc.h - the master <-> worker contract (Dovecot's master-interface.h in spirit).
 *
 * Transport: one nng pair1 socket per worker on an ipc:// path inside the master's 0700 runtime
 * directory; the master listens, the worker dials, and the master admits only the pid it forked.
 *
 * Every message is a msgpack array [version, type, seq, body] where body is a map with string
 * keys. Types come in request/answer pairs (IPC_REQ_x answered by IPC_ANS_x with the same seq)
 * plus notifications (IPC_NOTE_x). Each type has its own decoder: it rejects a missing or
 * mistyped key, an unknown key, trailing bytes and anything over IPC_MAX_MSG.
 *
 *   type              dir   body
 *   HELLO             w->m  pid:uint  version:str                 first message of a worker
 *   REQ_MCP           m->w  msg:bin  replay:bool                  one client JSON-RPC message
 *   ANS_MCP           w->m  msg:bin                               its answer; empty = none
 *   REQ_MCP_TOOBIG    m->w  head:bin tail:bin size:uint           a client line over the limit
 *   NOTE_MCP          w->m  msg:bin  rel:uint                     server->client message; rel =
 *                                                                 seq of the request it belongs to
 *   NOTE_ACCEPTED     w->m  id:bin                                a slow request (seq) started;
 *                                                                 id = its JSON-RPC id as JSON
 *   NOTE_SESSION      w->m  init:bin protocol:str                 initialize succeeded: the
 *                                                                 message to replay after a crash
 *   NOTE_STATE        w->m  state:str                             "idle" | "busy"
 *   REQ_SANDBOX       w->m  op:str name:str                       "spawn" | "release" a sandbox
 *   ANS_SANDBOX       m->w  ok:bool error:str socket:str name:str dir:str
 *   REQ_SHUTDOWN      m->w  reason:str                            end the session and exit
 *   NOTE_SANDBOX      m->w  name:str status:str                   the worker's sandbox ended
 *                                                                 by itself ("exited with 1")
 *   NOTE_ASSIGN       m->w  session:str user:str                  a pre-started worker is
 *                                                                 handed its session
 *   REQ_QUOTA         w->m  (empty)                               may this session claim a
 *   ANS_QUOTA         m->w  ok:bool error:str                     sandbox (per-user limit)?
 *   NOTE_CALL         w->m  tool:str kind:str build_ms:uint run_ms:uint cpu_user_ms:uint
 *                           cpu_sys_ms:uint max_rss_kb:uint bytes_in:uint bytes_out:uint
 *                                                                 one finished tool call, for
 *                                                                 metrics and accounting
 *   REQ_KUBE          w->m  refresh:bool                          the Kubernetes API server and
 *                                                                 current credentials, please;
 *                                                                 refresh: the last were refused
 *   ANS_KUBE          m->w  ok:bool error:str server:str ca:bin cert:bin key:bin token:str
 *                           insecure:bool sni:str namespace:str in_cluster:bool expires:uint
 *                                                                 from the kubeconfig (or the
 *                                                                 pod's service account), an
 *                                                                 exec plugin's output included;
 *                                                                 expires = unix seconds, 0 never
 *   NOTE_CLAIM        w->m  name:str keep:bool                    the worker holds this
 *                                                                 SandboxClaim ("" = none any
 *                                                                 more): the master deletes it
 *                                                                 if the worker dies holding it
 *                                                                 and keep is false
 */
#ifndef KG_IPC_H
#define KG_IPC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <msgpack.h>

#define IPC_VERSION 1
/* A client message may be up to MCP_MAX_MESSAGE; the envelope adds little. */
#define MCP_MAX_MESSAGE (4u * 1024 * 1024)
#define IPC_MAX_MSG (MCP_MAX_MESSAGE + 64u * 1024)
#define IPC_TOOBIG_KEEP (16u * 1024) /* head and tail kept of an oversized line */

enum ipc_type {
	IPC_HELLO = 1,
	IPC_REQ_MCP,
	IPC_ANS_MCP,
	IPC_REQ_MCP_TOOBIG,
	IPC_NOTE_MCP,
	IPC_NOTE_ACCEPTED,
	IPC_NOTE_SESSION,
	IPC_NOTE_STATE,
	IPC_REQ_SANDBOX,
	IPC_ANS_SANDBOX,
	IPC_REQ_SHUTDOWN,
	IPC_NOTE_SANDBOX,
	IPC_NOTE_ASSIGN,
	IPC_REQ_QUOTA,
	IPC_ANS_QUOTA,
	IPC_NOTE_CALL,
	IPC_REQ_KUBE,
	IPC_ANS_KUBE,
	IPC_NOTE_CLAIM,
	IPC_TYPE_MAX
};

/* A byte range pointing into the decoded message; not NUL-terminated unless noted. */
struct ipc_bytes {
	const char *ptr;
	size_t len;
};

struct ipc_hello { uint32_t pid; struct ipc_bytes version; };
struct ipc_mcp { struct ipc_bytes msg; bool replay; };
struct ipc_mcp_ans { struct ipc_bytes msg; };
struct ipc_mcp_toobig { struct ipc_bytes head, tail; uint64_t size; };
struct ipc_note_mcp { struct ipc_bytes msg; uint32_t rel; };
struct ipc_accepted { struct ipc_bytes id; };
struct ipc_session { struct ipc_bytes init, protocol; };
struct ipc_state { struct ipc_bytes state; };
struct ipc_sandbox_req { struct ipc_bytes op, name; };
struct ipc_sandbox_ans { bool ok; struct ipc_bytes error, socket, name, dir; };
struct ipc_shutdown { struct ipc_bytes reason; };
struct ipc_sandbox_note { struct ipc_bytes name, status; };
struct ipc_assign { struct ipc_bytes session, user; };
struct ipc_quota_ans { bool ok; struct ipc_bytes error; };
struct ipc_kube_req { bool refresh; };
struct ipc_claim_note { struct ipc_bytes name; bool keep; };
struct ipc_kube_ans {
	bool ok, insecure, in_cluster;
	struct ipc_bytes error, server, ca, cert, key, token, sni, namespace;
	uint64_t expires;
};
struct ipc_call {
	struct ipc_bytes tool, kind;
	uint64_t build_ms, run_ms, cpu_user_ms, cpu_sys_ms, max_rss_kb, bytes_in, bytes_out;
};

struct ipc_msg {
	uint32_t type;
	uint32_t seq;
	union {
		struct ipc_hello hello;
		struct ipc_mcp mcp;
		struct ipc_mcp_ans mcp_ans;
		struct ipc_mcp_toobig toobig;
		struct ipc_note_mcp note_mcp;
		struct ipc_accepted accepted;
		struct ipc_session session;
		struct ipc_state state;
		struct ipc_sandbox_req sandbox_req;
		struct ipc_sandbox_ans sandbox_ans;
		struct ipc_shutdown shutdown;
		struct ipc_sandbox_note sandbox_note;
		struct ipc_assign assign;
		struct ipc_quota_ans quota_ans;
		struct ipc_call call;
		struct ipc_kube_req kube_req;
		struct ipc_kube_ans kube_ans;
		struct ipc_claim_note claim_note;
	} u;
	msgpack_unpacked unp; /* the decoded tree; its strings point into raw */
	char *raw;            /* our copy of the message bytes */
};

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

/* Encoders: one per type. Each fills buf (initialised by the call; free with ipc_buf_free). */
void ipc_buf_free(struct ipc_buf *b);
int ipc_pack_hello(struct ipc_buf *b, uint32_t seq, uint32_t pid, const char *version);
int ipc_pack_req_mcp(struct ipc_buf *b, uint32_t seq, const void *msg, size_t len, bool replay);
int ipc_pack_ans_mcp(struct ipc_buf *b, uint32_t seq, const void *msg, size_t len);
int ipc_pack_req_mcp_toobig(struct ipc_buf *b, uint32_t seq, const void *head, size_t hlen,
			    const void *tail, size_t tlen, uint64_t size);
int ipc_pack_note_mcp(struct ipc_buf *b, uint32_t seq, uint32_t rel, const void *msg, size_t len);
int ipc_pack_note_accepted(struct ipc_buf *b, uint32_t seq, const void *id, size_t len);
int ipc_pack_note_session(struct ipc_buf *b, uint32_t seq, const void *init, size_t len,
			  const char *protocol);
int ipc_pack_note_state(struct ipc_buf *b, uint32_t seq, const char *state);
int ipc_pack_req_sandbox(struct ipc_buf *b, uint32_t seq, const char *op, const char *name);
int ipc_pack_ans_sandbox(struct ipc_buf *b, uint32_t seq, bool ok, const char *error,
			 const char *socket, const char *name, const char *dir);
int ipc_pack_req_shutdown(struct ipc_buf *b, uint32_t seq, const char *reason);
int ipc_pack_note_sandbox(struct ipc_buf *b, uint32_t seq, const char *name, const char *status);
int ipc_pack_note_assign(struct ipc_buf *b, uint32_t seq, const char *session, const char *user);
int ipc_pack_req_quota(struct ipc_buf *b, uint32_t seq);
int ipc_pack_ans_quota(struct ipc_buf *b, uint32_t seq, bool ok, const char *error);
int ipc_pack_req_kube(struct ipc_buf *b, uint32_t seq, bool refresh);
/* ipc_pack_ans_kube - a's byte ranges point at the caller's strings and PEM data */
int ipc_pack_ans_kube(struct ipc_buf *b, uint32_t seq, const struct ipc_kube_ans *a);
int ipc_pack_note_claim(struct ipc_buf *b, uint32_t seq, const char *name, bool keep);
int ipc_pack_note_call(struct ipc_buf *b, uint32_t seq, const struct ipc_call *c, const char *tool,
		       const char *kind);

#endif
