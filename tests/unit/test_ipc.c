/*
 * test_ipc.c - the master <-> worker codec: round trips and every way a message can be wrong.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ipc/ipc.h"

static void test_roundtrip_hello(void **st)
{
	(void)st;
	struct ipc_buf b;
	struct ipc_msg m;
	assert_int_equal(ipc_pack_hello(&b, 7, 4242, "v1"), 0);
	assert_int_equal(ipc_decode(b.sb.data, b.sb.size, &m), 0);
	assert_int_equal(m.type, IPC_HELLO);
	assert_int_equal(m.seq, 7);
	assert_int_equal(m.u.hello.pid, 4242);
	assert_int_equal(m.u.hello.version.len, 2);
	assert_memory_equal(m.u.hello.version.ptr, "v1", 2);
	ipc_msg_free(&m);
	ipc_buf_free(&b);
}

static void test_roundtrip_mcp(void **st)
{
	(void)st;
	struct ipc_buf b;
	struct ipc_msg m;
	const char msg[] = "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}";
	assert_int_equal(ipc_pack_req_mcp(&b, 1, msg, strlen(msg), true), 0);
	assert_int_equal(ipc_decode(b.sb.data, b.sb.size, &m), 0);
	assert_int_equal(m.type, IPC_REQ_MCP);
	assert_true(m.u.mcp.replay);
	assert_int_equal(m.u.mcp.msg.len, strlen(msg));
	assert_memory_equal(m.u.mcp.msg.ptr, msg, strlen(msg));
	ipc_msg_free(&m);
	ipc_buf_free(&b);

	/* an empty answer is legal: "nothing to send" */
	assert_int_equal(ipc_pack_ans_mcp(&b, 9, "", 0), 0);
	assert_int_equal(ipc_decode(b.sb.data, b.sb.size, &m), 0);
	assert_int_equal(m.type, IPC_ANS_MCP);
	assert_int_equal(m.u.mcp_ans.msg.len, 0);
	ipc_msg_free(&m);
	ipc_buf_free(&b);
}

static void test_roundtrip_all_types(void **st)
{
	(void)st;
	struct ipc_buf b;
	struct ipc_msg m;
	char head[10] = "{\"id\":5,", tail[3] = "x}";
	assert_int_equal(ipc_pack_req_mcp_toobig(&b, 2, head, 8, tail, 2, 10u << 20), 0);
	assert_int_equal(ipc_decode(b.sb.data, b.sb.size, &m), 0);
	assert_int_equal(m.u.toobig.size, 10u << 20);
	assert_int_equal(m.u.toobig.head.len, 8);
	ipc_msg_free(&m);
	ipc_buf_free(&b);

	assert_int_equal(ipc_pack_note_mcp(&b, 3, 2, "{}", 2), 0);
	assert_int_equal(ipc_decode(b.sb.data, b.sb.size, &m), 0);
	assert_int_equal(m.u.note_mcp.rel, 2);
	ipc_msg_free(&m);
	ipc_buf_free(&b);

	assert_int_equal(ipc_pack_note_accepted(&b, 4, "\"a\"", 3), 0);
	assert_int_equal(ipc_decode(b.sb.data, b.sb.size, &m), 0);
	assert_int_equal(m.type, IPC_NOTE_ACCEPTED);
	ipc_msg_free(&m);
	ipc_buf_free(&b);

	assert_int_equal(ipc_pack_note_session(&b, 5, "{}", 2, "2025-11-25"), 0);
	assert_int_equal(ipc_decode(b.sb.data, b.sb.size, &m), 0);
	assert_int_equal(m.u.session.protocol.len, 10);
	ipc_msg_free(&m);
	ipc_buf_free(&b);

	assert_int_equal(ipc_pack_note_state(&b, 6, "busy"), 0);
	assert_int_equal(ipc_decode(b.sb.data, b.sb.size, &m), 0);
	ipc_msg_free(&m);
	ipc_buf_free(&b);

	assert_int_equal(ipc_pack_req_sandbox(&b, 7, "spawn", ""), 0);
	assert_int_equal(ipc_decode(b.sb.data, b.sb.size, &m), 0);
	assert_int_equal(m.type, IPC_REQ_SANDBOX);
	ipc_msg_free(&m);
	ipc_buf_free(&b);

	assert_int_equal(ipc_pack_ans_sandbox(&b, 7, true, "", "/x/agent.sock", "kg-1", "/x"), 0);
	assert_int_equal(ipc_decode(b.sb.data, b.sb.size, &m), 0);
	assert_true(m.u.sandbox_ans.ok);
	assert_int_equal(m.u.sandbox_ans.socket.len, strlen("/x/agent.sock"));
	ipc_msg_free(&m);
	ipc_buf_free(&b);

	assert_int_equal(ipc_pack_req_shutdown(&b, 8, "bye"), 0);
	assert_int_equal(ipc_decode(b.sb.data, b.sb.size, &m), 0);
	assert_string_equal(ipc_type_name(m.type), "REQ_SHUTDOWN");
	ipc_msg_free(&m);
	ipc_buf_free(&b);

	/* a SandboxClaim's name (up to 253) fits ANS_SANDBOX; anything longer is refused */
	char claim[255];
	memset(claim, 'k', 254);
	claim[254] = '\0';
	assert_int_equal(ipc_pack_ans_sandbox(&b, 9, true, "", "/x/kube-1.sock", claim, ""), -EINVAL);
	claim[253] = '\0';
	assert_int_equal(ipc_pack_ans_sandbox(&b, 9, true, "", "/x/kube-1.sock", claim, ""), 0);
	assert_int_equal(ipc_decode(b.sb.data, b.sb.size, &m), 0);
	assert_int_equal(m.u.sandbox_ans.name.len, 253);
	ipc_msg_free(&m);
	ipc_buf_free(&b);
}

