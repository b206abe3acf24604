/*
 * test_frame.c - stdin line framing with its bound, and recovering the id of a dropped line.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <jansson.h>

#include "ipc/frame.h"
#include "lib/rpcid.h"
#include "worker/worker.h"

struct seen {
	int lines, toobig;
	char last[256];
	uint64_t size;
	char head[IPC_TOOBIG_KEEP], tail[IPC_TOOBIG_KEEP];
	size_t hlen, tlen;
};

static void on_line(void *ctx, const char *l, size_t n)
{
	struct seen *s = ctx;
	s->lines++;
	snprintf(s->last, sizeof(s->last), "%.*s", (int)n, l);
}

static void on_toobig(void *ctx, const char *h, size_t hl, const char *t, size_t tl, uint64_t size)
{
	struct seen *s = ctx;
	s->toobig++;
	s->size = size;
	memcpy(s->head, h, hl);
	memcpy(s->tail, t, tl);
	s->hlen = hl;
	s->tlen = tl;
}

static void test_lines_split_anywhere(void **st)
{
	(void)st;
	const char *in = "{\"a\":1}\n\n  \r\n{\"b\":2}\r\n{\"c\":3}";
	for (size_t cut = 0; cut <= strlen(in); cut++) {
		struct seen s = { 0 };
		struct frame f;
		struct frame_ops ops = { &s, on_line, on_toobig };
		frame_init(&f, 1024);
		frame_feed(&f, in, cut, &ops);
		frame_feed(&f, in + cut, strlen(in) - cut, &ops);
		assert_int_equal(s.lines, 2);
		frame_finish(&f, &ops);
		assert_int_equal(s.lines, 3);
		assert_string_equal(s.last, "{\"c\":3}");
		frame_free(&f);
	}
}

static void test_toobig_keeps_ends(void **st)
{
	(void)st;
	struct seen s = { 0 };
	struct frame f;
	struct frame_ops ops = { &s, on_line, on_toobig };
	frame_init(&f, 100);
	char chunk[37];
	memset(chunk, 'x', sizeof(chunk));
	frame_feed(&f, "{\"id\":1,\"p\":\"", 13, &ops);
	for (int i = 0; i < 2000; i++)
		frame_feed(&f, chunk, sizeof(chunk), &ops);
	frame_feed(&f, "\",\"id2\":7}\n{\"ok\":1}\n", 20, &ops);
	assert_int_equal(s.toobig, 1);
	assert_int_equal(s.size, 13 + 2000 * 37 + 10);
	assert_memory_equal(s.head, "{\"id\":1,", 8);
	assert_int_equal(s.tlen, IPC_TOOBIG_KEEP);
	assert_memory_equal(s.tail + s.tlen - 10, "\",\"id2\":7}", 10);
	assert_int_equal(s.lines, 1); /* the next line is intact */
	assert_string_equal(s.last, "{\"ok\":1}");
	frame_free(&f);
}

/*
 * A line whose very first piece is already over the bound (one read() of a whole oversized
 * line, or the line after a dropped one): nothing was buffered, so the head must come from the
 * piece itself. This used to hand memcpy a NULL buffer (undefined behaviour, caught by UBSan
 * and by fuzz_jsonrpc; seed tests/fuzz/corpus/fuzz_jsonrpc/regress-empty-line-toobig) and to
 * report an empty head, which lost the request's id.
 */
