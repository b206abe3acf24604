/*
 * frame.c - newline framing with a bound; see frame.h.
 */
#include "ipc/frame.h"

#include <stdlib.h>
#include <string.h>

void frame_init(struct frame *f, size_t max)
{
	memset(f, 0, sizeof(*f));
	f->max = max;
}

void frame_free(struct frame *f)
{
	free(f->line);
	f->line = NULL;
	f->len = 0;
}

/* frame_emit - trim and hand over one complete line */
static void frame_emit(const char *p, size_t len, const struct frame_ops *ops)
{
	while (len > 0 && (p[len - 1] == '\r' || p[len - 1] == ' ' || p[len - 1] == '\t'))
		len--;
	while (len > 0 && (*p == ' ' || *p == '\t')) {
		p++;
		len--;
	}
	if (len > 0)
		ops->line(ops->ctx, p, len);
}

/* frame_emit_toobig - hand over the ends of a dropped line */
static void frame_emit_toobig(struct frame *f, const struct frame_ops *ops)
{
	size_t keep = f->dropped < IPC_TOOBIG_KEEP ? (size_t)f->dropped : IPC_TOOBIG_KEEP;
	char tail[IPC_TOOBIG_KEEP];
	size_t end = (size_t)(f->dropped % IPC_TOOBIG_KEEP);
	for (size_t i = 0; i < keep; i++)
		tail[i] = f->tail[(end + IPC_TOOBIG_KEEP - keep + i) % IPC_TOOBIG_KEEP];
	ops->toobig(ops->ctx, f->head, f->hlen, tail, keep, f->dropped);
}

/*
 * frame_drop_start - the line outgrew the bound: keep its head, count the rest. The head is the
 * line's first IPC_TOOBIG_KEEP bytes wherever they are: in the buffered part, in the piece that
 * overflowed it (buf, n bytes, about to be counted by the caller), or both. The buffered part
 * may be empty (a line whose first piece is already over the bound), and then f->line is NULL,
 * which memcpy must not be handed even for 0 bytes.
 */
static void frame_drop_start(struct frame *f, const char *buf, size_t n)
{
	f->dropping = true;
	f->hlen = f->len < IPC_TOOBIG_KEEP ? f->len : IPC_TOOBIG_KEEP;
	if (f->hlen)
		memcpy(f->head, f->line, f->hlen);
	size_t more = IPC_TOOBIG_KEEP - f->hlen < n ? IPC_TOOBIG_KEEP - f->hlen : n;
	if (more)
		memcpy(f->head + f->hlen, buf, more);
	f->hlen += more;
	f->dropped = 0;
	for (size_t i = 0; i < f->len; i++)
		f->tail[f->dropped++ % IPC_TOOBIG_KEEP] = f->line[i];
	frame_free(f);
}

void frame_feed(struct frame *f, const char *buf, size_t n, const struct frame_ops *ops)
{
	while (n > 0) {
		const char *nl = memchr(buf, '\n', n);
		size_t take = nl ? (size_t)(nl - buf) : n;
		if (!f->dropping && f->len + take > f->max)
			frame_drop_start(f, buf, take);
		if (f->dropping) {
			for (size_t i = 0; i < take; i++)
				f->tail[f->dropped++ % IPC_TOOBIG_KEEP] = buf[i];
		} else if (take) {
			if (!f->line && !(f->line = malloc(f->max ? f->max : 1)))
				abort();
			memcpy(f->line + f->len, buf, take);
			f->len += take;
		}
		if (!nl)
			return;
		if (f->dropping)
			frame_emit_toobig(f, ops);
		else if (f->len)
			frame_emit(f->line, f->len, ops);
		f->dropping = false;
		f->len = 0;
		buf += take + 1;
		n -= take + 1;
	}
}

void frame_finish(struct frame *f, const struct frame_ops *ops)
{
	if (f->dropping)
		frame_emit_toobig(f, ops);
	else if (f->len)
		frame_emit(f->line, f->len, ops);
	f->dropping = false;
	f->len = 0;
}