/* a container whose declared count cannot fit in the bytes left is refused before msgpack-c
 * allocates for it (a map32 of 2^32 - 1 pairs in 5 bytes: 64 GiB) */
static void test_declared_counts_bounded(void **st)
{
	(void)st;
	struct ipc_msg m;
	static const unsigned char map32[] = { 0xdf, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff };
	static const unsigned char arr32[] = { 0x94, 0x01, 0x01, 0x01, 0xdd, 0x7f, 0xff, 0xff, 0xff };
	static const unsigned char str32[] = { 0xdb, 0xff, 0xff, 0xff, 0xf0, 'x' };
	static const unsigned char never[] = { 0xc1 };
	assert_int_equal(ipc_decode(map32, sizeof(map32), &m), -EPROTO);
	assert_int_equal(ipc_decode(arr32, sizeof(arr32), &m), -EPROTO);
	assert_int_equal(ipc_decode(str32, sizeof(str32), &m), -EPROTO);
	assert_int_equal(ipc_decode(never, sizeof(never), &m), -EPROTO);
}

/* every strict prefix of a valid message is rejected */
static void test_truncated(void **st)
{
	(void)st;
	struct ipc_buf b;
	struct ipc_msg m;
	assert_int_equal(ipc_pack_ans_sandbox(&b, 1, false, "no", "", "", ""), 0);
	for (size_t n = 0; n < b.sb.size; n++)
		assert_int_equal(ipc_decode(b.sb.data, n, &m), -EPROTO);
	ipc_buf_free(&b);
}

static void test_trailing_bytes(void **st)
{
	(void)st;
	struct ipc_buf b;
	struct ipc_msg m;
	assert_int_equal(ipc_pack_hello(&b, 1, 10, "v"), 0);
	char *buf = malloc(b.sb.size + 1);
	memcpy(buf, b.sb.data, b.sb.size);
	buf[b.sb.size] = (char)0xc0; /* a msgpack nil */
	assert_int_equal(ipc_decode(buf, b.sb.size + 1, &m), -EPROTO);
	free(buf);
	ipc_buf_free(&b);
}

