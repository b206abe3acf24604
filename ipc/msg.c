/*
 * msg.c - encode and decode the master <-> worker messages described in ipc.h.
 *
 * Both sides call these: the master for what it sends workers and what it reads from them, the
 * worker likewise. A worker can be compromised by the session it serves, so the master decodes
 * everything strictly: each type's decoder names the exact keys it accepts.
 */
#include "ipc/ipc.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static const char *const ipc_names[IPC_TYPE_MAX] = {
	[IPC_HELLO] = "HELLO",
	[IPC_REQ_MCP] = "REQ_MCP",
	[IPC_ANS_MCP] = "ANS_MCP",
	[IPC_REQ_MCP_TOOBIG] = "REQ_MCP_TOOBIG",
	[IPC_NOTE_MCP] = "NOTE_MCP",
	[IPC_NOTE_ACCEPTED] = "NOTE_ACCEPTED",
	[IPC_NOTE_SESSION] = "NOTE_SESSION",
	[IPC_NOTE_STATE] = "NOTE_STATE",
	[IPC_REQ_SANDBOX] = "REQ_SANDBOX",
	[IPC_ANS_SANDBOX] = "ANS_SANDBOX",
	[IPC_REQ_SHUTDOWN] = "REQ_SHUTDOWN",
	[IPC_NOTE_SANDBOX] = "NOTE_SANDBOX",
	[IPC_NOTE_ASSIGN] = "NOTE_ASSIGN",
	[IPC_REQ_QUOTA] = "REQ_QUOTA",
	[IPC_ANS_QUOTA] = "ANS_QUOTA",
	[IPC_NOTE_CALL] = "NOTE_CALL",
	[IPC_REQ_KUBE] = "REQ_KUBE",
	[IPC_ANS_KUBE] = "ANS_KUBE",
	[IPC_NOTE_CLAIM] = "NOTE_CLAIM",
};

/* ipc_type_name - printable name of a message type, for logs */
const char *ipc_type_name(uint32_t type)
{
	if (type > 0 && type < IPC_TYPE_MAX && ipc_names[type])
		return ipc_names[type];
	return "UNKNOWN";
}

/* ---- decoding ---- */

enum field_kind { F_UINT, F_BOOL, F_STR, F_BIN };

struct field {
	const char *key;
	enum field_kind kind;
	void *dst; /* uint64_t*, bool*, struct ipc_bytes* */
};

