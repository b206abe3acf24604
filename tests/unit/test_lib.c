/*
 * test_lib.c - unit tests for the shared helpers in lib/: base64 and base64url both ways
 * (RFC 4648's vectors, what strict and lax decoding take and refuse), RFC 3339 times (offsets,
 * fractional seconds, lower case, every malformed form), the growable buffer and its limit, the
 * monotonic clock's arithmetic and secret_free.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <errno.h>

#include "lib/base64.h"
#include "lib/buf.h"
#include "lib/mono.h"
#include "lib/proc.h"
#include "lib/rfc3339.h"
#include "lib/secret.h"

/* dec - b64_decode of a C string into a NUL-terminated buffer; its return value */
static int dec(const char *in, unsigned flags, char *out, size_t cap)
{
	size_t n = 0;
	int rc = b64_decode(in, strlen(in), flags, (unsigned char *)out, cap - 1, &n);
	out[rc == 0 ? n : 0] = '\0';
	return rc;
}

static void test_base64_vectors(void **state)
{
	(void)state;
	/* RFC 4648 §10 */
	static const char *const plain[] = { "", "f", "fo", "foo", "foob", "fooba", "foobar" };
	static const char *const std[] = { "", "Zg==", "Zm8=", "Zm9v", "Zm9vYg==", "Zm9vYmE=",
					   "Zm9vYmFy" };
	static const char *const url[] = { "", "Zg", "Zm8", "Zm9v", "Zm9vYg", "Zm9vYmE", "Zm9vYmFy" };
	char out[64];
	for (size_t i = 0; i < sizeof(plain) / sizeof(plain[0]); i++) {
		char *e = b64_encode((const unsigned char *)plain[i], strlen(plain[i]), 0);
		assert_string_equal(e, std[i]);
		free(e);
		e = b64_encode((const unsigned char *)plain[i], strlen(plain[i]), B64_URL);
		assert_string_equal(e, url[i]);
		free(e);
		assert_int_equal(dec(url[i], B64_URL, out, sizeof(out)), 0);
		assert_string_equal(out, plain[i]);
		assert_int_equal(dec(std[i], B64_LAX, out, sizeof(out)), 0);
		assert_string_equal(out, plain[i]);
	}
	/* the two alphabets differ in two characters: 0xfb 0xff = "+/8" and "-_8" */
	char *e = b64_encode((const unsigned char *)"\xfb\xff", 2, 0);
	assert_string_equal(e, "+/8=");
	free(e);
	e = b64_encode((const unsigned char *)"\xfb\xff", 2, B64_URL);
	assert_string_equal(e, "-_8");
	free(e);
}

static void test_base64_strict(void **state)
{
	(void)state;
	char out[32];
	assert_int_equal(dec("aGk_", B64_URL, out, sizeof(out)), 0);
	assert_string_equal(out, "hi?");
	assert_int_equal(dec("aGk=", B64_URL, out, sizeof(out)), -EINVAL);  /* padding */
	assert_int_equal(dec("aGk+", B64_URL, out, sizeof(out)), -EINVAL);  /* the other alphabet */
	assert_int_equal(dec("aGk_", 0, out, sizeof(out)), -EINVAL);
	assert_int_equal(dec("aGl", B64_URL, out, sizeof(out)), -EINVAL);   /* stray low bits */
	assert_int_equal(dec("a", B64_URL, out, sizeof(out)), -EINVAL);     /* half a byte */
	assert_int_equal(dec("aGk_a", B64_URL, out, sizeof(out)), -EINVAL);
	assert_int_equal(dec("aG k_", B64_URL, out, sizeof(out)), -EINVAL); /* white space */
	assert_int_equal(dec("aGk_\n", B64_URL, out, sizeof(out)), -EINVAL);
	assert_int_equal(dec("aG\xc3\xa9", B64_URL, out, sizeof(out)), -EINVAL);
	size_t n;
	unsigned char small[2];
	assert_int_equal(b64_decode("aGk_", 4, B64_URL, small, sizeof(small), &n), -ENOSPC);
	assert_int_equal(b64_decode("aGk_", 3, B64_URL, small, sizeof(small), &n), 0); /* "hi" */
	assert_int_equal(n, 2);
	/* a NUL inside the given length is a character like any other, not the end */
	assert_int_equal(b64_decode("aGk_\0AAA", 8, B64_URL, (unsigned char *)out, 16, &n), -EINVAL);
}