/* pack_raw - build an envelope by hand, to send what the encoders never would */
static void pack_raw(msgpack_sbuffer *sb, uint32_t version, uint32_t type, const char *key,
		     int value_kind)
{
	msgpack_packer pk;
	msgpack_sbuffer_init(sb);
	msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
	msgpack_pack_array(&pk, 4);
	msgpack_pack_uint32(&pk, version);
	msgpack_pack_uint32(&pk, type);
	msgpack_pack_uint32(&pk, 1);
	msgpack_pack_map(&pk, 1);
	msgpack_pack_str_with_body(&pk, key, strlen(key));
	if (value_kind == 0)
		msgpack_pack_str_with_body(&pk, "x", 1);
	else
		msgpack_pack_bin_with_body(&pk, "x", 1);
}

static void test_wrong_version_type_keys(void **st)
{
	(void)st;
	msgpack_sbuffer sb;
	struct ipc_msg m;
	/* correct: REQ_SHUTDOWN {reason: str} */
	pack_raw(&sb, IPC_VERSION, IPC_REQ_SHUTDOWN, "reason", 0);
	assert_int_equal(ipc_decode(sb.data, sb.size, &m), 0);
	ipc_msg_free(&m);
	msgpack_sbuffer_destroy(&sb);
	/* wrong version */
	pack_raw(&sb, IPC_VERSION + 1, IPC_REQ_SHUTDOWN, "reason", 0);
	assert_int_equal(ipc_decode(sb.data, sb.size, &m), -EPROTO);
	msgpack_sbuffer_destroy(&sb);
	/* unknown type */
	pack_raw(&sb, IPC_VERSION, 999, "reason", 0);
	assert_int_equal(ipc_decode(sb.data, sb.size, &m), -EPROTO);
	msgpack_sbuffer_destroy(&sb);
	/* unknown key */
	pack_raw(&sb, IPC_VERSION, IPC_REQ_SHUTDOWN, "why", 0);
	assert_int_equal(ipc_decode(sb.data, sb.size, &m), -EPROTO);
	msgpack_sbuffer_destroy(&sb);
	/* wrong value type: bin where str is due */
	pack_raw(&sb, IPC_VERSION, IPC_REQ_SHUTDOWN, "reason", 1);
	assert_int_equal(ipc_decode(sb.data, sb.size, &m), -EPROTO);
	msgpack_sbuffer_destroy(&sb);
	/* missing key: a HELLO without version */
	pack_raw(&sb, IPC_VERSION, IPC_HELLO, "pid", 0);
	assert_int_equal(ipc_decode(sb.data, sb.size, &m), -EPROTO);
	msgpack_sbuffer_destroy(&sb);
	/* not an array at all */
	assert_int_equal(ipc_decode("\x93\x01\x02\x03", 4, &m), -EPROTO);
	assert_int_equal(ipc_decode("", 0, &m), -EPROTO);
}

static void test_oversized(void **st)
{
	(void)st;
	struct ipc_buf b;
	struct ipc_msg m;
	size_t big = IPC_MAX_MSG;
	char *payload = calloc(1, big);
	/* the encoder refuses what the decoder would reject */
	assert_int_equal(ipc_pack_req_mcp(&b, 1, payload, big, false), -EINVAL);
	/* and the decoder refuses by size before looking */
	assert_int_equal(ipc_decode(payload, big + 1, &m), -EMSGSIZE);
	/* the largest client message fits */
	assert_int_equal(ipc_pack_req_mcp(&b, 1, payload, MCP_MAX_MESSAGE, false), 0);
	assert_int_equal(ipc_decode(b.sb.data, b.sb.size, &m), 0);
	assert_int_equal(m.u.mcp.msg.len, MCP_MAX_MESSAGE);
	ipc_msg_free(&m);
	ipc_buf_free(&b);
	/* toobig ends are bounded */
	assert_int_equal(ipc_pack_req_mcp_toobig(&b, 1, payload, IPC_TOOBIG_KEEP + 1, "", 0, 1), -EINVAL);
	free(payload);
}