/* ipc_fields - match a body map against exactly the fields given, in any order */
static int ipc_fields(const msgpack_object_map *m, const struct field *f, size_t nf)
{
	unsigned seen = 0;
	if (m->size != nf)
		return -EPROTO;
	for (uint32_t i = 0; i < m->size; i++) {
		const msgpack_object *k = &m->ptr[i].key, *v = &m->ptr[i].val;
		if (k->type != MSGPACK_OBJECT_STR)
			return -EPROTO;
		size_t j;
		for (j = 0; j < nf; j++)
			if (strlen(f[j].key) == k->via.str.size &&
			    memcmp(f[j].key, k->via.str.ptr, k->via.str.size) == 0)
				break;
		if (j == nf || (seen & (1u << j)))
			return -EPROTO; /* unknown or duplicate key */
		seen |= 1u << j;
		switch (f[j].kind) {
		case F_UINT:
			if (v->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
				return -EPROTO;
			*(uint64_t *)f[j].dst = v->via.u64;
			break;
		case F_BOOL:
			if (v->type != MSGPACK_OBJECT_BOOLEAN)
				return -EPROTO;
			*(bool *)f[j].dst = v->via.boolean;
			break;
		case F_STR:
			if (v->type != MSGPACK_OBJECT_STR)
				return -EPROTO;
			((struct ipc_bytes *)f[j].dst)->ptr = v->via.str.ptr;
			((struct ipc_bytes *)f[j].dst)->len = v->via.str.size;
			break;
		case F_BIN:
			if (v->type != MSGPACK_OBJECT_BIN)
				return -EPROTO;
			((struct ipc_bytes *)f[j].dst)->ptr = v->via.bin.ptr;
			((struct ipc_bytes *)f[j].dst)->len = v->via.bin.size;
			break;
		}
	}
	return 0;
}

#define FIELDS(...) ((const struct field[]){ __VA_ARGS__ })
#define NFIELDS(...) (sizeof((const struct field[]){ __VA_ARGS__ }) / sizeof(struct field))
#define DECODE(m, ...) ipc_fields((m), FIELDS(__VA_ARGS__), NFIELDS(__VA_ARGS__))

/* dec_hello - HELLO: the worker says who it is */
static int dec_hello(const msgpack_object_map *m, struct ipc_msg *o)
{
	uint64_t pid = 0;
	int r = DECODE(m, { "pid", F_UINT, &pid }, { "version", F_STR, &o->u.hello.version });
	if (r == 0 && (pid == 0 || pid > INT32_MAX))
		r = -EPROTO;
	o->u.hello.pid = (uint32_t)pid;
	return r;
}

/* dec_req_mcp - REQ_MCP: one client message for the worker */
static int dec_req_mcp(const msgpack_object_map *m, struct ipc_msg *o)
{
	return DECODE(m, { "msg", F_BIN, &o->u.mcp.msg }, { "replay", F_BOOL, &o->u.mcp.replay });
}

/* dec_ans_mcp - ANS_MCP: the worker's answer to one REQ_MCP */
static int dec_ans_mcp(const msgpack_object_map *m, struct ipc_msg *o)
{
	return DECODE(m, { "msg", F_BIN, &o->u.mcp_ans.msg });
}

/* dec_req_mcp_toobig - REQ_MCP_TOOBIG: the ends of a line that was too long to pass on */
static int dec_req_mcp_toobig(const msgpack_object_map *m, struct ipc_msg *o)
{
	int r = DECODE(m, { "head", F_BIN, &o->u.toobig.head }, { "tail", F_BIN, &o->u.toobig.tail },
		       { "size", F_UINT, &o->u.toobig.size });
	if (r == 0 && (o->u.toobig.head.len > IPC_TOOBIG_KEEP || o->u.toobig.tail.len > IPC_TOOBIG_KEEP))
		r = -EPROTO;
	return r;
}

/* dec_note_mcp - NOTE_MCP: a message the server sends the client unasked */
static int dec_note_mcp(const msgpack_object_map *m, struct ipc_msg *o)
{
	uint64_t rel = 0;
	int r = DECODE(m, { "msg", F_BIN, &o->u.note_mcp.msg }, { "rel", F_UINT, &rel });
	if (r == 0 && rel > UINT32_MAX)
		r = -EPROTO;
	o->u.note_mcp.rel = (uint32_t)rel;
	return r;
}

/* dec_note_accepted - NOTE_ACCEPTED: a request the worker will answer later */
static int dec_note_accepted(const msgpack_object_map *m, struct ipc_msg *o)
{
	int r = DECODE(m, { "id", F_BIN, &o->u.accepted.id });
	if (r == 0 && (o->u.accepted.id.len == 0 || o->u.accepted.id.len > 1024))
		r = -EPROTO;
	return r;
}

/* dec_note_session - NOTE_SESSION: initialize succeeded; keep it for a replay */
static int dec_note_session(const msgpack_object_map *m, struct ipc_msg *o)
{
	return DECODE(m, { "init", F_BIN, &o->u.session.init },
		      { "protocol", F_STR, &o->u.session.protocol });
}

/* dec_note_state - NOTE_STATE: idle or busy */
static int dec_note_state(const msgpack_object_map *m, struct ipc_msg *o)
{
	return DECODE(m, { "state", F_STR, &o->u.state.state });
}

/* dec_req_sandbox - REQ_SANDBOX: spawn or release the worker's sandbox */
static int dec_req_sandbox(const msgpack_object_map *m, struct ipc_msg *o)
{
	return DECODE(m, { "op", F_STR, &o->u.sandbox_req.op }, { "name", F_STR, &o->u.sandbox_req.name });
}

/* dec_ans_sandbox - ANS_SANDBOX: where the sandbox's agent listens, or why there is none */
static int dec_ans_sandbox(const msgpack_object_map *m, struct ipc_msg *o)
{
	struct ipc_sandbox_ans *a = &o->u.sandbox_ans;
	return DECODE(m, { "ok", F_BOOL, &a->ok }, { "error", F_STR, &a->error },
		      { "socket", F_STR, &a->socket }, { "name", F_STR, &a->name },
		      { "dir", F_STR, &a->dir });
}

/* dec_req_shutdown - REQ_SHUTDOWN: end the session */
static int dec_req_shutdown(const msgpack_object_map *m, struct ipc_msg *o)
{
	return DECODE(m, { "reason", F_STR, &o->u.shutdown.reason });
}

/* dec_note_sandbox - NOTE_SANDBOX: the worker's sandbox ended by itself */
static int dec_note_sandbox(const msgpack_object_map *m, struct ipc_msg *o)
{
	return DECODE(m, { "name", F_STR, &o->u.sandbox_note.name },
		      { "status", F_STR, &o->u.sandbox_note.status });
}

/* dec_note_assign - NOTE_ASSIGN: a pre-started worker gets its session and user */
static int dec_note_assign(const msgpack_object_map *m, struct ipc_msg *o)
{
	int r = DECODE(m, { "session", F_STR, &o->u.assign.session }, { "user", F_STR, &o->u.assign.user });
	if (r == 0 && (o->u.assign.session.len == 0 || o->u.assign.session.len > 64 ||
		       o->u.assign.user.len > 256))
		r = -EPROTO;
	return r;
}

/* dec_req_quota - REQ_QUOTA: may this session claim a sandbox? */
static int dec_req_quota(const msgpack_object_map *m, struct ipc_msg *o)
{
	(void)o;
	return ipc_fields(m, NULL, 0);
}

/* dec_ans_quota - ANS_QUOTA: yes, or why not */
static int dec_ans_quota(const msgpack_object_map *m, struct ipc_msg *o)
{
	return DECODE(m, { "ok", F_BOOL, &o->u.quota_ans.ok }, { "error", F_STR, &o->u.quota_ans.error });
}

/* dec_note_call - NOTE_CALL: one finished tool call */
static int dec_note_call(const msgpack_object_map *m, struct ipc_msg *o)
{
	struct ipc_call *c = &o->u.call;
	int r = DECODE(m, { "tool", F_STR, &c->tool }, { "kind", F_STR, &c->kind },
		       { "build_ms", F_UINT, &c->build_ms }, { "run_ms", F_UINT, &c->run_ms },
		       { "cpu_user_ms", F_UINT, &c->cpu_user_ms }, { "cpu_sys_ms", F_UINT, &c->cpu_sys_ms },
		       { "max_rss_kb", F_UINT, &c->max_rss_kb }, { "bytes_in", F_UINT, &c->bytes_in },
		       { "bytes_out", F_UINT, &c->bytes_out });
	if (r == 0 && (c->tool.len > 64 || c->kind.len > 64))
		r = -EPROTO;
	return r;
}

/* dec_req_kube - REQ_KUBE: the Kubernetes access, fresh if the last credential was refused */
static int dec_req_kube(const msgpack_object_map *m, struct ipc_msg *o)
{
	return DECODE(m, { "refresh", F_BOOL, &o->u.kube_req.refresh });
}

/* dec_ans_kube - ANS_KUBE: the API server and credentials, or why there are none */
static int dec_ans_kube(const msgpack_object_map *m, struct ipc_msg *o)
{
	struct ipc_kube_ans *a = &o->u.kube_ans;
	int r = DECODE(m, { "ok", F_BOOL, &a->ok }, { "error", F_STR, &a->error },
		       { "server", F_STR, &a->server }, { "ca", F_BIN, &a->ca },
		       { "cert", F_BIN, &a->cert }, { "key", F_BIN, &a->key },
		       { "token", F_STR, &a->token }, { "insecure", F_BOOL, &a->insecure },
		       { "sni", F_STR, &a->sni }, { "namespace", F_STR, &a->namespace },
		       { "in_cluster", F_BOOL, &a->in_cluster }, { "expires", F_UINT, &a->expires });
	if (r == 0 && (a->server.len > 2048 || a->namespace.len > 253 || a->sni.len > 255 ||
		       a->token.len > 64 * 1024))
		r = -EPROTO;
	return r;
}

/* dec_note_claim - NOTE_CLAIM: the SandboxClaim the worker holds now */
static int dec_note_claim(const msgpack_object_map *m, struct ipc_msg *o)
{
	int r = DECODE(m, { "name", F_STR, &o->u.claim_note.name },
		       { "keep", F_BOOL, &o->u.claim_note.keep });
	if (r == 0 && o->u.claim_note.name.len > 253)
		r = -EPROTO;
	return r;
}

typedef int (*ipc_decoder)(const msgpack_object_map *, struct ipc_msg *);

static const ipc_decoder ipc_decoders[IPC_TYPE_MAX] = {
	[IPC_HELLO] = dec_hello,
	[IPC_REQ_MCP] = dec_req_mcp,
	[IPC_ANS_MCP] = dec_ans_mcp,
	[IPC_REQ_MCP_TOOBIG] = dec_req_mcp_toobig,
	[IPC_NOTE_MCP] = dec_note_mcp,
	[IPC_NOTE_ACCEPTED] = dec_note_accepted,
	[IPC_NOTE_SESSION] = dec_note_session,
	[IPC_NOTE_STATE] = dec_note_state,
	[IPC_REQ_SANDBOX] = dec_req_sandbox,
	[IPC_ANS_SANDBOX] = dec_ans_sandbox,
	[IPC_REQ_SHUTDOWN] = dec_req_shutdown,
	[IPC_NOTE_SANDBOX] = dec_note_sandbox,
	[IPC_NOTE_ASSIGN] = dec_note_assign,
	[IPC_REQ_QUOTA] = dec_req_quota,
	[IPC_ANS_QUOTA] = dec_ans_quota,
	[IPC_NOTE_CALL] = dec_note_call,
	[IPC_REQ_KUBE] = dec_req_kube,
	[IPC_ANS_KUBE] = dec_ans_kube,
	[IPC_NOTE_CLAIM] = dec_note_claim,
};

/* ipc_decode - check the envelope, then hand the body to its type's decoder */
/* ipc_be - a big-endian length of n bytes */
static uint64_t ipc_be(const unsigned char *p, int n)
{
	uint64_t v = 0;
	for (int i = 0; i < n; i++)
		v = v << 8 | p[i];
	return v;
}

/*
 * ipc_shape_ok - walk the msgpack headers before msgpack-c does: every length and every
 * container's count must fit in the bytes that are left (each element takes at least one).
 * msgpack-c allocates a container's elements from its declared count, so without this a
 * 5-byte map32 header could make it ask for 64 GiB.
 */
static bool ipc_shape_ok(const unsigned char *p, size_t len)
{
	size_t off = 0;
	uint64_t pending = 1; /* objects still to read */
	while (pending > 0) {
		if (off >= len || pending > len - off)
			return false;
		unsigned char b = p[off++];
		pending--;
		uint64_t count = 0, body = 0;
		int lenbytes = 0, fixed = 0;
		if (b <= 0x7f || b >= 0xe0 || b == 0xc0 || b == 0xc2 || b == 0xc3)
			continue;
		if (b >= 0x80 && b <= 0x8f)
			count = 2u * (b & 0x0f);
		else if (b >= 0x90 && b <= 0x9f)
			count = b & 0x0f;
		else if (b >= 0xa0 && b <= 0xbf)
			body = b & 0x1f;
		else
			switch (b) {
			case 0xc4: case 0xd9: lenbytes = 1; break;          /* bin8, str8 */
			case 0xc5: case 0xda: lenbytes = 2; break;          /* bin16, str16 */
			case 0xc6: case 0xdb: lenbytes = 4; break;          /* bin32, str32 */
			case 0xc7: lenbytes = 1; fixed = 1; break;          /* ext8: + type */
			case 0xc8: lenbytes = 2; fixed = 1; break;
			case 0xc9: lenbytes = 4; fixed = 1; break;
			case 0xca: fixed = 4; break;
			case 0xcb: fixed = 8; break;
			case 0xcc: case 0xd0: fixed = 1; break;
			case 0xcd: case 0xd1: fixed = 2; break;
			case 0xce: case 0xd2: fixed = 4; break;
			case 0xcf: case 0xd3: fixed = 8; break;
			case 0xd4: fixed = 2; break;                        /* fixext: type + data */
			case 0xd5: fixed = 3; break;
			case 0xd6: fixed = 5; break;
			case 0xd7: fixed = 9; break;
			case 0xd8: fixed = 17; break;
			case 0xdc: case 0xdd: case 0xde: case 0xdf: {       /* array16/32, map16/32 */
				int n = b == 0xdc || b == 0xde ? 2 : 4;
				if (len - off < (size_t)n)
					return false;
				count = ipc_be(p + off, n) * (b >= 0xde ? 2 : 1);
				off += (size_t)n;
				break;
			}
			default: return false;                               /* 0xc1: never used */
			}
		if (lenbytes) {
			if (len - off < (size_t)lenbytes)
				return false;
			body = ipc_be(p + off, lenbytes);
			off += (size_t)lenbytes;
		}
		body += (uint64_t)fixed;
		if (body > len - off)
			return false;
		off += (size_t)body;
		pending += count;
	}
	return true;
}

int ipc_decode(const void *buf, size_t len, struct ipc_msg *out)
{
	memset(out, 0, sizeof(*out));
	msgpack_unpacked_init(&out->unp);
	if (len > IPC_MAX_MSG)
		return -EMSGSIZE;
	/* msgpack-c leaves str and bin objects pointing into the input: keep our own copy so the
	 * decoded message outlives the caller's buffer (an nng message, freed at once) */
	if (!(out->raw = malloc(len ? len : 1)))
		return -ENOMEM;
	if (len)
		memcpy(out->raw, buf, len);
	size_t off = 0;
	if (!ipc_shape_ok((const unsigned char *)out->raw, len) ||
	    msgpack_unpack_next(&out->unp, out->raw, len, &off) != MSGPACK_UNPACK_SUCCESS || off != len)
		goto bad; /* truncated, malformed, or trailing bytes */
	const msgpack_object *env = &out->unp.data;
	if (env->type != MSGPACK_OBJECT_ARRAY || env->via.array.size != 4)
		goto bad;
	const msgpack_object *e = env->via.array.ptr;
	for (int i = 0; i < 3; i++)
		if (e[i].type != MSGPACK_OBJECT_POSITIVE_INTEGER || e[i].via.u64 > UINT32_MAX)
			goto bad;
	if (e[0].via.u64 != IPC_VERSION || e[3].type != MSGPACK_OBJECT_MAP)
		goto bad;
	out->type = (uint32_t)e[1].via.u64;
	out->seq = (uint32_t)e[2].via.u64;
	if (out->type == 0 || out->type >= IPC_TYPE_MAX || ipc_decoders[out->type](&e[3].via.map, out) != 0)
		goto bad;
	return 0;
bad:
	ipc_msg_free(out);
	return -EPROTO;
}

/* ipc_msg_free - release what ipc_decode allocated */
void ipc_msg_free(struct ipc_msg *m)
{
	msgpack_unpacked_destroy(&m->unp);
	msgpack_unpacked_init(&m->unp);
	free(m->raw);
	m->raw = NULL;
}

/* ipc_bytes_str - copy a decoded byte range into a C string, truncating */
void ipc_bytes_str(struct ipc_bytes b, char *dst, size_t cap)
{
	size_t n = b.len < cap - 1 ? b.len : cap - 1;
	if (n)
		memcpy(dst, b.ptr, n);
	dst[n] = '\0';
}

/* ---- encoding ---- */

/* pack_begin - envelope up to the body map with nkeys entries */
static msgpack_packer pack_begin(struct ipc_buf *b, uint32_t type, uint32_t seq, uint32_t nkeys)
{
	msgpack_packer pk;
	msgpack_sbuffer_init(&b->sb);
	msgpack_packer_init(&pk, &b->sb, msgpack_sbuffer_write);
	msgpack_pack_array(&pk, 4);
	msgpack_pack_uint32(&pk, IPC_VERSION);
	msgpack_pack_uint32(&pk, type);
	msgpack_pack_uint32(&pk, seq);
	msgpack_pack_map(&pk, nkeys);
	return pk;
}

static void pack_key(msgpack_packer *pk, const char *k)
{
	msgpack_pack_str_with_body(pk, k, strlen(k));
}

static void pack_str(msgpack_packer *pk, const char *k, const char *v)
{
	pack_key(pk, k);
	v = v ? v : "";
	msgpack_pack_str_with_body(pk, v, strlen(v));
}

static void pack_bin(msgpack_packer *pk, const char *k, const void *v, size_t len)
{
	pack_key(pk, k);
	msgpack_pack_bin_with_body(pk, len ? v : "", len);
}

/* pack_bin_str - a byte range as a msgpack str */
static void pack_bin_str(msgpack_packer *pk, const char *k, struct ipc_bytes v)
{
	pack_key(pk, k);
	msgpack_pack_str_with_body(pk, v.len ? v.ptr : "", v.len);
}

static void pack_bool(msgpack_packer *pk, const char *k, bool v)
{
	pack_key(pk, k);
	if (v)
		msgpack_pack_true(pk);
	else
		msgpack_pack_false(pk);
}

static void pack_uint(msgpack_packer *pk, const char *k, uint64_t v)
{
	pack_key(pk, k);
	msgpack_pack_uint64(pk, v);
}

/* pack_end - refuse to hand out a message the other side would reject as too large */
static int pack_end(struct ipc_buf *b)
{
	if (b->sb.size > IPC_MAX_MSG) {
		ipc_buf_free(b);
		return -EMSGSIZE;
	}
	return 0;
}

void ipc_buf_free(struct ipc_buf *b)
{
	msgpack_sbuffer_destroy(&b->sb);
	memset(&b->sb, 0, sizeof(b->sb));
}

int ipc_pack_hello(struct ipc_buf *b, uint32_t seq, uint32_t pid, const char *version)
{
	msgpack_packer pk = pack_begin(b, IPC_HELLO, seq, 2);
	pack_uint(&pk, "pid", pid);
	pack_str(&pk, "version", version);
	return pack_end(b);
}

int ipc_pack_req_mcp(struct ipc_buf *b, uint32_t seq, const void *msg, size_t len, bool replay)
{
	msgpack_packer pk = pack_begin(b, IPC_REQ_MCP, seq, 2);
	pack_bin(&pk, "msg", msg, len);
	pack_bool(&pk, "replay", replay);
	return pack_end(b);
}

int ipc_pack_ans_mcp(struct ipc_buf *b, uint32_t seq, const void *msg, size_t len)
{
	msgpack_packer pk = pack_begin(b, IPC_ANS_MCP, seq, 1);
	pack_bin(&pk, "msg", msg, len);
	return pack_end(b);
}

int ipc_pack_req_mcp_toobig(struct ipc_buf *b, uint32_t seq, const void *head, size_t hlen,
			    const void *tail, size_t tlen, uint64_t size)
{
	if (hlen > IPC_TOOBIG_KEEP || tlen > IPC_TOOBIG_KEEP)
		return -EINVAL;
	msgpack_packer pk = pack_begin(b, IPC_REQ_MCP_TOOBIG, seq, 3);
	pack_bin(&pk, "head", head, hlen);
	pack_bin(&pk, "tail", tail, tlen);
	pack_uint(&pk, "size", size);
	return pack_end(b);
}

int ipc_pack_note_mcp(struct ipc_buf *b, uint32_t seq, uint32_t rel, const void *msg, size_t len)
{
	msgpack_packer pk = pack_begin(b, IPC_NOTE_MCP, seq, 2);
	pack_bin(&pk, "msg", msg, len);
	pack_uint(&pk, "rel", rel);
	return pack_end(b);
}

int ipc_pack_note_accepted(struct ipc_buf *b, uint32_t seq, const void *id, size_t len)
{
	msgpack_packer pk = pack_begin(b, IPC_NOTE_ACCEPTED, seq, 1);
	pack_bin(&pk, "id", id, len);
	return pack_end(b);
}

int ipc_pack_note_session(struct ipc_buf *b, uint32_t seq, const void *init, size_t len,
			  const char *protocol)
{
	msgpack_packer pk = pack_begin(b, IPC_NOTE_SESSION, seq, 2);
	pack_bin(&pk, "init", init, len);
	pack_str(&pk, "protocol", protocol);
	return pack_end(b);
}

int ipc_pack_note_state(struct ipc_buf *b, uint32_t seq, const char *state)
{
	msgpack_packer pk = pack_begin(b, IPC_NOTE_STATE, seq, 1);
	pack_str(&pk, "state", state);
	return pack_end(b);
}

int ipc_pack_req_sandbox(struct ipc_buf *b, uint32_t seq, const char *op, const char *name)
{
	msgpack_packer pk = pack_begin(b, IPC_REQ_SANDBOX, seq, 2);
	pack_str(&pk, "op", op);
	pack_str(&pk, "name", name);
	return pack_end(b);
}

int ipc_pack_ans_sandbox(struct ipc_buf *b, uint32_t seq, bool ok, const char *error,
			 const char *socket, const char *name, const char *dir)
{
	msgpack_packer pk = pack_begin(b, IPC_ANS_SANDBOX, seq, 5);
	pack_bool(&pk, "ok", ok);
	pack_str(&pk, "error", error);
	pack_str(&pk, "socket", socket);
	pack_str(&pk, "name", name);
	pack_str(&pk, "dir", dir);
	return pack_end(b);
}

int ipc_pack_req_shutdown(struct ipc_buf *b, uint32_t seq, const char *reason)
{
	msgpack_packer pk = pack_begin(b, IPC_REQ_SHUTDOWN, seq, 1);
	pack_str(&pk, "reason", reason);
	return pack_end(b);
}

int ipc_pack_note_sandbox(struct ipc_buf *b, uint32_t seq, const char *name, const char *status)
{
	msgpack_packer pk = pack_begin(b, IPC_NOTE_SANDBOX, seq, 2);
	pack_str(&pk, "name", name);
	pack_str(&pk, "status", status);
	return pack_end(b);
}

int ipc_pack_note_assign(struct ipc_buf *b, uint32_t seq, const char *session, const char *user)
{
	msgpack_packer pk = pack_begin(b, IPC_NOTE_ASSIGN, seq, 2);
	pack_str(&pk, "session", session);
	pack_str(&pk, "user", user);
	return pack_end(b);
}

int ipc_pack_req_quota(struct ipc_buf *b, uint32_t seq)
{
	pack_begin(b, IPC_REQ_QUOTA, seq, 0);
	return pack_end(b);
}

int ipc_pack_ans_quota(struct ipc_buf *b, uint32_t seq, bool ok, const char *error)
{
	msgpack_packer pk = pack_begin(b, IPC_ANS_QUOTA, seq, 2);
	pack_bool(&pk, "ok", ok);
	pack_str(&pk, "error", error);
	return pack_end(b);
}

int ipc_pack_note_call(struct ipc_buf *b, uint32_t seq, const struct ipc_call *c, const char *tool,
		       const char *kind)
{
	msgpack_packer pk = pack_begin(b, IPC_NOTE_CALL, seq, 9);
	pack_str(&pk, "tool", tool);
	pack_str(&pk, "kind", kind);
	pack_uint(&pk, "build_ms", c->build_ms);
	pack_uint(&pk, "run_ms", c->run_ms);
	pack_uint(&pk, "cpu_user_ms", c->cpu_user_ms);
	pack_uint(&pk, "cpu_sys_ms", c->cpu_sys_ms);
	pack_uint(&pk, "max_rss_kb", c->max_rss_kb);
	pack_uint(&pk, "bytes_in", c->bytes_in);
	pack_uint(&pk, "bytes_out", c->bytes_out);
	return pack_end(b);
}

int ipc_pack_req_kube(struct ipc_buf *b, uint32_t seq, bool refresh)
{
	msgpack_packer pk = pack_begin(b, IPC_REQ_KUBE, seq, 1);
	pack_bool(&pk, "refresh", refresh);
	return pack_end(b);
}

int ipc_pack_ans_kube(struct ipc_buf *b, uint32_t seq, const struct ipc_kube_ans *a)
{
	msgpack_packer pk = pack_begin(b, IPC_ANS_KUBE, seq, 12);
	pack_bool(&pk, "ok", a->ok);
	pack_bin_str(&pk, "error", a->error);
	pack_bin_str(&pk, "server", a->server);
	pack_bin(&pk, "ca", a->ca.ptr, a->ca.len);
	pack_bin(&pk, "cert", a->cert.ptr, a->cert.len);
	pack_bin(&pk, "key", a->key.ptr, a->key.len);
	pack_bin_str(&pk, "token", a->token);
	pack_bool(&pk, "insecure", a->insecure);
	pack_bin_str(&pk, "sni", a->sni);
	pack_bin_str(&pk, "namespace", a->namespace);
	pack_bool(&pk, "in_cluster", a->in_cluster);
	pack_uint(&pk, "expires", a->expires);
	return pack_end(b);
}

int ipc_pack_note_claim(struct ipc_buf *b, uint32_t seq, const char *name, bool keep)
{
	msgpack_packer pk = pack_begin(b, IPC_NOTE_CLAIM, seq, 2);
	pack_str(&pk, "name", name);
	pack_bool(&pk, "keep", keep);
	return pack_end(b);
}