static void test_toobig_first_piece(void **st)
{
	(void)st;
	size_t pad = IPC_TOOBIG_KEEP * 3;
	const char *pre = "{\"jsonrpc\":\"2.0\",\"id\":7,\"p\":\"", *post = "\"}\n";
	size_t line = strlen(pre) + pad + strlen(post) - 1;
	size_t total = 2 * (line + 1) + strlen("{\"ok\":1}\n");
	char *in = malloc(total + 1), *p = in;
	assert_non_null(in);
	for (int i = 0; i < 2; i++) { /* two oversized lines back to back, then a good one */
		p = stpcpy(p, pre);
		memset(p, 'x', pad);
		p = stpcpy(p + pad, post);
	}
	strcpy(p, "{\"ok\":1}\n");

	struct seen s = { 0 };
	struct frame f;
	struct frame_ops ops = { &s, on_line, on_toobig };
	frame_init(&f, 1000);
	frame_feed(&f, in, total, &ops);
	assert_int_equal(s.toobig, 2);
	assert_int_equal(s.size, line);
	assert_int_equal(s.hlen, IPC_TOOBIG_KEEP);
	assert_memory_equal(s.head, pre, strlen(pre));
	json_t *id = rpcid_scan(s.head, s.hlen, s.tail, s.tlen);
	assert_non_null(id);
	assert_int_equal(json_integer_value(id), 7);
	json_decref(id);
	assert_int_equal(s.lines, 1);
	assert_string_equal(s.last, "{\"ok\":1}");
	frame_free(&f);
	free(in);
}

/* The head of a dropped line spans what was buffered and the piece that overflowed the bound. */
static void test_toobig_head_spans_pieces(void **st)
{
	(void)st;
	struct seen s = { 0 };
	struct frame f;
	struct frame_ops ops = { &s, on_line, on_toobig };
	size_t big = IPC_TOOBIG_KEEP * 2;
	char *chunk = malloc(big);
	assert_non_null(chunk);
	for (size_t i = 0; i < big; i++)
		chunk[i] = (char)('a' + i % 26);
	frame_init(&f, 100);
	frame_feed(&f, "{\"id\":", 6, &ops);
	frame_feed(&f, chunk, big, &ops);
	frame_feed(&f, "\n", 1, &ops);
	assert_int_equal(s.toobig, 1);
	assert_int_equal(s.size, 6 + big);
	assert_int_equal(s.hlen, IPC_TOOBIG_KEEP);
	assert_memory_equal(s.head, "{\"id\":", 6);
	assert_memory_equal(s.head + 6, chunk, IPC_TOOBIG_KEEP - 6);
	assert_memory_equal(s.tail, chunk + big - IPC_TOOBIG_KEEP, IPC_TOOBIG_KEEP);
	frame_free(&f);
	free(chunk);
}

static void test_scan_id(void **st)
{
	(void)st;
	json_t *id;
	const char *h1 = "{\"jsonrpc\":\"2.0\",\"id\":42,\"method\":\"tools/call\",\"params\":{\"x\":\"aaaa";
	id = rpcid_scan(h1, strlen(h1), "", 0);
	assert_non_null(id);
	assert_int_equal(json_integer_value(id), 42);
	json_decref(id);
	/* the SDK writes id last */
	const char *h2 = "{\"method\":\"tools/call\",\"params\":{\"arguments\":{\"code\":\"xx";
	const char *t2 = "xxxx\"}},\"jsonrpc\":\"2.0\",\"id\":\"req-9\"}";
	id = rpcid_scan(h2, strlen(h2), t2, strlen(t2));
	assert_non_null(id);
	assert_string_equal(json_string_value(id), "req-9");
	json_decref(id);
	/* a nested "id" is not the request's */
	const char *h3 = "{\"params\":{\"id\":5,\"x\":\"yyy";
	const char *t3 = "yyy\"}}";
	assert_null(rpcid_scan(h3, strlen(h3), t3, strlen(t3)));
	/* garbage */
	assert_null(rpcid_scan("xxxx", 4, "\"id\":1}", 7));
	assert_null(rpcid_scan("", 0, "", 0));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_lines_split_anywhere),
		cmocka_unit_test(test_toobig_keeps_ends),
		cmocka_unit_test(test_toobig_first_piece),
		cmocka_unit_test(test_toobig_head_spans_pieces),
		cmocka_unit_test(test_scan_id),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
