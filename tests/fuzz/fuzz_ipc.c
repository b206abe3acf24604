/*
 * fuzz_ipc.c - libFuzzer target for the IPC decoder (ipc/msg.c ipc_decode: what the master
 * reads from workers, and a worker from its master), checked against the contract table.
 *
 * Built by tests/fuzz/Makefile. The input is one message. Besides "no crash, no leak": an
 * accepted message has a type of the table and every field within the range its row gives;
 * the encoder takes back whatever the decoder accepted (ipc_pack of the decoded body succeeds,
 * its bytes decode to the same type and seq, and encoding that again gives the same bytes);
 * and ipc_permitted answers for every direction and phase without reading past the table.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "ipc/ipc.h"

/* fuzz_in_range - every field of an accepted body within its row's bounds */
static void fuzz_in_range(const struct ipc_contract *c, const void *body)
{
	if (!ipc_body_in_range(c, body))
		__builtin_trap();
	for (size_t j = 0; j < c->nfields; j++) {
		const struct ipc_field *f = &c->fields[j];
		const struct ipc_bytes *v = (const void *)((const char *)body + f->off);
		if ((f->kind == IPC_K_STR || f->kind == IPC_K_BIN) && v->len && !v->ptr)
			__builtin_trap();
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct ipc_msg m;
	if (ipc_decode(data, size, &m) != 0)
		return 0;
	const struct ipc_contract *c = ipc_contract_of(m.type);
	if (!c)
		__builtin_trap();
	fuzz_in_range(c, &m.u);
	for (unsigned dir = 0; dir <= 3; dir++)
		for (unsigned ph = 1; ph <= 0x10; ph <<= 1)
			(void)ipc_permitted(m.type, dir, ph);
	char s[64];
	if (m.type == IPC_ANS_SANDBOX)
		ipc_bytes_str(m.u.sandbox_ans.socket, s, sizeof(s));

	struct ipc_buf b1, b2;
	if (ipc_pack(&b1, m.type, m.seq, &m.u) != 0)
		__builtin_trap();
	struct ipc_msg m2;
	if (ipc_decode(b1.sb.data, b1.sb.size, &m2) != 0 || m2.type != m.type || m2.seq != m.seq)
		__builtin_trap();
	if (ipc_pack(&b2, m2.type, m2.seq, &m2.u) != 0 || b2.sb.size != b1.sb.size ||
	    memcmp(b1.sb.data, b2.sb.data, b1.sb.size) != 0)
		__builtin_trap();
	ipc_buf_free(&b2);
	ipc_msg_free(&m2);
	ipc_buf_free(&b1);
	ipc_msg_free(&m);
	return 0;
}
