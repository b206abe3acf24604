/*
 * chan.h - one nng pair1 channel between the master and a worker: open, send, receive.
 * Used by master/spawn.c (listening side) and worker/main.c (dialling side).
 */
#ifndef KG_CHAN_H
#define KG_CHAN_H

#include <nng/nng.h>
#include <nng/protocol/pair1/pair.h>

#include "ipc/ipc.h"

int chan_listen(nng_socket *s, const char *url);
int chan_dial(nng_socket *s, const char *url);
/* chan_send - send and free an encoded message; blocks at most the socket's send timeout */
int chan_send(nng_socket s, struct ipc_buf *b);
/* chan_send_flags - the same with nng flags: NNG_FLAG_NONBLOCK gives -EAGAIN instead of waiting
 * (no peer, or its queue is full) */
int chan_send_flags(nng_socket s, struct ipc_buf *b, int flags);
/* chan_send_unless_gone - send and free b without waiting; if the queue is full, wait (up to
 * the send timeout) only while *connected says the peer's pipe is there. One copy of the
 * message either way. */
int chan_send_unless_gone(nng_socket s, struct ipc_buf *b, const int *connected);
/* chan_recv - receive and decode one message. flags: 0 or NNG_FLAG_NONBLOCK.
 * Returns 0, -EAGAIN (nothing waiting), -EPROTO (undecodable), -ESHUTDOWN (socket closed),
 * -ETIMEDOUT. *pipe receives the sending pipe when not NULL. */
int chan_recv(nng_socket s, struct ipc_msg *m, int flags, nng_pipe *pipe);
/* chan_recv_fd - a descriptor that polls readable when a message is waiting */
int chan_recv_fd(nng_socket s);

#endif
