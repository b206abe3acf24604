/*
 * msg.c - encode and decode the master <-> worker messages described in ipc.h.
 *
 * Both sides call these: the master for what it sends workers and what it reads from them, the
 * worker likewise. A worker can be compromised by the session it serves, so the master decodes
 * everything strictly: the table row of each type names the exact keys, kinds and ranges it
 * accepts, and the encoders refuse what the decoder would.
 */
#include "ipc/ipc.h"

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* ---- the table as data ---- */

#define IPC_X_FDESC(S, kind, name, lo, hi) { #name, IPC_K_##kind, offsetof(S, name), lo, hi },
#define IPC_X_FIELDS(T, fn, member, dir, ph, fl) \
	static const struct ipc_field ipc_fields_##fn[] = { IPC_BODY_##T(IPC_X_FDESC, struct ipc_##member) };
IPC_MESSAGES(IPC_X_FIELDS)
#undef IPC_X_FIELDS

static const struct ipc_contract ipc_table[IPC_TYPE_MAX] = {
#define IPC_X_ROW(T, fn, member, d, ph, fl)                                                      \
	[IPC_##T] = { #T, d, ph, fl, ipc_fields_##fn,                                            \
		      sizeof(ipc_fields_##fn) / sizeof(struct ipc_field) },
	IPC_MESSAGES(IPC_X_ROW)
#undef IPC_X_ROW
};

/* ipc_contract_of - the row of a type, or NULL for an unknown type */
const struct ipc_contract *ipc_contract_of(uint32_t type)
{
	if (type == 0 || type >= IPC_TYPE_MAX)
		return NULL;
	return &ipc_table[type];
}

/* ipc_permitted - may this message, in this direction, arrive in this phase? */
bool ipc_permitted(uint32_t type, unsigned dir, unsigned phase)
{
	const struct ipc_contract *c = ipc_contract_of(type);
	return c && c->dir == dir && (c->phases & phase) != 0;
}

/* ipc_phase_name - printable name of one phase bit, for logs */
const char *ipc_phase_name(unsigned phase)
{
	switch (phase) {
	case IPC_PH_STARTING: return "starting";
	case IPC_PH_IDLE: return "idle";
	case IPC_PH_SESSION: return "session";
	case IPC_PH_ENDING: return "ending";
	default: return "unknown";
	}
}

/* ipc_type_name - printable name of a message type, for logs */
const char *ipc_type_name(uint32_t type)
{
	const struct ipc_contract *c = ipc_contract_of(type);
	return c ? c->name : "UNKNOWN";
}

/* ---- decoding ---- */

/* ipc_body - match a body map against exactly the type's fields, in any order, each in range */
static int ipc_body(const msgpack_object_map *m, const struct ipc_contract *c, void *body)
{
	uint64_t seen = 0;
	if (m->size != c->nfields)
		return -EPROTO;
	for (uint32_t i = 0; i < m->size; i++) {
		const msgpack_object *k = &m->ptr[i].key, *v = &m->ptr[i].val;
		if (k->type != MSGPACK_OBJECT_STR)
			return -EPROTO;
		size_t j;
		for (j = 0; j < c->nfields; j++)
			if (strlen(c->fields[j].key) == k->via.str.size &&
			    memcmp(c->fields[j].key, k->via.str.ptr, k->via.str.size) == 0)
				break;
		if (j == c->nfields || (seen & (1ull << j)))
			return -EPROTO; /* unknown or duplicate key */
		seen |= 1ull << j;
		const struct ipc_field *f = &c->fields[j];
		void *dst = (char *)body + f->off;
		uint64_t n;
		switch (f->kind) {
		case IPC_K_UINT:
			if (v->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
				return -EPROTO;
			n = v->via.u64;
			*(uint64_t *)dst = n;
			break;
		case IPC_K_BOOL:
			if (v->type != MSGPACK_OBJECT_BOOLEAN)
				return -EPROTO;
			*(bool *)dst = v->via.boolean;
			n = v->via.boolean;
			break;
		case IPC_K_STR:
			if (v->type != MSGPACK_OBJECT_STR)
				return -EPROTO;
			((struct ipc_bytes *)dst)->ptr = v->via.str.ptr;
			n = ((struct ipc_bytes *)dst)->len = v->via.str.size;
			break;
		case IPC_K_BIN:
			if (v->type != MSGPACK_OBJECT_BIN)
				return -EPROTO;
			((struct ipc_bytes *)dst)->ptr = v->via.bin.ptr;
			n = ((struct ipc_bytes *)dst)->len = v->via.bin.size;
			break;
		default:
			return -EPROTO;
		}
		if (n < f->min || n > f->max)
			return -EPROTO;
	}
	return 0;
}

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

/* ipc_decode - check the envelope, then the body against its type's row */
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
	const struct ipc_contract *c = ipc_contract_of(out->type);
	if (!c || ipc_body(&e[3].via.map, c, &out->u) != 0)
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

/* ipc_body_in_range - see ipc.h */
bool ipc_body_in_range(const struct ipc_contract *c, const void *body)
{
	for (size_t j = 0; j < c->nfields; j++) {
		const struct ipc_field *f = &c->fields[j];
		const void *src = (const char *)body + f->off;
		uint64_t n = f->kind == IPC_K_UINT ? *(const uint64_t *)src
			   : f->kind == IPC_K_BOOL ? *(const bool *)src
						   : ((const struct ipc_bytes *)src)->len;
		if (n < f->min || n > f->max)
			return false;
	}
	return true;
}

/* ipc_pack - encode a body struct by its type's row; what the decoder would refuse, we refuse */
int ipc_pack(struct ipc_buf *b, uint32_t type, uint32_t seq, const void *body)
{
	const struct ipc_contract *c = ipc_contract_of(type);
	memset(&b->sb, 0, sizeof(b->sb));
	if (!c || !ipc_body_in_range(c, body))
		return -EINVAL;
	msgpack_packer pk = pack_begin(b, type, seq, (uint32_t)c->nfields);
	for (size_t j = 0; j < c->nfields; j++) {
		const struct ipc_field *f = &c->fields[j];
		const void *src = (const char *)body + f->off;
		const struct ipc_bytes *v = src;
		pack_key(&pk, f->key);
		switch (f->kind) {
		case IPC_K_UINT:
			msgpack_pack_uint64(&pk, *(const uint64_t *)src);
			break;
		case IPC_K_BOOL:
			if (*(const bool *)src)
				msgpack_pack_true(&pk);
			else
				msgpack_pack_false(&pk);
			break;
		case IPC_K_STR:
			msgpack_pack_str_with_body(&pk, v->len ? v->ptr : "", v->len);
			break;
		case IPC_K_BIN:
			msgpack_pack_bin_with_body(&pk, v->len ? v->ptr : "", v->len);
			break;
		}
	}
	return pack_end(b);
}

/* ipc_str - a C string as a byte range (NULL = "") */
static struct ipc_bytes ipc_str(const char *s)
{
	return (struct ipc_bytes){ s ? s : "", s ? strlen(s) : 0 };
}

/* the per-type encoders: arguments into the body struct, then ipc_pack */
#define IPC_INIT_UINT(n) .n = n,
#define IPC_INIT_BOOL(n) .n = n,
#define IPC_INIT_STR(n) .n = ipc_str(n),
#define IPC_INIT_BIN(n) .n = { n, n##_len },
#define IPC_X_INIT(S, kind, name, lo, hi) IPC_INIT_##kind(name)
#define IPC_X_ENCODER(T, fn, member, dir, ph, fl)                                                \
	int ipc_pack_##fn(struct ipc_buf *b, uint32_t seq IPC_BODY_##T(IPC_X_PARAM, _))         \
	{                                                                                        \
		struct ipc_##member body = { IPC_BODY_##T(IPC_X_INIT, _) };                      \
		return ipc_pack(b, IPC_##T, seq, &body);                                         \
	}
IPC_MESSAGES(IPC_X_ENCODER)
#undef IPC_X_ENCODER
