/*
 * fuzz_ipc.c - libFuzzer target for the IPC decoder (what the master reads from workers).
 */
#include <stddef.h>
#include <stdint.h>

#include "ipc/ipc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct ipc_msg m;
	if (ipc_decode(data, size, &m) == 0) {
		char s[64];
		/* touch what a handler would read */
		if (m.type == IPC_ANS_SANDBOX)
			ipc_bytes_str(m.u.sandbox_ans.socket, s, sizeof(s));
		ipc_msg_free(&m);
	}
	return 0;
}