static void test_base64_lax(void **state)
{
	(void)state;
	char out[32];
	assert_int_equal(dec(" Zm9v\r\nYmE=\n", B64_LAX, out, sizeof(out)), 0);
	assert_string_equal(out, "fooba");
	assert_int_equal(dec("Zm9vYmE", B64_LAX, out, sizeof(out)), 0); /* padding optional */
	assert_string_equal(out, "fooba");
	assert_int_equal(dec("Zm9vYg= =", B64_LAX, out, sizeof(out)), 0);
	assert_string_equal(out, "foob");
	assert_int_equal(dec("Zh==", B64_LAX, out, sizeof(out)), 0); /* stray bits ignored */
	assert_string_equal(out, "f");
	assert_int_equal(dec("Zg==Zg==", B64_LAX, out, sizeof(out)), -EINVAL); /* data after '=' */
	assert_int_equal(dec("Zg===", B64_LAX, out, sizeof(out)), -EINVAL);
	assert_int_equal(dec("Z===", B64_LAX, out, sizeof(out)), -EINVAL);
	assert_int_equal(dec("Zm9v_w==", B64_LAX, out, sizeof(out)), -EINVAL); /* url in std */
	assert_int_equal(dec("Zm9v+w", B64_URL | B64_LAX, out, sizeof(out)), -EINVAL);
	assert_int_equal(dec("Zm9v\xa0", B64_LAX, out, sizeof(out)), -EINVAL); /* not space */
	assert_int_equal(dec("-_8", B64_URL | B64_LAX, out, sizeof(out)), 0);
	assert_memory_equal(out, "\xfb\xff", 2);

	size_t n = 99;
	unsigned char *p = b64_decode_alloc("aGk", 3, B64_URL | B64_LAX, &n);
	assert_non_null(p);
	assert_int_equal(n, 2);
	assert_string_equal((char *)p, "hi");
	free(p);
	errno = 0;
	assert_null(b64_decode_alloc("a", 1, B64_URL | B64_LAX, &n));
	assert_int_equal(errno, EINVAL);
}

static void test_base64_round_trip(void **state)
{
	(void)state;
	unsigned char in[70], out[B64_DECODED_MAX(100)];
	for (size_t i = 0; i < sizeof(in); i++)
		in[i] = (unsigned char)(i * 37 + 11);
	for (size_t len = 0; len <= sizeof(in); len++) {
		for (unsigned flags = 0; flags <= B64_URL; flags++) {
			char *e = b64_encode(in, len, flags);
			assert_non_null(e);
			size_t n = 0;
			/* strict takes only the unpadded url form; lax takes both */
			if (flags & B64_URL) {
				assert_int_equal(b64_decode(e, strlen(e), flags, out, sizeof(out), &n), 0);
				assert_int_equal(n, len);
				assert_memory_equal(out, in, len);
			}
			assert_int_equal(b64_decode(e, strlen(e), flags | B64_LAX, out, sizeof(out), &n),
					 0);
			assert_int_equal(n, len);
			assert_memory_equal(out, in, len);
			free(e);
		}
	}
}

/* t3339 - rfc3339_parse's answer, or -1 for a refusal */
static long long t3339(const char *s)
{
	time_t t = 12345;
	int rc = rfc3339_parse(s, &t);
	if (rc < 0) {
		assert_int_equal(rc, -EINVAL);
		assert_int_equal(t, 12345); /* untouched */
		return -1;
	}
	return (long long)t;
}

