/*
 * chan.c - nng pair1 sockets carrying ipc.h messages, with the size limit set on both ends.
 */
#include "ipc/chan.h"

#include <errno.h>
#include <string.h>

#include "ipc/log.h"

/* chan_setup - options both ends share */
static int chan_setup(nng_socket *s)
{
	int r = nng_pair1_open(s);
	if (r != 0)
		return -ENOMEM;
	nng_socket_set_size(*s, NNG_OPT_RECVMAXSZ, IPC_MAX_MSG);
	nng_socket_set_ms(*s, NNG_OPT_SENDTIMEO, 30000);
	/* a queue, so a sender (the master holding its lock) rarely has to wait for the reader */
	nng_socket_set_int(*s, NNG_OPT_SENDBUF, 128);
	return 0;
}

/* chan_listen - master side: listen on an ipc:// url */
int chan_listen(nng_socket *s, const char *url)
{
	int r = chan_setup(s);
	if (r)
		return r;
	if ((r = nng_listen(*s, url, NULL, 0)) != 0) {
		log_error("cannot listen on %s: %s", url, nng_strerror(r));
		nng_close(*s);
		return -EADDRINUSE;
	}
	return 0;
}

/* chan_dial - worker side: dial the master's url */
int chan_dial(nng_socket *s, const char *url)
{
	int r = chan_setup(s);
	if (r)
		return r;
	if ((r = nng_dial(*s, url, NULL, 0)) != 0) {
		log_error("cannot dial %s: %s", url, nng_strerror(r));
		nng_close(*s);
		return -ECONNREFUSED;
	}
	return 0;
}

/* chan_send - hand an encoded message to nng, which then owns the copy */
int chan_send(nng_socket s, struct ipc_buf *b)
{
	return chan_send_flags(s, b, 0);
}

/* chan_msg - b's bytes in an nng message (b freed); NULL if memory ran out */
static nng_msg *chan_msg(struct ipc_buf *b)
{
	nng_msg *m;
	int r = nng_msg_alloc(&m, 0);
	if (r == 0 && (r = nng_msg_append(m, b->sb.data, b->sb.size)) != 0)
		nng_msg_free(m);
	ipc_buf_free(b);
	return r == 0 ? m : NULL;
}

static int chan_errno(int r)
{
	return r == NNG_ECLOSED ? -ESHUTDOWN : r == NNG_ETIMEDOUT ? -ETIMEDOUT :
	       r == NNG_EAGAIN ? -EAGAIN : -EIO;
}

int chan_send_flags(nng_socket s, struct ipc_buf *b, int flags)
{
	nng_msg *m = chan_msg(b);
	if (!m)
		return -ENOMEM;
	int r = nng_sendmsg(s, m, flags);
	if (r != 0) {
		nng_msg_free(m);
		return chan_errno(r);
	}
	return 0;
}

/* chan_send_unless_gone - see chan.h (on failure nng_sendmsg leaves m to the caller) */
int chan_send_unless_gone(nng_socket s, struct ipc_buf *b, const int *connected)
{
	nng_msg *m = chan_msg(b);
	if (!m)
		return -ENOMEM;
	int r = nng_sendmsg(s, m, NNG_FLAG_NONBLOCK);
	if (r == NNG_EAGAIN && __atomic_load_n(connected, __ATOMIC_SEQ_CST))
		r = nng_sendmsg(s, m, 0);
	if (r != 0) {
		nng_msg_free(m);
		return chan_errno(r);
	}
	return 0;
}

/* chan_recv - one message off the socket, decoded */
int chan_recv(nng_socket s, struct ipc_msg *out, int flags, nng_pipe *pipe)
{
	nng_msg *m;
	int r = nng_recvmsg(s, &m, flags);
	if (r != 0) {
		memset(out, 0, sizeof(*out));
		msgpack_unpacked_init(&out->unp);
		if (r == NNG_EAGAIN)
			return -EAGAIN;
		if (r == NNG_ETIMEDOUT)
			return -ETIMEDOUT;
		return -ESHUTDOWN;
	}
	if (pipe)
		*pipe = nng_msg_get_pipe(m);
	r = ipc_decode(nng_msg_body(m), nng_msg_len(m), out);
	nng_msg_free(m);
	return r;
}

/* chan_recv_fd - for poll(2) loops */
int chan_recv_fd(nng_socket s)
{
	int fd = -1;
	if (nng_socket_get_int(s, NNG_OPT_RECVFD, &fd) != 0)
		return -1;
	return fd;
}