/* raw_body - an envelope of type t whose body is one key with a str of n bytes, or a uint */
static void raw_body(struct ipc_buf *b, uint32_t t, const char *key, size_t n, bool as_uint, uint64_t v)
{
	msgpack_packer pk;
	msgpack_sbuffer_init(&b->sb);
	msgpack_packer_init(&pk, &b->sb, msgpack_sbuffer_write);
	msgpack_pack_array(&pk, 4);
	msgpack_pack_uint32(&pk, IPC_VERSION);
	msgpack_pack_uint32(&pk, t);
	msgpack_pack_uint32(&pk, 1);
	msgpack_pack_map(&pk, 1);
	msgpack_pack_str_with_body(&pk, key, strlen(key));
	if (as_uint) {
		msgpack_pack_uint64(&pk, v);
		return;
	}
	char *s = malloc(n + 1);
	memset(s, 'a', n);
	msgpack_pack_str_with_body(&pk, s, n);
	free(s);
}

/* every field's range comes from the contract table and the decoder holds a sender to it */
static void test_field_ranges(void **st)
{
	(void)st;
	struct ipc_buf b;
	struct ipc_msg m;
	/* NOTE_STATE state: at most 16 bytes */
	raw_body(&b, IPC_NOTE_STATE, "state", 16, false, 0);
	assert_int_equal(ipc_decode(b.sb.data, b.sb.size, &m), 0);
	ipc_msg_free(&m);
	ipc_buf_free(&b);
	raw_body(&b, IPC_NOTE_STATE, "state", 17, false, 0);
	assert_int_equal(ipc_decode(b.sb.data, b.sb.size, &m), -EPROTO);
	ipc_buf_free(&b);
	/* REQ_SHUTDOWN reason: at most 256 */
	raw_body(&b, IPC_REQ_SHUTDOWN, "reason", 257, false, 0);
	assert_int_equal(ipc_decode(b.sb.data, b.sb.size, &m), -EPROTO);
	ipc_buf_free(&b);
	/* NOTE_ACCEPTED id: not empty */
	assert_int_equal(ipc_pack_note_accepted(&b, 1, "", 0), -EINVAL);
	/* HELLO pid: 1..INT32_MAX, both ends */
	assert_int_equal(ipc_pack_hello(&b, 1, 0, "v"), -EINVAL);
	assert_int_equal(ipc_pack_hello(&b, 1, (uint64_t)INT32_MAX + 1, "v"), -EINVAL);
	/* NOTE_MCP rel fits a seq */
	raw_body(&b, IPC_NOTE_MCP, "rel", 0, true, (uint64_t)UINT32_MAX + 1);
	assert_int_equal(ipc_decode(b.sb.data, b.sb.size, &m), -EPROTO); /* and msg is missing */
	ipc_buf_free(&b);
	/* every table row has a name and its fields distinct keys */
	for (uint32_t t = 1; t < IPC_TYPE_MAX; t++) {
		const struct ipc_contract *c = ipc_contract_of(t);
		assert_non_null(c->name);
		for (size_t i = 0; i < c->nfields; i++)
			for (size_t j = i + 1; j < c->nfields; j++)
				assert_string_not_equal(c->fields[i].key, c->fields[j].key);
	}
}

/* the decoded message must not point into the caller's buffer (nng frees it at once) */
static void test_outlives_buffer(void **st)
{
	(void)st;
	struct ipc_buf b;
	struct ipc_msg m;
	assert_int_equal(ipc_pack_req_mcp(&b, 3, "{\"x\":1}", 7, false), 0);
	char *copy = malloc(b.sb.size);
	memcpy(copy, b.sb.data, b.sb.size);
	size_t n = b.sb.size;
	ipc_buf_free(&b);
	assert_int_equal(ipc_decode(copy, n, &m), 0);
	memset(copy, 0xAA, n);
	free(copy);
	assert_int_equal(m.u.mcp.msg.len, 7);
	assert_memory_equal(m.u.mcp.msg.ptr, "{\"x\":1}", 7);
	ipc_msg_free(&m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_roundtrip_hello),
		cmocka_unit_test(test_roundtrip_mcp),
		cmocka_unit_test(test_roundtrip_all_types),
		cmocka_unit_test(test_truncated),
		cmocka_unit_test(test_trailing_bytes),
		cmocka_unit_test(test_wrong_version_type_keys),
		cmocka_unit_test(test_oversized),
		cmocka_unit_test(test_outlives_buffer),
		cmocka_unit_test(test_field_ranges),
		cmocka_unit_test(test_declared_counts_bounded),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