static void test_rfc3339_parse(void **state)
{
	(void)state;
	assert_int_equal(t3339("1970-01-01T00:00:00Z"), 0);
	assert_int_equal(t3339("2026-11-30T16:55:09Z"), 1796057709);
	assert_int_equal(t3339("2026-11-30t16:55:09z"), 1796057709);
	/* offsets: the same instant written in other zones */
	assert_int_equal(t3339("2026-11-30T17:55:09+01:00"), 1796057709);
	assert_int_equal(t3339("2026-11-30T11:25:09-05:30"), 1796057709);
	assert_int_equal(t3339("2026-12-01T00:55:09+08:00"), 1796057709);
	assert_int_equal(t3339("2026-11-30T16:55:09+00:00"), 1796057709);
	assert_int_equal(t3339("2026-11-30T16:55:09-00:00"), 1796057709);
	/* fractional seconds of any length are dropped, not rounded */
	assert_int_equal(t3339("2026-11-30T16:55:09.999999999Z"), 1796057709);
	assert_int_equal(t3339("2026-11-30T16:55:09.5Z"), 1796057709);
	assert_int_equal(t3339("2026-11-30T17:55:09.123+01:00"), 1796057709);
	/* leap day, and a leap second counted as the next second */
	assert_int_equal(t3339("2024-02-29T12:00:00Z"), 1709208000);
	assert_int_equal(t3339("2016-12-31T23:59:60Z"), 1483228800);

	static const char *const bad[] = {
		"",
		"2026-11-30",
		"2026-11-30T16:55:09",         /* no offset */
		"2026-11-30 16:55:09Z",        /* RFC 3339 allows the space only in prose */
		"2026-11-30T16:55Z",
		"26-11-30T16:55:09Z",
		"2026-1-30T16:55:09Z",
		"2026-11-30T16:55:9Z",
		"2026-13-01T00:00:00Z",
		"2026-00-01T00:00:00Z",
		"2026-11-00T00:00:00Z",
		"2026-11-31T00:00:00Z",
		"2026-02-29T00:00:00Z",        /* not a leap year */
		"1900-02-29T00:00:00Z",
		"2026-11-30T24:00:00Z",
		"2026-11-30T23:60:00Z",
		"2026-11-30T23:59:61Z",
		"2026-11-30T16:55:09.Z",       /* a dot without digits */
		"2026-11-30T16:55:09,5Z",
		"2026-11-30T16:55:09ZZ",       /* trailing garbage */
		"2026-11-30T16:55:09Z ",
		"2026-11-30T16:55:09+01:00x",
		"2026-11-30T16:55:09+0100",
		"2026-11-30T16:55:09+01",
		"2026-11-30T16:55:09+1:00",
		"2026-11-30T16:55:09+24:00",
		"2026-11-30T16:55:09+01:60",
		"2026-11-30T16:55:09 +01:00",
		"+2026-11-30T16:55:09Z",
		"2026-11-30T16:55:09\xc2\xa0Z",
		"２０２６-11-30T16:55:09Z",
	};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		if (t3339(bad[i]) != -1)
			fail_msg("accepted \"%s\"", bad[i]);
	}
	time_t t = 7;
	assert_int_equal(rfc3339_parse(NULL, &t), -EINVAL);
}

static void test_rfc3339_format(void **state)
{
	(void)state;
	char out[RFC3339_LEN + 1];
	rfc3339_format(0, out, sizeof(out));
	assert_string_equal(out, "1970-01-01T00:00:00Z");
	rfc3339_format(1796057709, out, sizeof(out));
	assert_string_equal(out, "2026-11-30T16:55:09Z");
	time_t back;
	assert_int_equal(rfc3339_parse(out, &back), 0);
	assert_int_equal(back, 1796057709);
	/* four digits of year both ways, from 0000 to 9999 and no further */
	assert_int_equal(rfc3339_parse("0000-01-01T00:00:00Z", &back), 0);
	rfc3339_format(back, out, sizeof(out));
	assert_string_equal(out, "0000-01-01T00:00:00Z");
	assert_int_equal(rfc3339_parse("0999-03-04T05:06:07Z", &back), 0);
	rfc3339_format(back, out, sizeof(out));
	assert_string_equal(out, "0999-03-04T05:06:07Z");
	assert_int_equal(rfc3339_parse("9999-12-31T23:59:59Z", &back), 0);
	rfc3339_format(back, out, sizeof(out));
	assert_string_equal(out, "9999-12-31T23:59:59Z");
	rfc3339_format(back + 1, out, sizeof(out));
	assert_string_equal(out, "");
	char small[RFC3339_LEN];
	rfc3339_format(0, small, sizeof(small)); /* does not fit: empty, not cut */
	assert_string_equal(small, "");
}

static void test_mono(void **state)
{
	(void)state;
	struct timespec start;
	clock_gettime(CLOCK_MONOTONIC, &start);
	int64_t a = mono_ms();
	double s = mono_s();
	struct timespec d = mono_after(1999);
	assert_true(d.tv_nsec >= 0 && d.tv_nsec < 1000000000L);
	/* the deadline is 1999 ms after a reading taken before it, whatever the clock does */
	long long ahead = ((long long)d.tv_sec - start.tv_sec) * 1000 + (d.tv_nsec - start.tv_nsec) / 1000000;
	assert_true(ahead >= 1999);
	assert_true(mono_ms() >= a);
	assert_true(mono_s() >= s);
	assert_true(mono_since_ms(&start) >= 0);
	assert_true((double)a / 1000 <= s + 0.001);
}

static void test_buf(void **state)
{
	(void)state;
	struct buf b = { 0 };
	assert_int_equal(buf_add(&b, "", 0, 10), 0);
	assert_non_null(b.data);
	assert_string_equal(b.data, "");
	assert_int_equal(buf_add(&b, "hello", 5, 10), 0);
	assert_int_equal(buf_add(&b, "world", 5, 10), 0); /* exactly the limit */
	assert_string_equal(b.data, "helloworld");
	assert_int_equal(buf_add(&b, "!", 1, 10), -EFBIG);
	assert_int_equal(b.len, 10); /* nothing added */
	assert_true(b.cap <= 11);  /* never more than the limit and its NUL */
	assert_int_equal(buf_add(&b, "x", (size_t)-1, 10), -EFBIG);
	buf_wipe_free(&b);
	assert_null(b.data);
	assert_int_equal(b.len + b.cap, 0);

	/* growth across the first allocation, with NULs in the data */
	char chunk[1000];
	memset(chunk, 0, sizeof(chunk));
	for (int i = 0; i < 100; i++)
		assert_int_equal(buf_add(&b, chunk, sizeof(chunk), 1u << 20), 0);
	assert_int_equal(b.len, 100000);
	assert_int_equal(b.data[b.len], '\0');
	buf_free(&b);

	/* a reserve: one allocation, kept by the adds that fit it, empty and terminated */
	assert_int_equal(buf_reserve(&b, 5000), 0);
	assert_int_equal(b.cap, 5001);
	assert_int_equal(b.len, 0);
	assert_string_equal(b.data, "");
	char *before = b.data;
	for (int i = 0; i < 5; i++)
		assert_int_equal(buf_add(&b, chunk, sizeof(chunk), 1u << 20), 0);
	assert_ptr_equal(b.data, before);
	assert_int_equal(buf_reserve(&b, 10), 0); /* smaller than what it has: nothing changes */
	assert_int_equal(b.cap, 5001);
	assert_int_equal(buf_reserve(&b, (size_t)-1), -ENOMEM);
	buf_free(&b);
}

static void test_secret_free(void **state)
{
	(void)state;
	secret_free(NULL);
	secret_free(strdup("ya29.a-token"));
	secret_free(strdup(""));
}

/* blocked_child - a child that exits with code once the write end of *fd is closed (other: a
 * descriptor the child must not hold, or -1) */
static pid_t blocked_child(int fd[2], int code, int other)
{
	assert_int_equal(pipe(fd), 0);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		close(fd[1]);
		if (other >= 0)
			close(other);
		char c;
		while (read(fd[0], &c, 1) > 0)
			;
		_exit(code);
	}
	close(fd[0]);
	return pid;
}

/* test_proc_wait - proc_wait_exit and proc_wait_gone see an end when it happens (pidfds), and
 * never report a running process as ended: each child runs until the test closes its pipe */
static void test_proc_wait(void **state)
{
	(void)state;
	int a[2], b[2];
	pid_t pa = blocked_child(a, 7, -1), pb = blocked_child(b, 0, a[1]);
	int st = -1;
	assert_int_equal(proc_wait_exit(pa, 0, &st), 0);
	assert_int_equal(proc_wait_exit(pa, 20, &st), 0);
	pid_t both[2] = { pa, pb };
	assert_int_equal(proc_wait_gone(both, 2, 0), 2);
	assert_int_equal(proc_wait_gone(both, 2, 20), 2);
	close(a[1]);
	assert_int_equal(proc_wait_exit(pa, 60000, &st), 1);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 7);
	/* reaped already: ended, not an error */
	assert_int_equal(proc_wait_exit(pa, 60000, NULL), 1);
	/* pb still runs (a zombie pa is gone from the list: reaped, no pidfd) */
	assert_int_equal(proc_wait_gone(both, 2, 20), 1);
	close(b[1]);
	assert_int_equal(proc_wait_gone(both, 2, 60000), 0);
	assert_int_equal(proc_wait_exit(pb, 60000, &st), 1);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_base64_vectors),
		cmocka_unit_test(test_base64_strict),
		cmocka_unit_test(test_base64_lax),
		cmocka_unit_test(test_base64_round_trip),
		cmocka_unit_test(test_rfc3339_parse),
		cmocka_unit_test(test_rfc3339_format),
		cmocka_unit_test(test_mono),
		cmocka_unit_test(test_buf),
		cmocka_unit_test(test_secret_free),
		cmocka_unit_test(test_proc_wait),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
