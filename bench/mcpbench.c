/*
 * mcpbench.c - kode-gopher's benchmarks, measured the way an MCP client sees them: the memory
 * of the master, worker and agent, the round trip of `ping` over stdio, and the end-to-end
 * latency of execute_go_code (new source, storage client, resubmitted source, against the same
 * build done by hand, and the first call that has to resolve a module), and the local sandbox
 * backend over fresh sessions: whether it is jailed, how long the claim of a warm sandbox takes,
 * the first call against later ones, and the memory and disk of an idle prepared sandbox.
 *
 * Run by bench/run.sh (`make bench`), built into build/mcpbench by the root Makefile's bench
 * recipe; not part of the kode-gopher binary. It starts `kode-gopher serve` on pipes with a
 * private sandbox root and prints one table on stdout; progress goes to stderr. Aims are
 * reported next to their figures, never enforced: the exit status is non-zero only when a
 * measurement could not be made at all. See bench/README.md for what each figure means.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <getopt.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Paths here live under our own temporary directory, far below PATH_MAX, and messages are table
 * cells: a truncated one is harmless, so GCC's worst-case length warnings are noise here. */
#pragma GCC diagnostic ignored "-Wformat-truncation"

#define DEFAULT_BIN        "./build/kode-gopher"
#define DEFAULT_RUNTIME    "/var/cache/kode-gopher/runtime"
/* the PATH agent/gobuild.c gives the toolchain when the agent has none (it passes its own,
 * inherited from serve and so from us, otherwise); the by-hand build must find the same go */
#define AGENT_GO_PATH      "/usr/local/go/bin:/usr/local/bin:/usr/bin:/bin"
#define AGENT_RUN_PATH     "/usr/local/bin:/usr/bin:/bin"
#define TIDY_MODULE        "github.com/google/btree"
#define PING_TIMEOUT_MS    10000
#define INIT_TIMEOUT_MS    60000
#define CALL_TIMEOUT_MS    (10 * 60 * 1000)
#define MAX_LINE           (64 * 1024 * 1024)
#define MAX_ROWS           64
#define MAX_SERIES         1000
#define CAPTURE_POLL_MS    5
#define READY_TIMEOUT_MS   20000 /* the worker itself gives its agent 20 s to come up */
#define READY_POLL_MS      5
#define LATER_CALLS        5     /* calls after the first in each fresh session (f2) */
#define PING_BLOCK         10    /* pings to one server before the other's turn */
#define PING_AIM_US        200.0 /* issue 17 */
#define PING_AIM_RATIO     1.2   /* kode-gopher's ping within 1.2x of the one-process peer's */
#define PEER_SDK_VERSION   "v1.8.0" /* bench/peer-go/go.mod */
#define EXEC_AIM_MS        250.0 /* issue 17: `kode-gopher exec` of a stdlib snippet */

/* ---------------------------------------------------------------- the table */

struct row {
	char figure[96];
	char median[32];
	char p90[32];
	char n[16];
	char note[512];
};

static struct row rows[MAX_ROWS];
static int nrows;
static int failures; /* measurements that could not be made: the exit status */

/* row_add - append a row; note is printf-style */
static void row_add(const char *figure, const char *median, const char *p90, int n,
		    const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static void row_add(const char *figure, const char *median, const char *p90, int n,
		    const char *fmt, ...)
{
	if (nrows == MAX_ROWS)
		return;
	struct row *r = &rows[nrows++];
	snprintf(r->figure, sizeof(r->figure), "%s", figure);
	snprintf(r->median, sizeof(r->median), "%s", median);
	snprintf(r->p90, sizeof(r->p90), "%s", p90);
	if (n > 0)
		snprintf(r->n, sizeof(r->n), "%d", n);
	else
		snprintf(r->n, sizeof(r->n), "-");
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(r->note, sizeof(r->note), fmt, ap);
	va_end(ap);
}

/* row_fail - a figure that could not be measured */
static void row_fail(const char *figure, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void row_fail(const char *figure, const char *fmt, ...)
{
	char msg[400];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	row_add(figure, "-", "-", 0, "FAILED: %s", msg);
	failures++;
	fprintf(stderr, "mcpbench: %s: %s\n", figure, msg);
}

/* utf8_width - display width of a cell: code points, since ≤ and µ take one column */
static int utf8_width(const char *s)
{
	int w = 0;
	for (; *s; s++)
		if (((unsigned char)*s & 0xC0) != 0x80)
			w++;
	return w;
}

/* print_cell - a cell padded to width columns */
static void print_cell(const char *s, int width, bool right)
{
	int pad = width - utf8_width(s);
	if (right)
		printf(" %*s%s |", pad > 0 ? pad : 0, "", s);
	else
		printf(" %s%*s |", s, pad > 0 ? pad : 0, "");
}

/* table_print - the markdown table, columns aligned */
static void table_print(void)
{
	const char *head[5] = { "figure", "median", "p90", "n", "note" };
	int w[5];
	for (int c = 0; c < 5; c++)
		w[c] = utf8_width(head[c]) < 3 ? 3 : utf8_width(head[c]); /* markdown wants "--:" */
	for (int i = 0; i < nrows; i++) {
		const char *cell[5] = { rows[i].figure, rows[i].median, rows[i].p90, rows[i].n, rows[i].note };
		for (int c = 0; c < 5; c++)
			if (utf8_width(cell[c]) > w[c])
				w[c] = utf8_width(cell[c]);
	}
	printf("|");
	for (int c = 0; c < 5; c++)
		print_cell(head[c], w[c], c > 0 && c < 4);
	printf("\n|");
	for (int c = 0; c < 5; c++) {
		printf(" ");
		for (int k = 0; k < w[c]; k++)
			putchar(k == w[c] - 1 && c > 0 && c < 4 ? ':' : '-');
		printf(" |");
	}
	printf("\n");
	for (int i = 0; i < nrows; i++) {
		const char *cell[5] = { rows[i].figure, rows[i].median, rows[i].p90, rows[i].n, rows[i].note };
		printf("|");
		for (int c = 0; c < 5; c++)
			print_cell(cell[c], w[c], c > 0 && c < 4);
		printf("\n");
	}
	fflush(stdout);
}

/* ---------------------------------------------------------------- numbers */

/* now_us - monotonic microseconds */
static double now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

/* cmp_double - qsort order */
static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

/* stats - median (mean of the middle two for even n) and p90 (nearest rank) */
static void stats(const double *v, int n, double *median, double *p90)
{
	double *s = malloc(sizeof(double) * (size_t)(n > 0 ? n : 1));
	if (!s || n == 0) {
		free(s);
		*median = *p90 = NAN;
		return;
	}
	memcpy(s, v, sizeof(double) * (size_t)n);
	qsort(s, (size_t)n, sizeof(double), cmp_double);
	*median = n % 2 ? s[n / 2] : (s[n / 2 - 1] + s[n / 2]) / 2;
	int rank = (int)ceil(0.9 * n);
	*p90 = s[rank > 0 ? rank - 1 : 0];
	free(s);
}

/* fmt_num - a figure with as many decimals as it deserves */
static const char *fmt_num(char *buf, size_t cap, double v)
{
	if (isnan(v))
		snprintf(buf, cap, "-");
	else if (fabs(v) >= 100)
		snprintf(buf, cap, "%.0f", v);
	else if (fabs(v) >= 10)
		snprintf(buf, cap, "%.1f", v);
	else
		snprintf(buf, cap, "%.2f", v);
	return buf;
}

/* row_series - a row with the median and p90 of v */
static void row_series(const char *figure, const double *v, int n, const char *note)
{
	double med, p90;
	char a[32], b[32];
	stats(v, n, &med, &p90);
	row_add(figure, fmt_num(a, sizeof(a), med), n > 1 ? fmt_num(b, sizeof(b), p90) : "-", n,
		"%s", note);
}

/* aim_text - "aim ≤ X unit: met" or "... MISSED" */
static const char *aim_text(char *buf, size_t cap, double value, double aim, const char *unit)
{
	char a[32];
	if (aim == floor(aim)) /* "50", not fmt_num's "50.0" */
		snprintf(a, sizeof(a), "%.0f", aim);
	else
		fmt_num(a, sizeof(a), aim);
	snprintf(buf, cap, "aim ≤ %s%s: %s", a, unit, value <= aim ? "met" : "MISSED");
	return buf;
}

/* ---------------------------------------------------------------- files */

/* rm_cb - nftw callback of rm_tree */
static int rm_cb(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)ftw;
	if (flag == FTW_DP)
		rmdir(path);
	else
		unlink(path);
	return 0;
}

/* chmod_cb - nftw callback that makes directories writable before rm_tree empties them */
static int chmod_cb(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)ftw;
	if (flag == FTW_D && (st->st_mode & 0700) != 0700)
		chmod(path, 0700);
	return 0;
}

/* rm_tree - remove a directory we created; never follows symlinks out of it */
static void rm_tree(const char *path)
{
	/* go leaves module-cache directories read-only, which stops unlink for non-root */
	nftw(path, chmod_cb, 16, FTW_PHYS);
	nftw(path, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
}

/* read_file - a whole file, NUL-terminated */
static char *read_file(const char *path, size_t *len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return NULL;
	size_t cap = 4096, n = 0;
	char *buf = malloc(cap);
	for (;;) {
		if (!buf)
			break;
		if (n + 1 >= cap) {
			char *nb = realloc(buf, cap *= 2);
			if (!nb) {
				free(buf);
				buf = NULL;
				break;
			}
			buf = nb;
		}
		ssize_t r = read(fd, buf + n, cap - n - 1);
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		n += (size_t)r;
	}
	close(fd);
	if (buf) {
		buf[n] = '\0';
		if (len)
			*len = n;
	}
	return buf;
}

/* write_file - create path with data */
static int write_file(const char *path, const char *data, size_t len)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return -errno;
	while (len > 0) {
		ssize_t w = write(fd, data, len);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0) {
			int e = errno;
			close(fd);
			return -e;
		}
		data += w;
		len -= (size_t)w;
	}
	return close(fd) == 0 ? 0 : -errno;
}

/* copy_file - src to dst */
static int copy_file(const char *src, const char *dst)
{
	size_t len;
	char *d = read_file(src, &len);
	if (!d)
		return -errno;
	int r = write_file(dst, d, len);
	free(d);
	return r;
}

/* log_tail - the last lines of the server's stderr, to explain a failure */
static void log_tail(const char *path)
{
	size_t len;
	char *d = read_file(path, &len);
	if (!d)
		return;
	const char *p = d + len;
	for (int lines = 0; p > d && lines < 16; p--)
		if (p[-1] == '\n' && p != d + len)
			lines++;
	fprintf(stderr, "--- last lines of kode-gopher's stderr (%s) ---\n%s", path, p);
	free(d);
}

/* ---------------------------------------------------------------- the server */

struct go_capture;
static struct go_capture *capture_active;
static void capture_poll(void);
static bool capture_watching(void);
static int task_children(pid_t pid, pid_t *out, int max);

struct server {
	pid_t pid;
	int to, from;          /* its stdin, its stdout */
	char *buf;             /* bytes read from its stdout, not yet consumed */
	size_t len, cap;
	long next_id;
	char log_path[PATH_MAX];
	char sandbox_root[PATH_MAX];
};

/* server_start_argv - argv (an MCP server on stdio) on pipes, stderr to log_path */
static int server_start_argv(struct server *s, char *const argv[], const char *sandbox_root,
			     const char *runtime_dir, const char *log_path)
{
	const char *bin = argv[0];
	memset(s, 0, sizeof(*s));
	s->to = s->from = -1;
	snprintf(s->log_path, sizeof(s->log_path), "%s", log_path);
	snprintf(s->sandbox_root, sizeof(s->sandbox_root), "%s", sandbox_root);
	int in[2], out[2];
	if (pipe2(in, O_CLOEXEC) < 0)
		return -errno;
	if (pipe2(out, O_CLOEXEC) < 0) {
		int e = errno;
		close(in[0]);
		close(in[1]);
		return -e;
	}
	int logfd = open(log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
	pid_t pid = fork();
	if (pid < 0) {
		int e = errno;
		close(in[0]), close(in[1]), close(out[0]), close(out[1]);
		if (logfd >= 0)
			close(logfd);
		return -e;
	}
	if (pid == 0) {
		dup2(in[0], STDIN_FILENO);
		dup2(out[1], STDOUT_FILENO);
		if (logfd >= 0)
			dup2(logfd, STDERR_FILENO);
		setenv("KODE_GOPHER_SANDBOX_ROOT", sandbox_root, 1);
		setenv("KODE_GOPHER_RUNTIME_DIR", runtime_dir, 1);
		signal(SIGPIPE, SIG_DFL);
		execv(bin, argv);
		fprintf(stderr, "mcpbench: cannot run %s: %s\n", bin, strerror(errno));
		_exit(127);
	}
	close(in[0]);
	close(out[1]);
	if (logfd >= 0)
		close(logfd);
	s->pid = pid;
	s->to = in[1];
	s->from = out[0];
	return 0;
}

/* server_stop - close its stdin (the end of the session) and wait; kill if it lingers */
static void server_stop(struct server *s)
{
	if (s->to >= 0)
		close(s->to);
	s->to = -1;
	if (s->pid > 0) {
		int st;
		bool gone = false;
		for (int i = 0; i < 100 && !gone; i++) {
			if (waitpid(s->pid, &st, WNOHANG) == s->pid)
				gone = true;
			else
				usleep(50000);
		}
		if (!gone) {
			fprintf(stderr, "mcpbench: kode-gopher did not exit 5 s after its stdin closed; "
					"sending SIGTERM\n");
			kill(s->pid, SIGTERM);
			for (int i = 0; i < 40 && !gone; i++) {
				if (waitpid(s->pid, &st, WNOHANG) == s->pid)
					gone = true;
				else
					usleep(50000);
			}
			if (!gone) {
				kill(s->pid, SIGKILL);
				waitpid(s->pid, &st, 0);
			}
		}
		s->pid = 0;
	}
	if (s->from >= 0)
		close(s->from);
	s->from = -1;
	free(s->buf);
	s->buf = NULL;
	s->len = s->cap = 0;
}

/* server_write - the whole message, one line */
static int server_write(struct server *s, const char *data, size_t len)
{
	while (len > 0) {
		ssize_t w = write(s->to, data, len);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			return -errno;
		data += w;
		len -= (size_t)w;
	}
	return 0;
}

/* server_read_line - the next line of its stdout (NUL-terminated in place, valid until the
 * next read); *consumed tells the caller how much to drop afterwards */
static int server_read_line(struct server *s, int timeout_ms, char **line, size_t *consumed)
{
	double deadline = now_us() + timeout_ms * 1000.0;
	for (;;) {
		char *nl = s->len ? memchr(s->buf, '\n', s->len) : NULL;
		if (nl) {
			*nl = '\0';
			*line = s->buf;
			*consumed = (size_t)(nl - s->buf) + 1;
			return 0;
		}
		if (s->len >= MAX_LINE)
			return -EMSGSIZE;
		double left = (deadline - now_us()) / 1000.0;
		if (left <= 0)
			return -ETIMEDOUT;
		/* while the agent's go command is being looked for, wake up every few ms to look */
		bool watch = capture_watching();
		int wait = watch && left > CAPTURE_POLL_MS ? CAPTURE_POLL_MS : (int)left + 1;
		struct pollfd p = { .fd = s->from, .events = POLLIN };
		int r = poll(&p, 1, wait);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -errno;
		if (r == 0) {
			if (watch)
				capture_poll();
			continue;
		}
		if (s->cap - s->len < 65536) {
			size_t ncap = s->cap ? s->cap * 2 : 131072;
			char *nb = realloc(s->buf, ncap);
			if (!nb)
				return -ENOMEM;
			s->buf = nb;
			s->cap = ncap;
		}
		ssize_t n = read(s->from, s->buf + s->len, s->cap - s->len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			return -EPIPE;
		s->len += (size_t)n;
	}
}

/* server_consume - drop a line server_read_line returned */
static void server_consume(struct server *s, size_t n)
{
	memmove(s->buf, s->buf + n, s->len - n);
	s->len -= n;
}

/* server_send_json - one message as a line (steals msg) */
static int server_send_json(struct server *s, json_t *msg)
{
	char *text = json_dumps(msg, JSON_COMPACT);
	json_decref(msg);
	if (!text)
		return -ENOMEM;
	size_t n = strlen(text);
	text[n] = '\n'; /* replaces the NUL: written with its length */
	int r = server_write(s, text, n + 1);
	free(text);
	return r;
}

/* rpc - one request and its response; *elapsed_us from writing to having read the response.
 * Notifications in between are skipped; requests from the server get "method not found". */
static int rpc(struct server *s, const char *method, json_t *params, int timeout_ms,
	       json_t **response, double *elapsed_us, char *err, size_t errlen)
{
	long id = ++s->next_id;
	json_t *req = json_pack("{s:s, s:I, s:s}", "jsonrpc", "2.0", "id", (json_int_t)id, "method", method);
	if (params)
		json_object_set_new(req, "params", params);
	char *text = json_dumps(req, JSON_COMPACT);
	json_decref(req);
	if (!text) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	size_t tlen = strlen(text);
	text[tlen] = '\n';
	double t0 = now_us();
	int r = server_write(s, text, tlen + 1);
	free(text);
	if (r < 0) {
		snprintf(err, errlen, "cannot write to kode-gopher: %s", strerror(-r));
		return r;
	}
	for (;;) {
		char *line = NULL;
		size_t used = 0;
		r = server_read_line(s, timeout_ms, &line, &used);
		double t1 = now_us();
		if (r < 0) {
			snprintf(err, errlen, "%s", r == -EPIPE ? "kode-gopher closed its stdout (it exited?)"
					       : r == -ETIMEDOUT ? "no response within the timeout"
								 : strerror(-r));
			return r;
		}
		json_error_t je;
		json_t *msg = json_loads(line, 0, &je);
		server_consume(s, used);
		if (!json_is_object(msg)) {
			json_decref(msg);
			snprintf(err, errlen, "kode-gopher wrote a line that is not a JSON object: %s", je.text);
			return -EPROTO;
		}
		json_t *mid = json_object_get(msg, "id");
		const char *m = json_string_value(json_object_get(msg, "method"));
		if (m && mid) {
			json_t *ans = json_pack("{s:s, s:O, s:{s:i, s:s}}", "jsonrpc", "2.0", "id", mid,
						"error", "code", -32601, "message", "mcpbench answers no requests");
			json_decref(msg);
			server_send_json(s, ans);
			continue;
		}
		if (!m && json_is_integer(mid) && json_integer_value(mid) == id) {
			if (elapsed_us)
				*elapsed_us = t1 - t0;
			*response = msg;
			return 0;
		}
		json_decref(msg); /* a notification, or a stray response */
	}
}

/* session_open_argv - start argv, initialize, notifications/initialized */
static int session_open_argv(struct server *s, char *const argv[], const char *sandbox_root,
			     const char *runtime_dir, const char *log_path)
{
	int r = server_start_argv(s, argv, sandbox_root, runtime_dir, log_path);
	if (r < 0) {
		fprintf(stderr, "mcpbench: cannot start %s: %s\n", argv[0], strerror(-r));
		return r;
	}
	json_t *resp = NULL;
	char err[300];
	json_t *params = json_pack("{s:s, s:{}, s:{s:s, s:s}}", "protocolVersion", "2025-06-18",
				   "capabilities", "clientInfo", "name", "mcpbench", "version", "1");
	r = rpc(s, "initialize", params, INIT_TIMEOUT_MS, &resp, NULL, err, sizeof(err));
	if (r == 0 && !json_object_get(resp, "result")) {
		const char *m = json_string_value(json_object_get(json_object_get(resp, "error"), "message"));
		snprintf(err, sizeof(err), "initialize failed: %s", m ? m : "no result");
		r = -EPROTO;
	}
	json_decref(resp);
	if (r == 0)
		r = server_send_json(s, json_pack("{s:s, s:s}", "jsonrpc", "2.0", "method",
						  "notifications/initialized"));
	if (r < 0) {
		fprintf(stderr, "mcpbench: %s\n", err);
		log_tail(s->log_path);
		server_stop(s);
	}
	return r;
}

/* session_open - start `bin serve`, initialize, notifications/initialized */
static int session_open(struct server *s, const char *bin, const char *sandbox_root,
			const char *runtime_dir, const char *log_path)
{
	char *const argv[] = { (char *)bin, "serve", NULL };
	return session_open_argv(s, argv, sandbox_root, runtime_dir, log_path);
}

/* ---------------------------------------------------------------- /proc */

struct procmem {
	pid_t pid;
	long rss_kb, hwm_kb;
};

/* proc_mem - VmRSS and VmHWM of pid */
static int proc_mem(pid_t pid, struct procmem *m)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	char *d = read_file(path, NULL);
	if (!d)
		return -errno;
	m->pid = pid;
	m->rss_kb = m->hwm_kb = -1;
	char *p;
	if ((p = strstr(d, "\nVmRSS:")))
		m->rss_kb = strtol(p + 7, NULL, 10);
	if ((p = strstr(d, "\nVmHWM:")))
		m->hwm_kb = strtol(p + 7, NULL, 10);
	free(d);
	return m->rss_kb >= 0 ? 0 : -ENOENT;
}

/* proc_ppid - the parent of pid, from /proc/PID/stat (after the command's closing paren) */
static pid_t proc_ppid(pid_t pid)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	char *d = read_file(path, NULL);
	if (!d)
		return -1;
	char *p = strrchr(d, ')');
	int ppid = -1;
	if (p)
		sscanf(p + 1, " %*c %d", &ppid);
	free(d);
	return ppid;
}

/* proc_children - pids whose parent is ppid */
static int proc_children(pid_t ppid, pid_t *out, int max)
{
	DIR *d = opendir("/proc");
	if (!d)
		return 0;
	int n = 0;
	struct dirent *e;
	while ((e = readdir(d)) != NULL && n < max) {
		char *end;
		long pid = strtol(e->d_name, &end, 10);
		if (*end || pid <= 0)
			continue;
		if (proc_ppid((pid_t)pid) == ppid)
			out[n++] = (pid_t)pid;
	}
	closedir(d);
	return n;
}

/* The processes of a local sandbox, as master/sandbox_local.c and policy/jail.c start them:
 * serve forks `kode-gopher jail ...` (A, in our pid namespace), which forks B (the same
 * command line, pid 1 of the sandbox's pid namespace), which forks and execs `kode-gopher
 * agent ...`. All are descendants of serve, seen here with their host pids. */
enum proc_role { ROLE_OTHER, ROLE_WORKER, ROLE_JAIL, ROLE_AGENT };

struct sbprocs {
	pid_t worker, jail_a, jail_b, agent;
	int nworkers;
	long worker_rss_kb, worker_hwm_kb; /* summed over the workers */
	char dir[PATH_MAX];                /* the sandbox directory: A's --dir */
};

static char **proc_strv(pid_t pid, const char *what);
static void strv_free(char **v);

/* proc_role - what a descendant of serve is, by its command line */
static enum proc_role proc_role(pid_t pid, char *dir, size_t dircap)
{
	char **argv = proc_strv(pid, "cmdline");
	enum proc_role role = ROLE_OTHER;
	if (argv && argv[0]) {
		const char *base = strrchr(argv[0], '/');
		base = base ? base + 1 : argv[0];
		if (strncmp(argv[0], "kode-gopher: worker", 19) == 0)
			role = ROLE_WORKER;
		else if (strcmp(base, "kode-gopher") == 0 && argv[1] && strcmp(argv[1], "agent") == 0)
			role = ROLE_AGENT;
		else if (strcmp(base, "kode-gopher") == 0 && argv[1] && strcmp(argv[1], "jail") == 0)
			role = ROLE_JAIL;
		/* the jail's options end at "--": after it come the agent's */
		for (char **p = argv + 1; role == ROLE_JAIL && dir && *p && strcmp(*p, "--"); p++)
			if (strcmp(*p, "--dir") == 0 && p[1])
				snprintf(dir, dircap, "%s", p[1]);
	}
	strv_free(argv);
	return role;
}

/* sandbox_procs - the worker(s), the jail's two processes and the agent below serve */
static void sandbox_procs(pid_t serve, struct sbprocs *sp)
{
	memset(sp, 0, sizeof(*sp));
	pid_t level[64], next[64], parent_of[64];
	int nl = 1;
	level[0] = serve;
	/* serve > A > B > agent: three levels; the agent's own children are not looked at */
	for (int depth = 0; depth < 3 && nl > 0; depth++) {
		int nn = 0;
		for (int i = 0; i < nl && nn < 64; i++) {
			int k = task_children(level[i], next + nn, 64 - nn);
			for (int j = 0; j < k; j++)
				parent_of[nn + j] = level[i];
			nn += k;
		}
		int keep = 0;
		for (int i = 0; i < nn; i++) {
			char dir[PATH_MAX] = "";
			struct procmem m;
			switch (proc_role(next[i], dir, sizeof(dir))) {
			case ROLE_WORKER:
				if (proc_mem(next[i], &m) == 0) {
					sp->worker_rss_kb += m.rss_kb;
					sp->worker_hwm_kb += m.hwm_kb;
					if (!sp->worker)
						sp->worker = next[i];
					sp->nworkers++;
				}
				break;
			case ROLE_AGENT:
				if (!sp->agent)
					sp->agent = next[i];
				break;
			case ROLE_JAIL:
				if (parent_of[i] == serve && !sp->jail_a) {
					sp->jail_a = next[i];
					snprintf(sp->dir, sizeof(sp->dir), "%s", dir);
				} else if (parent_of[i] == sp->jail_a && !sp->jail_b) {
					sp->jail_b = next[i];
				}
				next[keep++] = next[i];
				break;
			default: /* e.g. a fork of serve that has not exec'd yet */
				break;
			}
		}
		memcpy(level, next, sizeof(pid_t) * (size_t)keep);
		nl = keep;
	}
}

/* rss_rows - rows for the master, its worker and (if it runs) its agent */
static void rss_rows(struct server *s, const char *when)
{
	char fig[96], a[32], b[32];
	struct procmem m;
	snprintf(fig, sizeof(fig), "RSS master, %s (MiB)", when);
	if (proc_mem(s->pid, &m) == 0)
		row_add(fig, fmt_num(a, sizeof(a), m.rss_kb / 1024.0), "-", 1, "VmHWM %s MiB; pid %d",
			fmt_num(b, sizeof(b), m.hwm_kb / 1024.0), (int)s->pid);
	else
		row_fail(fig, "cannot read /proc/%d/status", (int)s->pid);

	struct sbprocs sp;
	sandbox_procs(s->pid, &sp);
	snprintf(fig, sizeof(fig), "RSS worker, %s (MiB)", when);
	if (sp.nworkers)
		row_add(fig, fmt_num(a, sizeof(a), sp.worker_rss_kb / 1024.0), "-", sp.nworkers,
			"VmHWM %s MiB%s", fmt_num(b, sizeof(b), sp.worker_hwm_kb / 1024.0),
			sp.nworkers > 1 ? "; sum over the workers" : "");
	else
		row_fail(fig, "no child of pid %d whose cmdline begins \"kode-gopher: worker\"", (int)s->pid);
	snprintf(fig, sizeof(fig), "RSS agent, %s (MiB)", when);
	struct procmem ja = { 0 }, jb = { 0 };
	if (sp.agent && proc_mem(sp.agent, &m) == 0) {
		char jail[96] = "";
		if (sp.jail_a && proc_mem(sp.jail_a, &ja) == 0 && sp.jail_b && proc_mem(sp.jail_b, &jb) == 0)
			snprintf(jail, sizeof(jail), "; the jail's own two processes: %s MiB more",
				 fmt_num(b, sizeof(b), (ja.rss_kb + jb.rss_kb) / 1024.0));
		row_add(fig, fmt_num(a, sizeof(a), m.rss_kb / 1024.0), "-", 1,
			"VmHWM %s MiB; for information (go build and the program are its children)%s",
			fmt_num(b, sizeof(b), m.hwm_kb / 1024.0), jail);
	} else {
		row_add(fig, "-", "-", 0, "not running (yet): the worker asks for its sandbox at start-up");
	}
}

/* ---------------------------------------------------------------- tool calls */

struct call_rec {
	double e2e_ms, build_ms, duration_ms;
	double claim_ms; /* timings.claim_ms, added by the worker; NAN when absent */
	bool ok, cached, tidied;
	bool direct; /* build_path "direct": compile and link without the go command */
	char sandbox[64];
	char err[400];
};

/* num_field - a number field of the result, NAN when absent */
static double num_field(json_t *o, const char *key)
{
	json_t *v = json_object_get(o, key);
	return json_is_number(v) ? json_number_value(v) : NAN;
}

/* call_failure - one sentence saying why a call did not run to a result of kind ok */
static void call_failure(json_t *sc, json_t *result, char *buf, size_t cap)
{
	if (!sc) {
		const char *t = json_string_value(
			json_object_get(json_array_get(json_object_get(result, "content"), 0), "text"));
		snprintf(buf, cap, "tool error: %.300s", t ? t : "(no text)");
		return;
	}
	const char *phase = json_string_value(json_object_get(sc, "phase"));
	json_t *res = json_object_get(sc, "result");
	const char *kind = json_string_value(json_object_get(res, "kind"));
	const char *msg = json_string_value(json_object_get(res, "message"));
	json_t *d0 = json_array_get(json_object_get(sc, "diagnostics"), 0);
	const char *dmsg = json_string_value(json_object_get(d0, "message"));
	const char *bout = json_string_value(json_object_get(sc, "build_output"));
	snprintf(buf, cap, "phase %s, kind %s: %.250s", phase ? phase : "?", kind ? kind : "?",
		 msg ? msg : dmsg ? dmsg : bout ? bout : "");
	for (char *p = buf; *p; p++)
		if (*p == '\n' || *p == '|')
			*p = ' ';
}

/* tool_exec - one execute_go_code call with a bare `code` string */
static int tool_exec(struct server *s, const char *code, struct call_rec *c)
{
	memset(c, 0, sizeof(*c));
	c->build_ms = c->duration_ms = c->claim_ms = NAN;
	json_t *params = json_pack("{s:s, s:{s:s}}", "name", "execute_go_code", "arguments", "code", code);
	json_t *resp = NULL;
	double us;
	int r = rpc(s, "tools/call", params, CALL_TIMEOUT_MS, &resp, &us, c->err, sizeof(c->err));
	if (r < 0)
		return r;
	c->e2e_ms = us / 1000.0;
	json_t *result = json_object_get(resp, "result");
	if (!result) {
		const char *m = json_string_value(json_object_get(json_object_get(resp, "error"), "message"));
		snprintf(c->err, sizeof(c->err), "JSON-RPC error: %.300s", m ? m : "(no message)");
		json_decref(resp);
		return -EPROTO;
	}
	json_t *sc = json_object_get(result, "structuredContent");
	if (sc) {
		c->build_ms = num_field(sc, "build_ms");
		c->duration_ms = num_field(sc, "duration_ms");
		c->claim_ms = num_field(json_object_get(sc, "timings"), "claim_ms");
		c->cached = json_is_true(json_object_get(sc, "cached_build"));
		c->tidied = json_is_true(json_object_get(sc, "tidied"));
		const char *bp = json_string_value(json_object_get(sc, "build_path"));
		c->direct = bp && strcmp(bp, "direct") == 0;
		const char *sb = json_string_value(json_object_get(sc, "sandbox"));
		snprintf(c->sandbox, sizeof(c->sandbox), "%s", sb ? sb : "");
	}
	const char *phase = json_string_value(json_object_get(sc, "phase"));
	const char *kind = json_string_value(json_object_get(json_object_get(sc, "result"), "kind"));
	c->ok = sc && !json_is_true(json_object_get(result, "isError")) && phase &&
		strcmp(phase, "run") == 0 && kind && strcmp(kind, "ok") == 0;
	if (!c->ok)
		call_failure(sc, result, c->err, sizeof(c->err));
	json_decref(resp);
	return c->ok ? 0 : -EPROTO;
}

/* The snippets. Every source carries a tag "kgbench-<run nonce>-<series>-<iteration>" so that
 * no two calls of a run, and no two runs, share a compiled main package in the build cache;
 * the by-hand series swaps the series letter in the agent's normalized files. */
static char nonce[9];

/* code_stdlib - the standard-library snippet */
static char *code_stdlib(char series, int i)
{
	char *s = NULL;
	if (asprintf(&s,
		     "package snippet\n\n"
		     "import (\n\t\"context\"\n\t\"fmt\"\n)\n\n"
		     "const benchTag = \"kgbench-%s-%c-%04d\"\n\n"
		     "func run(ctx context.Context) (any, error) {\n"
		     "\treturn fmt.Sprintf(\"n=%%d %%s\", %d, benchTag), nil\n"
		     "}\n",
		     nonce, series, i, i) < 0)
		return NULL;
	return s;
}

/* code_storage - the storage-client snippet */
static char *code_storage(char series, int i)
{
	char *s = NULL;
	if (asprintf(&s,
		     "package snippet\n\n"
		     "import (\n\t\"context\"\n\n"
		     "\t\"cloud.google.com/go/storage\"\n"
		     "\t\"google.golang.org/api/option\"\n)\n\n"
		     "const benchTag = \"kgbench-%s-%c-%04d\"\n\n"
		     "func run(ctx context.Context) (any, error) {\n"
		     "\tclient, err := storage.NewClient(ctx, option.WithoutAuthentication())\n"
		     "\tif err != nil {\n\t\treturn nil, err\n\t}\n"
		     "\tdefer client.Close()\n"
		     "\treturn map[string]string{\"tag\": benchTag, "
		     "\"bucket\": client.Bucket(\"kode-gopher-bench\").BucketName()}, nil\n"
		     "}\n",
		     nonce, series, i) < 0)
		return NULL;
	return s;
}

/* code_uuid - imports a module the lockfile lists only as indirect */
static char *code_uuid(char series, int i)
{
	char *s = NULL;
	if (asprintf(&s,
		     "package snippet\n\n"
		     "import (\n\t\"context\"\n\n\t\"github.com/google/uuid\"\n)\n\n"
		     "const benchTag = \"kgbench-%s-%c-%04d\"\n\n"
		     "func run(ctx context.Context) (any, error) {\n"
		     "\treturn map[string]string{\"tag\": benchTag, \"id\": uuid.NewString()}, nil\n"
		     "}\n",
		     nonce, series, i) < 0)
		return NULL;
	return s;
}

/* code_tidy - imports a module outside the lockfile */
static char *code_tidy(char series, int i)
{
	char *s = NULL;
	if (asprintf(&s,
		     "package snippet\n\n"
		     "import (\n\t\"context\"\n\n\t\"" TIDY_MODULE "\"\n)\n\n"
		     "const benchTag = \"kgbench-%s-%c-%04d\"\n\n"
		     "func run(ctx context.Context) (any, error) {\n"
		     "\tt := btree.NewOrderedG[int](4)\n"
		     "\tfor i := 0; i < 100; i++ {\n\t\tt.ReplaceOrInsert(i)\n\t}\n"
		     "\treturn map[string]any{\"tag\": benchTag, \"len\": t.Len()}, nil\n"
		     "}\n",
		     nonce, series, i) < 0)
		return NULL;
	return s;
}

/* call_once - one call of code; on failure a FAILED row under figure */
static int call_once(struct server *s, char *code, const char *figure, struct call_rec *c)
{
	if (!code) {
		row_fail(figure, "out of memory");
		return -ENOMEM;
	}
	int r = tool_exec(s, code, c);
	free(code);
	if (r < 0) {
		row_fail(figure, "%s", c->err);
		log_tail(s->log_path);
	}
	return r;
}

/* series_rows - end to end (with its aim), build_ms and duration_ms rows of a series */
static void series_rows(const char *figure, const char *short_name, struct call_rec *c, int n,
			double aim_ms, int want_cached, double *median_out)
{
	double *e = calloc((size_t)n, sizeof(double)), *b = calloc((size_t)n, sizeof(double)),
	       *d = calloc((size_t)n, sizeof(double));
	int cached = 0, tidied = 0, direct = 0, nb = 0, nd = 0;
	for (int i = 0; i < n; i++) {
		direct += c[i].direct;
		e[i] = c[i].e2e_ms;
		if (!isnan(c[i].build_ms))
			b[nb++] = c[i].build_ms;
		if (!isnan(c[i].duration_ms))
			d[nd++] = c[i].duration_ms;
		cached += c[i].cached;
		tidied += c[i].tidied;
	}
	double med, p90;
	stats(e, n, &med, &p90);
	if (median_out)
		*median_out = med;
	char note[300], aim[64];
	bool odd = (want_cached == 0 && cached > 0) || (want_cached == 1 && cached < n);
	snprintf(note, sizeof(note), "%s%scached_build %d/%d%s, tidied %d/%d%s, build_path direct %d/%d",
		 aim_ms > 0 ? aim_text(aim, sizeof(aim), med, aim_ms, " ms") : "", aim_ms > 0 ? "; " : "",
		 cached, n, odd ? (want_cached ? " (UNEXPECTED: all should be)" : " (UNEXPECTED: none should be)") : "",
		 tidied, n, tidied ? " (UNEXPECTED)" : "", direct, n);
	char fig[96];
	snprintf(fig, sizeof(fig), "%s (ms)", figure);
	row_series(fig, e, n, note);
	snprintf(fig, sizeof(fig), "  %s: build_ms", short_name);
	row_series(fig, b, nb, "as the result reports it");
	snprintf(fig, sizeof(fig), "  %s: duration_ms", short_name);
	row_series(fig, d, nd, "as the result reports it");
	free(e), free(b), free(d);
}

/* run_series - n calls of gen(series, i); 0 when all ran to a result of kind ok */
static int run_series(struct server *s, const char *figure, char *(*gen)(char, int), char series,
		      int n, struct call_rec *c)
{
	for (int i = 0; i < n; i++) {
		fprintf(stderr, "\r  %s: %d/%d", figure, i + 1, n);
		if (call_once(s, gen(series, i), figure, &c[i]) < 0) {
			fprintf(stderr, "\n");
			return -1;
		}
	}
	fprintf(stderr, "\n");
	return 0;
}

/* ---------------------------------------------------------------- by hand */

/* The by-hand build mirrors the agent's own `go build`: while the first storage call runs,
 * mcpbench watches the server's descendants for a process whose argv is `go build ...` and
 * copies its argv and environment (so a flag or variable added to agent/gobuild.c is mirrored
 * without touching this file). Only the paths that are the agent's own (HOME, TMPDIR, the -o
 * target) are replaced with ours. If no such process is seen, a static copy of gobuild.c's
 * go_env() as of this writing is used, and the table says so. */
struct go_capture {
	pid_t root;          /* the serve process */
	bool done;
	bool jailed;         /* in another mount namespace: its paths are not ours */
	char **argv, **envp; /* NULL-terminated, owned */
};

/* capture_watching - is a call in flight whose go command we still look for? */
static bool capture_watching(void)
{
	return capture_active && !capture_active->done;
}

/* strv_free - free a NULL-terminated array of strings */
static void strv_free(char **v)
{
	if (!v)
		return;
	for (char **p = v; *p; p++)
		free(*p);
	free(v);
}

/* proc_strv - /proc/PID/<what> (cmdline or environ) as a NULL-terminated array */
static char **proc_strv(pid_t pid, const char *what)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/%s", (int)pid, what);
	size_t len;
	char *d = read_file(path, &len);
	if (!d)
		return NULL;
	size_t n = 0;
	for (size_t i = 0; i < len; i++)
		n += d[i] == '\0';
	char **v = calloc(n + 2, sizeof(char *));
	size_t k = 0;
	for (size_t i = 0; v && i < len; i += strlen(d + i) + 1)
		if (!(v[k++] = strdup(d + i))) {
			strv_free(v);
			v = NULL;
		}
	free(d);
	return v;
}

/* task_children - children of every thread of pid (a fork from any thread is listed under
 * that thread); falls back to scanning /proc without CONFIG_PROC_CHILDREN */
static int task_children(pid_t pid, pid_t *out, int max)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	DIR *d = opendir(path);
	if (!d)
		return 0;
	int n = 0;
	bool have = false;
	struct dirent *e;
	while ((e = readdir(d)) != NULL && n < max) {
		if (e->d_name[0] == '.')
			continue;
		char cp[96];
		snprintf(cp, sizeof(cp), "/proc/%d/task/%s/children", (int)pid, e->d_name);
		char *c = read_file(cp, NULL);
		if (!c)
			continue;
		have = true;
		for (char *p = c, *end; n < max; p = end) {
			long v = strtol(p, &end, 10);
			if (end == p)
				break;
			out[n++] = (pid_t)v;
		}
		free(c);
	}
	closedir(d);
	return have ? n : proc_children(pid, out, max);
}

/* capture_poll - look for `go build` among the server's descendants (four levels deep) */
static void capture_poll(void)
{
	struct go_capture *c = capture_active;
	if (!c || c->done)
		return;
	pid_t level[64], next[64];
	int nl = 1;
	level[0] = c->root;
	for (int depth = 0; depth < 4 && nl > 0; depth++) {
		int nn = 0;
		for (int i = 0; i < nl && nn < 64; i++)
			nn += task_children(level[i], next + nn, 64 - nn);
		for (int i = 0; i < nn; i++) {
			char **argv = proc_strv(next[i], "cmdline");
			const char *base = argv && argv[0] ? strrchr(argv[0], '/') : NULL;
			base = base ? base + 1 : argv ? argv[0] : NULL;
			if (base && strcmp(base, "go") == 0 && argv[1] && strcmp(argv[1], "build") == 0) {
				char **envp = proc_strv(next[i], "environ");
				/* an environ read between fork and exec would be the agent's: go's own
				 * always has GOCACHE, which the agent sets for every go command */
				bool ok = false;
				for (char **p = envp; p && *p; p++)
					ok |= strncmp(*p, "GOCACHE=", 8) == 0;
				if (ok) {
					char mine[64] = "", theirs[64] = "", path[64];
					snprintf(path, sizeof(path), "/proc/%d/ns/mnt", (int)next[i]);
					if (readlink("/proc/self/ns/mnt", mine, sizeof(mine) - 1) < 0 ||
					    readlink(path, theirs, sizeof(theirs) - 1) < 0)
						theirs[0] = '?';
					c->jailed = strcmp(mine, theirs) != 0;
					c->argv = argv;
					c->envp = envp;
					c->done = true;
					return;
				}
				strv_free(envp);
			}
			strv_free(argv);
		}
		memcpy(level, next, sizeof(pid_t) * (size_t)nn);
		nl = nn;
	}
}

struct hand {
	char root[PATH_MAX];        /* our temp dir for the by-hand builds */
	char runtime_dir[PATH_MAX];
	char go[PATH_MAX];          /* argv[0] of go build, resolved on the mirrored PATH */
	char **env_build;           /* NULL-terminated, owned */
	char **argv_build;          /* NULL-terminated, owned; argv_build[out_index] is the -o target */
	int out_index;
	char *env_run[8];
	char source[200];           /* where the go command came from, for the table */
	char gocache[PATH_MAX];
	struct { char name[256]; char *data; size_t len; } files[32];
	int nfiles;
};

/* env_path - PATH as agent/pipeline.c computes it: the inherited one, else its default */
static const char *env_path(const char *fallback)
{
	const char *p = getenv("PATH");
	return p && *p ? p : fallback;
}

/* find_go - an absolute go as is, else the first on path */
static int find_go(const char *go, const char *path_list, char *out, size_t cap)
{
	if (strchr(go, '/')) {
		snprintf(out, cap, "%s", go);
		return access(out, X_OK) == 0 ? 0 : -ENOENT;
	}
	char *path = strdup(path_list), *save = NULL;
	if (!path)
		return -ENOMEM;
	for (char *dir = strtok_r(path, ":", &save); dir; dir = strtok_r(NULL, ":", &save)) {
		snprintf(out, cap, "%s/%s", *dir ? dir : ".", go);
		if (access(out, X_OK) == 0) {
			free(path);
			return 0;
		}
	}
	free(path);
	return -ENOENT;
}

/* strv_dup_add - *v gets "NAME=value" appended (a NULL-terminated array that grows) */
static int strv_add(char ***v, int *n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int strv_add(char ***v, int *n, const char *fmt, ...)
{
	char **nv = realloc(*v, sizeof(char *) * (size_t)(*n + 2));
	if (!nv)
		return -ENOMEM;
	*v = nv;
	va_list ap;
	va_start(ap, fmt);
	int r = vasprintf(&nv[*n], fmt, ap);
	va_end(ap);
	if (r < 0)
		return -ENOMEM;
	nv[++*n] = NULL;
	return 0;
}

/* env_value - the value of NAME in a NULL-terminated environment, or NULL */
static const char *env_value(char **envp, const char *name)
{
	size_t l = strlen(name);
	for (char **p = envp; p && *p; p++)
		if (strncmp(*p, name, l) == 0 && (*p)[l] == '=')
			return *p + l + 1;
	return NULL;
}

/* hand_env - the go command and its environment (captured, or the static mirror), and the
 * program's environment, a copy of build_run_env() in agent/pipeline.c (its HOME is the app
 * dir: here the by-hand root) */
static int hand_env(struct hand *h, const struct go_capture *cap, char *err, size_t errlen)
{
	char home[PATH_MAX + 8], tmp[PATH_MAX + 8], mod[PATH_MAX + 16];
	snprintf(home, sizeof(home), "%s/home", h->root);
	snprintf(tmp, sizeof(tmp), "%s/tmp", h->root);
	if ((mkdir(home, 0700) && errno != EEXIST) || (mkdir(tmp, 0700) && errno != EEXIST)) {
		snprintf(err, errlen, "mkdir %s: %s", home, strerror(errno));
		return -errno;
	}
	snprintf(h->gocache, sizeof(h->gocache), "%s/gocache", h->runtime_dir);
	snprintf(mod, sizeof(mod), "%s/gomodcache", h->runtime_dir);
	int n = 0, na = 0;
	if (cap && cap->done) {
		/* the agent's caches and PATH, unless it sees another file system (a jail): then its
		 * caches are overlays of the base ones we can only name by the base's path */
		const char *gc = env_value(cap->envp, "GOCACHE"), *gm = env_value(cap->envp, "GOMODCACHE");
		bool own_gc = !cap->jailed && gc && access(gc, W_OK) == 0;
		bool own_gm = !cap->jailed && gm && access(gm, R_OK) == 0;
		if (own_gc)
			snprintf(h->gocache, sizeof(h->gocache), "%s", gc);
		for (char **p = cap->envp; *p; p++) {
			if (strncmp(*p, "HOME=", 5) == 0 || strncmp(*p, "TMPDIR=", 7) == 0 ||
			    (!own_gc && strncmp(*p, "GOCACHE=", 8) == 0) ||
			    (!own_gm && strncmp(*p, "GOMODCACHE=", 11) == 0) ||
			    (cap->jailed && strncmp(*p, "PATH=", 5) == 0))
				continue;
			if (strv_add(&h->env_build, &n, "%s", *p) < 0)
				return -ENOMEM;
		}
		if ((!own_gc && strv_add(&h->env_build, &n, "GOCACHE=%s", h->gocache) < 0) ||
		    (!own_gm && strv_add(&h->env_build, &n, "GOMODCACHE=%s", mod) < 0) ||
		    (cap->jailed && strv_add(&h->env_build, &n, "PATH=%s", env_path(AGENT_GO_PATH)) < 0))
			return -ENOMEM;
		h->out_index = -1;
		for (char **p = cap->argv; *p; p++) {
			/* the by-hand build is `go build` with the agent's flags as a person runs it:
			 * without -work (the agent keeps go's importcfg files for its direct path) and
			 * without the main package's -gcflags (one of the agent's levers measured here) */
			if (strcmp(*p, "-work") == 0 || strncmp(*p, "-gcflags", 8) == 0) {
				if (strcmp(*p, "-gcflags") == 0 && p[1])
					p++;
				continue;
			}
			if (strv_add(&h->argv_build, &na, "%s", *p) < 0)
				return -ENOMEM;
			if (strcmp(*p, "-o") == 0 && p[1])
				h->out_index = na;
		}
		if (h->out_index < 0 || !h->argv_build[h->out_index]) {
			snprintf(err, errlen, "the agent's go build has no -o: cannot mirror it");
			return -EINVAL;
		}
		char shown[160] = "";
		for (int i = 1; i < na && strlen(shown) < 120; i++)
			if (i != h->out_index && strcmp(h->argv_build[i], "-o") && strcmp(h->argv_build[i], "."))
				snprintf(shown + strlen(shown), sizeof(shown) - strlen(shown), "%s%s",
					 i > 1 ? " " : "", h->argv_build[i]);
		const char *gogc = env_value(h->env_build, "GOGC");
		snprintf(h->source, sizeof(h->source), "go %s%s%s, env copied from the agent's own%s",
			 shown, gogc ? ", GOGC=" : "", gogc ? gogc : "",
			 cap->jailed ? " (it runs jailed: caches by their base paths)" : "");
	} else {
		/* static copy of go_env() and gobuild_build() in agent/gobuild.c */
		static const char *const fixed[] = { "GOFLAGS=-mod=mod", "GOTOOLCHAIN=local",
						     "CGO_ENABLED=0",    "GOENV=off",
						     "GOTELEMETRY=off",  "GOGC=400",
						     "GOPROXY=off",      "GOSUMDB=off" };
		if (strv_add(&h->env_build, &n, "PATH=%s", env_path(AGENT_GO_PATH)) < 0 ||
		    strv_add(&h->env_build, &n, "GOMODCACHE=%s", mod) < 0 ||
		    strv_add(&h->env_build, &n, "GOCACHE=%s", h->gocache) < 0)
			return -ENOMEM;
		for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++)
			if (strv_add(&h->env_build, &n, "%s", fixed[i]) < 0)
				return -ENOMEM;
		if (getenv("GOROOT") && strv_add(&h->env_build, &n, "GOROOT=%s", getenv("GOROOT")) < 0)
			return -ENOMEM;
		static const char *const args[] = { "go", "build", "-trimpath", "-buildvcs=false",
						    "-ldflags=-s -w", "-o", "BIN", "." };
		for (size_t i = 0; i < sizeof(args) / sizeof(args[0]); i++)
			if (strv_add(&h->argv_build, &na, "%s", args[i]) < 0)
				return -ENOMEM;
		h->out_index = 6;
		snprintf(h->source, sizeof(h->source), "the agent's go build was not seen: a static copy "
						       "of agent/gobuild.c's flags and env");
	}
	if (strv_add(&h->env_build, &n, "HOME=%s", home) < 0 ||
	    strv_add(&h->env_build, &n, "TMPDIR=%s", tmp) < 0)
		return -ENOMEM;
	const char *path = env_value(h->env_build, "PATH");
	if (find_go(h->argv_build[0], path ? path : AGENT_GO_PATH, h->go, sizeof(h->go)) < 0 &&
	    find_go("go", env_path(AGENT_GO_PATH), h->go, sizeof(h->go)) < 0) {
		snprintf(err, errlen, "%s is not on the agent's PATH %s", h->argv_build[0],
			 path ? path : AGENT_GO_PATH);
		return -ENOENT;
	}
	if (access(h->gocache, W_OK) != 0) {
		snprintf(err, errlen, "%s is not writable: a by-hand build there would not mirror "
				      "the agent's", h->gocache);
		return -EACCES;
	}
	char **r = h->env_run;
	n = 0;
	const char *t = getenv("TMPDIR");
	if (asprintf(&r[n++], "PATH=%s", env_path(AGENT_RUN_PATH)) < 0 ||
	    asprintf(&r[n++], "HOME=%s", h->root) < 0 ||
	    asprintf(&r[n++], "TMPDIR=%s", t && *t ? t : "/tmp") < 0)
		return -ENOMEM;
	if (!(r[n++] = strdup("KODE_GOPHER_TIMEOUT_MS=60000")))
		return -ENOMEM;
	r[n] = NULL; /* KODE_GOPHER_RESULT and KODE_GOPHER_CRASH are added per run */
	return 0;
}

/* hand_capture_dir - the normalized .go files of one app dir; 1 when one carries the tag */
static int hand_capture_dir(struct hand *h, const char *app_dir, char *err, size_t errlen);

/* hand_capture - the agent's normalized .go files: from the sandbox's app dir on the host, or,
 * when /app is on the sandbox's own disk image (--sandbox-disk, as root), through the agent's
 * root (/proc/PID/root/app) */
static int hand_capture(struct hand *h, pid_t serve, const char *app_dir, char *err, size_t errlen)
{
	int r = hand_capture_dir(h, app_dir, err, errlen);
	if (r != -ENOENT)
		return r;
	struct sbprocs sp;
	sandbox_procs(serve, &sp);
	if (!sp.agent)
		return r;
	for (int f = 0; f < h->nfiles; f++)
		free(h->files[f].data);
	h->nfiles = 0;
	char via[PATH_MAX];
	snprintf(via, sizeof(via), "/proc/%d/root/app", (int)sp.agent);
	return hand_capture_dir(h, via, err, errlen);
}

static int hand_capture_dir(struct hand *h, const char *app_dir, char *err, size_t errlen)
{
	DIR *d = opendir(app_dir);
	if (!d) {
		snprintf(err, errlen, "cannot open the sandbox's app dir %s: %s", app_dir, strerror(errno));
		return -errno;
	}
	struct dirent *e;
	bool marked = false;
	while ((e = readdir(d)) != NULL && h->nfiles < 32) {
		size_t l = strlen(e->d_name);
		if (l < 4 || strcmp(e->d_name + l - 3, ".go") != 0 || l >= sizeof(h->files[0].name))
			continue;
		char path[PATH_MAX + 256];
		snprintf(path, sizeof(path), "%s/%s", app_dir, e->d_name);
		size_t len;
		char *data = read_file(path, &len);
		if (!data)
			continue;
		snprintf(h->files[h->nfiles].name, sizeof(h->files[0].name), "%s", e->d_name);
		h->files[h->nfiles].data = data;
		h->files[h->nfiles].len = len;
		h->nfiles++;
		char tag[40];
		snprintf(tag, sizeof(tag), "kgbench-%s-", nonce);
		if (strstr(data, tag))
			marked = true;
	}
	closedir(d);
	if (!marked) {
		snprintf(err, errlen, "no .go file in %s carries the snippet's tag (the agent wipes /app "
				      "only before a call, so it should still be there)", app_dir);
		return -ENOENT;
	}
	return 0;
}

/* spawn_wait - run argv in cwd with envp, stdout+stderr to out_path; exit status or -errno */
static int spawn_wait(const char *file, char *const argv[], char *const envp[], const char *cwd,
		      const char *out_path)
{
	pid_t pid = fork();
	if (pid < 0)
		return -errno;
	if (pid == 0) {
		int fd = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
		int null = open("/dev/null", O_RDONLY);
		if (fd < 0 || null < 0 || chdir(cwd) < 0)
			_exit(126);
		dup2(null, 0);
		dup2(fd, 1);
		dup2(fd, 2);
		execve(file, argv, envp);
		_exit(127);
	}
	int st;
	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR)
			return -errno;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* first_line - the head of a file, flattened into one table cell */
static void first_line(const char *path, char *buf, size_t cap)
{
	char *d = read_file(path, NULL);
	snprintf(buf, cap, "%.200s", d ? d : "");
	for (char *p = buf; *p; p++)
		if (*p == '\n' || *p == '|')
			*p = ' ';
	free(d);
}

/* hand_iteration - write the files (series letter h, iteration i) as the agent writes /app,
 * then time go build + run */
static int hand_steps(struct hand *h, int i, char series, const char *get, double *build_ms,
		      double *run_ms, char *err, size_t errlen);

static int hand_iteration(struct hand *h, int i, double *build_ms, double *run_ms, char *err,
			  size_t errlen)
{
	return hand_steps(h, i, 'b', NULL, build_ms, run_ms, err, errlen);
}

/* hand_steps - as hand_iteration for the files of series `series`; with get, the steps the
 * agent takes for an import outside go.mod: the offline go build that fails, `go get <get>`
 * online (the agent's GOPROXY and GOSUMDB), the go build again; all of them in build_ms */
static int hand_steps(struct hand *h, int i, char series, const char *get, double *build_ms,
		      double *run_ms, char *err, size_t errlen)
{
	char dir[PATH_MAX + 16], path[PATH_MAX + 300], lock[PATH_MAX + 32];
	snprintf(dir, sizeof(dir), "%s/w%04d", h->root, i);
	rm_tree(dir);
	if (mkdir(dir, 0755) < 0) {
		snprintf(err, errlen, "mkdir %s: %s", dir, strerror(errno));
		return -errno;
	}
	char from[40], to[40];
	snprintf(from, sizeof(from), "kgbench-%s-%c-", nonce, series);
	snprintf(to, sizeof(to), "kgbench-%s-h-", nonce);
	for (int f = 0; f < h->nfiles; f++) {
		char *data = malloc(h->files[f].len + 1);
		if (!data)
			return -ENOMEM;
		memcpy(data, h->files[f].data, h->files[f].len + 1);
		char *p = strstr(data, from);
		if (p) {
			/* same length: series letter and the four-digit iteration */
			memcpy(p, to, strlen(to));
			char num[8];
			snprintf(num, sizeof(num), "%04d", i % 10000);
			memcpy(p + strlen(to), num, 4);
		}
		snprintf(path, sizeof(path), "%s/%s", dir, h->files[f].name);
		int r = write_file(path, data, h->files[f].len);
		free(data);
		if (r < 0) {
			snprintf(err, errlen, "write %.300s: %s", path, strerror(-r));
			return r;
		}
	}
	static const char *const mod[] = { "go.mod", "go.sum" };
	for (int k = 0; k < 2; k++) {
		snprintf(lock, sizeof(lock), "%s/lock/%s", h->runtime_dir, mod[k]);
		snprintf(path, sizeof(path), "%s/%s", dir, mod[k]);
		int r = copy_file(lock, path);
		if (r < 0) {
			snprintf(err, errlen, "copy %s: %s", lock, strerror(-r));
			return r;
		}
	}
	/* like the agent: the binary and the run's files outside the source dir, the binary in
	 * TMPDIR beside go's own work dir */
	char log[PATH_MAX + 32], bin[PATH_MAX + 32], result[PATH_MAX + 32], resenv[PATH_MAX + 60];
	snprintf(log, sizeof(log), "%s/tmp/build-%04d.log", h->root, i);
	snprintf(bin, sizeof(bin), "%s/tmp/bin-%04d", h->root, i);
	snprintf(result, sizeof(result), "%s/tmp/result-%04d.json", h->root, i);
	snprintf(resenv, sizeof(resenv), "KODE_GOPHER_RESULT=%s", result);
	char *saved = h->argv_build[h->out_index];
	h->argv_build[h->out_index] = bin;
	char *envr[10];
	int n = 0;
	for (; h->env_run[n]; n++)
		envr[n] = h->env_run[n];
	char crashenv[PATH_MAX + 60];
	snprintf(crashenv, sizeof(crashenv), "KODE_GOPHER_CRASH=%s/tmp/crash-%04d.txt", h->root, i);
	envr[n++] = resenv;
	envr[n++] = crashenv;
	envr[n] = NULL;
	char *argv_run[] = { bin, NULL };
	char runlog[PATH_MAX + 32];
	snprintf(runlog, sizeof(runlog), "%s/tmp/run-%04d.log", h->root, i);

	double t0 = now_us();
	int st = 0;
	if (get) {
		/* the first build fails (the import is not in go.mod), as the agent's does */
		spawn_wait(h->go, h->argv_build, h->env_build, dir, log);
		char *gargv[] = { "go", "get", (char *)get, NULL };
		char **genv = NULL;
		int gn = 0;
		const char *proxy = getenv("GOPROXY"), *sumdb = getenv("GOSUMDB");
		for (char **p = h->env_build; *p; p++)
			if (strncmp(*p, "GOPROXY=", 8) && strncmp(*p, "GOSUMDB=", 8) &&
			    strv_add(&genv, &gn, "%s", *p) < 0)
				return -ENOMEM;
		if (strv_add(&genv, &gn, "GOPROXY=%s", proxy && *proxy ? proxy : "https://proxy.golang.org,direct") < 0 ||
		    (sumdb && strv_add(&genv, &gn, "GOSUMDB=%s", sumdb) < 0))
			return -ENOMEM;
		st = spawn_wait(h->go, gargv, genv, dir, log);
		strv_free(genv);
		if (st != 0) {
			char head[256];
			first_line(log, head, sizeof(head));
			h->argv_build[h->out_index] = saved;
			snprintf(err, errlen, "go get %s exited %d: %s", get, st, head);
			return -EPROTO;
		}
	}
	st = spawn_wait(h->go, h->argv_build, h->env_build, dir, log);
	double t1 = now_us();
	h->argv_build[h->out_index] = saved;
	if (st != 0) {
		char head[256];
		first_line(log, head, sizeof(head));
		snprintf(err, errlen, "go build exited %d: %s", st, head);
		return -EPROTO;
	}
	st = spawn_wait(bin, argv_run, envr, dir, runlog);
	double t2 = now_us();
	*build_ms = (t1 - t0) / 1000.0;
	*run_ms = (t2 - t1) / 1000.0;
	char *res = read_file(result, NULL);
	bool ok = st == 0 && res && strstr(res, "\"kind\":\"ok\"");
	if (!ok) {
		char head[256];
		first_line(runlog, head, sizeof(head));
		snprintf(err, errlen, "the binary exited %d with result %.120s %s", st, res ? res : "(none)", head);
	}
	free(res);
	rm_tree(dir);
	unlink(log), unlink(bin), unlink(result), unlink(runlog), unlink(crashenv + 18);
	return ok ? 0 : -EPROTO;
}

/* ---------------------------------------------------------------- sections */

struct opts {
	const char *bin;
	const char *runtime_dir;
	const char *peer; /* the Go SDK peer of the ping rows (bench/peer-go), or NULL */
	int pings, calls, sessions, execs;
	bool rss, ping, calls_on, sandbox, exec;
	char tmp[PATH_MAX];
};

/* ping_one - one ping's round trip in µs, or a negative errno (err says why) */
static int ping_one(struct server *s, double *us, char *err, size_t errlen)
{
	json_t *resp = NULL;
	int r = rpc(s, "ping", json_object(), PING_TIMEOUT_MS, &resp, us, err, errlen);
	if (r == 0 && !json_object_get(resp, "result")) {
		snprintf(err, errlen, "the answer has no result");
		r = -EPROTO;
	}
	json_decref(resp);
	return r;
}

/* section_ping - sequential pings, interleaved with the same pings to a one-process peer (an MCP
 * server built on the official Go SDK, bench/peer-go) when there is one: blocks of PING_BLOCK
 * to each in turn, each first every other block, so both see the same load */
static void section_ping(struct server *s, const struct opts *o)
{
	const char *fig = "ping round trip over stdio (µs)";
	const char *pfig = "ping, one-process Go SDK peer (µs)";
	int n = o->pings;
	double *v = calloc((size_t)n, sizeof(double)), *pv = calloc((size_t)n, sizeof(double));
	char err[300], note[300], aim[96];
	struct server peer;
	bool have_peer = false;
	if (o->peer) {
		char log[PATH_MAX + 16];
		snprintf(log, sizeof(log), "%s/peer.log", o->tmp);
		char *const argv[] = { (char *)o->peer, NULL };
		have_peer = session_open_argv(&peer, argv, o->tmp, o->runtime_dir, log) == 0;
		if (!have_peer)
			row_fail(pfig, "%s did not start or initialize (%s)", o->peer, log);
	}
	fprintf(stderr, "  ping x %d%s\n", n, have_peer ? ", and as many to the Go SDK peer" : "");
	/* ten unmeasured first: page faults, lazy binding */
	for (int i = 0; i < 10; i++) {
		double us;
		if (ping_one(s, &us, err, sizeof(err)) < 0 ||
		    (have_peer && ping_one(&peer, &us, err, sizeof(err)) < 0)) {
			row_fail(fig, "warm-up ping %d: %s", i, err);
			goto out;
		}
	}
	for (int b = 0; b * PING_BLOCK < n; b++) {
		for (int turn = 0; turn < 2; turn++) {
			bool to_peer = (turn == 0) == (b % 2 == 1);
			if (to_peer && !have_peer)
				continue;
			for (int i = b * PING_BLOCK; i < n && i < (b + 1) * PING_BLOCK; i++) {
				if (ping_one(to_peer ? &peer : s, to_peer ? &pv[i] : &v[i], err,
					     sizeof(err)) < 0) {
					row_fail(to_peer ? pfig : fig, "ping %d: %s", i, err);
					goto out;
				}
			}
		}
	}
	double med, p90, pmed, pp90;
	stats(v, n, &med, &p90);
	snprintf(note, sizeof(note), "%s; sequential; from writing the request to reading the "
		 "response%s", aim_text(aim, sizeof(aim), med, PING_AIM_US, " µs"),
		 have_peer ? "; interleaved with the peer's" : "");
	row_series(fig, v, n, note);
	if (have_peer) {
		stats(pv, n, &pmed, &pp90);
		row_series(pfig, pv, n, "bench/peer-go: github.com/modelcontextprotocol/go-sdk "
			   PEER_SDK_VERSION ", its own ping handler, in the process that reads stdin; "
			   "the same pings, in blocks of 10 alternating with kode-gopher's");
		char a[32];
		row_add("ping ratio: kode-gopher / Go SDK peer", fmt_num(a, sizeof(a), med / pmed), "-",
			n, "%s; medians; p90s %.0f / %.0f µs",
			aim_text(aim, sizeof(aim), med / pmed, PING_AIM_RATIO, ""), p90, pp90);
	} else if (!o->peer) {
		row_add(pfig, "-", "-", 0, "not measured: no peer binary (bench/run.sh builds "
			"bench/peer-go and passes --peer)");
	}
out:
	if (have_peer)
		server_stop(&peer);
	free(v);
	free(pv);
}

/* sandbox_app_dir - <sandbox root>/<name>/app */
static void sandbox_app_dir(struct server *s, const char *name, char *out, size_t cap)
{
	snprintf(out, cap, "%s/%s/app", s->sandbox_root, name);
}

/* section_calls - a to d in the open session */
static void section_calls(struct server *s, const struct opts *o)
{
	int n = o->calls;
	struct call_rec *c = calloc((size_t)n, sizeof(*c)), first;
	double med_b = NAN;
	char note[300], fig[96], a[32];

	/* the first call may still be setting up the sandbox: measured, but kept out of series a */
	fprintf(stderr, "  first call of the session\n");
	if (call_once(s, code_stdlib('w', 0), "first call of the session (ms)", &first) == 0)
		row_add("first call of the session (ms)", fmt_num(a, sizeof(a), first.e2e_ms), "-", 1,
			"stdlib snippet, not in series a: includes whatever the session's sandbox still "
			"sets up; build_ms %.0f, duration_ms %.0f, claim_ms %.0f",
			first.build_ms, first.duration_ms, first.claim_ms);
	else
		goto out;

	if (run_series(s, "a. stdlib snippet, new source each call", code_stdlib, 'a', n, c) == 0)
		series_rows("a. stdlib snippet, new source each call", "a", c, n, 100, 0, NULL);

	/* the first, unmeasured storage call: its normalized files and its go build command are
	 * what d mirrors */
	struct hand h = { 0 };
	struct go_capture cap = { .root = s->pid };
	char err[400] = "";
	bool hand_ok = true;
	fprintf(stderr, "  b. first storage call (unmeasured)\n");
	capture_active = &cap;
	int r = call_once(s, code_storage('b', 9999), "b. storage snippet, first call", &first);
	capture_active = NULL;
	if (r < 0)
		goto out;
	row_add("b. storage snippet, first call (ms)", fmt_num(a, sizeof(a), first.e2e_ms), "-", 1,
		"not in series b; build_ms %.0f", first.build_ms);
	snprintf(h.root, sizeof(h.root), "%s/hand", o->tmp);
	snprintf(h.runtime_dir, sizeof(h.runtime_dir), "%s", o->runtime_dir);
	char app[PATH_MAX + 80];
	sandbox_app_dir(s, first.sandbox, app, sizeof(app));
	if (mkdir(h.root, 0700) < 0 && errno != EEXIST) {
		snprintf(err, sizeof(err), "mkdir %s: %s", h.root, strerror(errno));
		hand_ok = false;
	} else if (hand_env(&h, &cap, err, sizeof(err)) < 0 ||
		   hand_capture(&h, s->pid, app, err, sizeof(err)) < 0) {
		hand_ok = false;
	}
	strv_free(cap.argv);
	strv_free(cap.envp);

	/* b and d alternate, in turns, so both see the same machine load and cache state and
	 * neither always runs right after the other */
	double *hb = calloc((size_t)n, sizeof(double)), *hr = calloc((size_t)n, sizeof(double)),
	       *ht = calloc((size_t)n, sizeof(double));
	int nh = 0;
	bool b_ok = true;
	for (int i = 0; i < n && b_ok; i++) {
		fprintf(stderr, "\r  b. storage snippet + d. by hand: %d/%d", i + 1, n);
		for (int k = 0; k < 2; k++) {
			if ((i + k) % 2 == 0) {
				if (call_once(s, code_storage('b', i), "b. storage snippet, new source each call",
					      &c[i]) < 0)
					b_ok = false;
			} else if (hand_ok) {
				if (hand_iteration(&h, i, &hb[nh], &hr[nh], err, sizeof(err)) < 0)
					hand_ok = false;
				else
					ht[nh] = hb[nh] + hr[nh], nh++;
			}
		}
	}
	fprintf(stderr, "\n");
	if (b_ok)
		series_rows("b. storage snippet, new source each call", "b", c, n, 1600, 0, &med_b);
	if (hand_ok && nh == n && b_ok) {
		double mb, mr, mt, p;
		stats(hb, nh, &mb, &p);
		stats(hr, nh, &mr, &p);
		stats(ht, nh, &mt, &p);
		char x[32], y[32];
		snprintf(note, sizeof(note), "go build %s ms + run %s ms (medians); %s; GOCACHE=%s",
			 fmt_num(x, sizeof(x), mb), fmt_num(y, sizeof(y), mr), h.source, h.gocache);
		row_series("d. same build by hand: go build + run (ms)", ht, nh, note);
		double ratio = med_b / mt;
		char aim[64], rv[32];
		snprintf(rv, sizeof(rv), "%.2f", ratio);
		row_add("d. ratio: median b / median by hand", rv, "-", n, "%s",
			aim_text(aim, sizeof(aim), ratio, 0.75, ""));
	} else if (!hand_ok) {
		row_fail("d. same build by hand", "%s", err);
	}
	free(hb), free(hr), free(ht);
	for (int f = 0; f < h.nfiles; f++)
		free(h.files[f].data);
	strv_free(h.env_build);
	strv_free(h.argv_build);
	for (int k = 0; h.env_run[k]; k++)
		free(h.env_run[k]);

	/* c: one build, then the same source again and again */
	fprintf(stderr, "  c. resubmitted unchanged\n");
	char *same = code_storage('c', 0);
	if (same && call_once(s, strdup(same), "c. storage snippet, resubmitted unchanged", &first) == 0) {
		int i;
		for (i = 0; i < n; i++)
			if (call_once(s, strdup(same), "c. storage snippet, resubmitted unchanged", &c[i]) < 0)
				break;
		if (i == n) {
			double *ov = calloc((size_t)n, sizeof(double));
			for (i = 0; i < n; i++)
				ov[i] = c[i].e2e_ms - (isnan(c[i].duration_ms) ? 0 : c[i].duration_ms);
			series_rows("c. storage snippet, resubmitted unchanged", "c", c, n, 0, 1, NULL);
			double med, p90;
			stats(ov, n, &med, &p90);
			char aim[64];
			snprintf(fig, sizeof(fig), "  c: end to end − duration_ms (ms)");
			row_series(fig, ov, n, aim_text(aim, sizeof(aim), med, 100, " ms plus run time"));
			free(ov);
		}
	}
	free(same);
out:
	free(c);
}

/* module_cached - is path@anything in the module cache's download cache? */
static bool module_cached(const char *runtime_dir, const char *module)
{
	char p[PATH_MAX];
	snprintf(p, sizeof(p), "%s/gomodcache/cache/download/%s/@v", runtime_dir, module);
	struct stat st;
	return stat(p, &st) == 0;
}

/* section_tidy - e: fresh sessions, each with a stdlib call, an indirect lockfile import (e1),
 * then one outside the lockfile (e2), interleaved with the same steps by hand (go build that
 * fails, go get, go build, run), each first in turn after the first round (whose e2 call gives
 * the normalized files and the go command the by-hand steps mirror) */
static void section_tidy(const struct opts *o)
{
	int n = o->sessions > 0 ? o->sessions : 1;
	double *e1 = calloc((size_t)n, sizeof(double)), *e2 = calloc((size_t)n, sizeof(double));
	double *hb = calloc((size_t)n, sizeof(double)), *ht = calloc((size_t)n, sizeof(double));
	int n1 = 0, n2 = 0, nh = 0, tidied = 0, untidied1 = 0;
	double b2 = NAN;
	bool was = module_cached(o->runtime_dir, TIDY_MODULE), hand_ok = true;
	struct hand h = { 0 };
	char err[400] = "", a[32], note[400];
	snprintf(h.root, sizeof(h.root), "%s/hand-tidy", o->tmp);
	snprintf(h.runtime_dir, sizeof(h.runtime_dir), "%s", o->runtime_dir);
	for (int r = 0; r < n; r++) {
		struct server s;
		char root[PATH_MAX + 16], log[PATH_MAX + 24];
		snprintf(root, sizeof(root), "%s/sb2-%d", o->tmp, r);
		snprintf(log, sizeof(log), "%s/serve2-%d.log", o->tmp, r);
		fprintf(stderr, "\r  e. fresh session %d/%d", r + 1, n);
		if (session_open(&s, o->bin, root, o->runtime_dir, log) < 0) {
			row_fail("e. fresh session", "could not start and initialize session %d", r + 1);
			break;
		}
		struct call_rec c;
		bool hand_first = r % 2 == 1 && hand_ok && h.nfiles;
		if (call_once(&s, code_stdlib('x', r), "e. fresh session, first call", &c) < 0 ||
		    call_once(&s, code_uuid('u', r), "e1. import github.com/google/uuid", &c) < 0) {
			server_stop(&s);
			break;
		}
		e1[n1++] = c.e2e_ms;
		untidied1 += !c.tidied;
		if (hand_first) {
			double rb, rr;
			if (hand_steps(&h, r, 't', TIDY_MODULE, &rb, &rr, err, sizeof(err)) < 0)
				hand_ok = false;
			else
				hb[nh] = rb, ht[nh++] = rb + rr;
		}
		struct go_capture cap = { .root = s.pid };
		if (r == 0)
			capture_active = &cap;
		int cr = call_once(&s, code_tidy('t', r), "e2. first import outside the lockfile", &c);
		capture_active = NULL;
		if (cr == 0) {
			e2[n2++] = c.e2e_ms;
			tidied += c.tidied;
			if (r == 0)
				b2 = c.build_ms;
		}
		if (r == 0 && cr == 0) {
			char app[PATH_MAX + 80];
			sandbox_app_dir(&s, c.sandbox, app, sizeof(app));
			if (mkdir(h.root, 0700) < 0 && errno != EEXIST) {
				snprintf(err, sizeof(err), "mkdir %s: %s", h.root, strerror(errno));
				hand_ok = false;
			} else if (hand_env(&h, &cap, err, sizeof(err)) < 0 ||
				   hand_capture(&h, s.pid, app, err, sizeof(err)) < 0) {
				hand_ok = false;
			}
		}
		strv_free(cap.argv);
		strv_free(cap.envp);
		if (!hand_first && hand_ok && h.nfiles) {
			double rb, rr;
			if (hand_steps(&h, r, 't', TIDY_MODULE, &rb, &rr, err, sizeof(err)) < 0)
				hand_ok = false;
			else
				hb[nh] = rb, ht[nh++] = rb + rr;
		}
		server_stop(&s);
		if (cr < 0)
			break;
	}
	fprintf(stderr, "\n");
	if (n1)
		row_series("e1. import github.com/google/uuid (ms)", e1, n1, untidied1 == n1
			   ? "in the lockfile (as indirect), so no tidy expected: tidied 0 of them"
			   : "in the lockfile (as indirect), but some were tidied (UNEXPECTED)");
	double med2 = NAN, p;
	if (n2) {
		stats(e2, n2, &med2, &p);
		snprintf(note, sizeof(note), "%s, a fresh session each; tidied %d/%d%s, build_ms %.0f "
			 "in the first; %s", TIDY_MODULE, tidied, n2,
			 tidied == n2 ? "" : " (UNEXPECTED: it is not in the lockfile)", b2,
			 was ? "module already in the base module cache (an earlier run put it there)"
			     : "module fetched from the proxy");
		row_series("e2. first import outside the lockfile (ms)", e2, n2, note);
	}
	if (hand_ok && nh && n2) {
		double mb, mt;
		stats(hb, nh, &mb, &p);
		stats(ht, nh, &mt, &p);
		snprintf(note, sizeof(note), "go build (fails) + go get %s + go build %s ms, then run "
			 "(medians); %s", TIDY_MODULE, fmt_num(a, sizeof(a), mb), h.source);
		row_series("e2. the same steps by hand (ms)", ht, nh, note);
		double ratio = med2 / mt;
		char aim[64], rv[32];
		snprintf(rv, sizeof(rv), "%.2f", ratio);
		row_add("e2. ratio: median e2 / median by hand", rv, "-", nh, "%s; interleaved, each "
			"first in turn", aim_text(aim, sizeof(aim), ratio, 1.0, ""));
	} else if (!hand_ok) {
		row_fail("e2. the same steps by hand", "%s", err);
	}
	for (int f = 0; f < h.nfiles; f++)
		free(h.files[f].data);
	strv_free(h.env_build);
	strv_free(h.argv_build);
	for (int k = 0; h.env_run[k]; k++)
		free(h.env_run[k]);
	free(e1), free(e2), free(hb), free(ht);
}

/* ---------------------------------------------------------------- kode-gopher exec */

struct exec_rec {
	double exit_ms, result_ms, claim_ms, build_ms;
};

/* exec_once - `bin exec --json FILE` of a fresh stdlib snippet, as a person runs it: from the
 * fork to its exit, and to the first byte of its output (the result; the rest is its teardown) */
static int exec_once(const struct opts *o, int i, struct exec_rec *e, char *err, size_t errlen)
{
	char dir[PATH_MAX], file[PATH_MAX + 16], root[PATH_MAX + 16], log[PATH_MAX + 16];
	snprintf(dir, sizeof(dir), "%s/exec-%d", o->tmp, i);
	snprintf(file, sizeof(file), "%s/snippet.go", dir);
	snprintf(root, sizeof(root), "%s/sb-exec", o->tmp);
	snprintf(log, sizeof(log), "%s/exec.log", o->tmp);
	char *code = code_stdlib('x', i);
	if (!code || mkdir(dir, 0755) < 0 || write_file(file, code, strlen(code)) < 0) {
		snprintf(err, errlen, "cannot write %s: %s", file, code ? strerror(errno) : "no memory");
		free(code);
		return -EIO;
	}
	free(code);
	int out[2];
	if (pipe2(out, O_CLOEXEC) < 0) {
		snprintf(err, errlen, "pipe: %s", strerror(errno));
		return -errno;
	}
	int logfd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
	double t0 = now_us();
	pid_t pid = fork();
	if (pid == 0) {
		int null = open("/dev/null", O_RDONLY);
		dup2(null, STDIN_FILENO);
		dup2(out[1], STDOUT_FILENO);
		if (logfd >= 0)
			dup2(logfd, STDERR_FILENO);
		signal(SIGPIPE, SIG_DFL);
		execl(o->bin, o->bin, "exec", "--json", "--runtime-dir", o->runtime_dir,
		      "--sandbox-root", root, file, (char *)NULL);
		_exit(127);
	}
	close(out[1]);
	if (logfd >= 0)
		close(logfd);
	if (pid < 0) {
		close(out[0]);
		snprintf(err, errlen, "fork: %s", strerror(errno));
		return -EAGAIN;
	}
	char *buf = NULL;
	size_t len = 0, cap = 0;
	e->result_ms = NAN;
	for (;;) {
		if (cap - len < 65536) {
			char *nb = realloc(buf, cap = cap ? cap * 2 : 65536);
			if (!nb)
				break;
			buf = nb;
		}
		ssize_t n = read(out[0], buf + len, cap - len - 1);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		if (len == 0)
			e->result_ms = (now_us() - t0) / 1000;
		len += (size_t)n;
	}
	close(out[0]);
	int st;
	waitpid(pid, &st, 0);
	e->exit_ms = (now_us() - t0) / 1000;
	json_t *sc = buf ? json_loadb(buf, len, 0, NULL) : NULL;
	free(buf);
	const char *kind = json_string_value(json_object_get(json_object_get(sc, "result"), "kind"));
	int rc = 0;
	if (!(WIFEXITED(st) && WEXITSTATUS(st) == 0) || !kind || strcmp(kind, "ok") != 0) {
		snprintf(err, errlen, "exit status %d, result %s (see %s)",
			 WIFEXITED(st) ? WEXITSTATUS(st) : -1, kind ? kind : "none", log);
		rc = -EPROTO;
	}
	e->claim_ms = num_field(json_object_get(sc, "timings"), "claim_ms");
	e->build_ms = num_field(sc, "build_ms");
	json_decref(sc);
	return rc;
}

/* section_exec - `kode-gopher exec` of a standard-library snippet, each a new sandbox */
static void section_exec(const struct opts *o)
{
	const char *fig = "exec. `kode-gopher exec` of a stdlib snippet (ms)";
	int n = o->execs;
	struct exec_rec *e = calloc((size_t)n, sizeof(*e));
	double *v = calloc((size_t)n, sizeof(double)), *w = calloc((size_t)n, sizeof(double));
	char err[400], note[400], aim[96], a[32], b[32], c[32];
	fprintf(stderr, "  exec. kode-gopher exec x %d\n", n);
	for (int i = 0; i < n; i++) {
		fprintf(stderr, "\r  exec. %d/%d", i + 1, n);
		if (exec_once(o, i, &e[i], err, sizeof(err)) < 0) {
			fputc('\n', stderr);
			row_fail(fig, "run %d: %s", i, err);
			goto out;
		}
	}
	fputc('\n', stderr);
	double med, p90, rmed, claim, build;
	for (int i = 0; i < n; i++)
		v[i] = e[i].exit_ms;
	stats(v, n, &med, &p90);
	for (int i = 0; i < n; i++)
		w[i] = e[i].result_ms;
	stats(w, n, &rmed, &p90);
	for (int i = 0; i < n; i++)
		w[i] = e[i].claim_ms;
	stats(w, n, &claim, &p90);
	for (int i = 0; i < n; i++)
		w[i] = e[i].build_ms;
	stats(w, n, &build, &p90);
	snprintf(note, sizeof(note), "%s; from the fork to its exit, a new sandbox and source each "
		 "time; its result was on stdout after %s ms; claim_ms %s, build_ms %s (medians)",
		 aim_text(aim, sizeof(aim), med, EXEC_AIM_MS, " ms"), fmt_num(a, sizeof(a), rmed),
		 fmt_num(b, sizeof(b), claim), fmt_num(c, sizeof(c), build));
	row_series(fig, v, n, note);
out:
	free(e);
	free(v);
	free(w);
}

/* ---------------------------------------------------------------- the local sandbox */

/* agent_health - GET /health on the agent's unix socket; 0 when it answers 200. Written by
 * hand: mcpbench links jansson alone (the Makefile's bench recipe), and one GET with
 * "Connection: close" over a local socket needs no HTTP library. */
static int agent_health(const char *sock, int timeout_ms)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	if (strlen(sock) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	memcpy(sa.sun_path, sock, strlen(sock) + 1);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	static const char req[] = "GET /health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n";
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
	    write(fd, req, sizeof(req) - 1) != (ssize_t)(sizeof(req) - 1)) {
		int e = errno;
		close(fd);
		return -e;
	}
	char buf[64];
	size_t got = 0;
	double deadline = now_us() + timeout_ms * 1000.0;
	while (got < 12) { /* "HTTP/1.1 200" */
		int left = (int)((deadline - now_us()) / 1000.0);
		struct pollfd p = { .fd = fd, .events = POLLIN };
		if (left <= 0 || poll(&p, 1, left) <= 0)
			break;
		ssize_t n = read(fd, buf + got, sizeof(buf) - 1 - got);
		if (n <= 0)
			break;
		got += (size_t)n;
	}
	close(fd);
	buf[got] = '\0';
	return got >= 12 && strncmp(buf, "HTTP/1.", 7) == 0 && strncmp(buf + 8, " 200", 4) == 0 ? 0 : -EIO;
}

/* du_* - disk use of a tree as du(1) counts it: allocated blocks, one file system, symlinks not
 * followed, a hard-linked file once. nftw passes no context, hence the file-scope state. */
struct du_ino {
	dev_t dev;
	ino_t ino;
};
static struct {
	long long bytes;
	long files, dirs;
	struct du_ino *seen;
	size_t nseen, cap;
} du_acc;

/* du_cb - nftw callback of du_tree */
static int du_cb(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)path;
	(void)ftw;
	if (flag == FTW_NS)
		return 0;
	if (!S_ISDIR(st->st_mode) && st->st_nlink > 1) {
		for (size_t i = 0; i < du_acc.nseen; i++)
			if (du_acc.seen[i].dev == st->st_dev && du_acc.seen[i].ino == st->st_ino)
				return 0;
		if (du_acc.nseen == du_acc.cap) {
			size_t ncap = du_acc.cap ? du_acc.cap * 2 : 64;
			struct du_ino *n = realloc(du_acc.seen, ncap * sizeof(*n));
			if (!n)
				return 0;
			du_acc.seen = n;
			du_acc.cap = ncap;
		}
		du_acc.seen[du_acc.nseen++] = (struct du_ino){ st->st_dev, st->st_ino };
	}
	du_acc.bytes += (long long)st->st_blocks * 512;
	if (S_ISDIR(st->st_mode))
		du_acc.dirs++;
	else
		du_acc.files++;
	return 0;
}

/* du_tree - bytes allocated under path, and how many directories and other entries */
static int du_tree(const char *path, long long *bytes, long *files, long *dirs)
{
	memset(&du_acc, 0, sizeof(du_acc));
	int r = nftw(path, du_cb, 32, FTW_PHYS | FTW_MOUNT);
	free(du_acc.seen);
	du_acc.seen = NULL;
	if (r != 0)
		return -errno;
	*bytes = du_acc.bytes;
	*files = du_acc.files;
	*dirs = du_acc.dirs;
	return 0;
}

/* proc_rollup - from /proc/PID/smaps_rollup, in KiB: Pss (shared pages split among the
 * processes that map them) and the private pages (what its end would give back) */
static int proc_rollup(pid_t pid, long *pss_kb, long *private_kb)
{
	char path[64];
	snprintf(path, sizeof(path), "/proc/%d/smaps_rollup", (int)pid);
	char *d = read_file(path, NULL);
	if (!d)
		return -errno;
	static const char *const keys[] = { "\nPss:", "\nPrivate_Clean:", "\nPrivate_Dirty:" };
	long v[3];
	int found = 0;
	for (int k = 0; k < 3; k++) {
		char *p = strstr(d, keys[k]);
		v[k] = p ? strtol(p + strlen(keys[k]), NULL, 10) : 0;
		found += p != NULL;
	}
	free(d);
	*pss_kb = v[0];
	*private_kb = v[1] + v[2];
	return found == 3 ? 0 : -ENOENT;
}

/* status_field - the text after "Name:" in /proc/PID/status, trimmed, or "" */
static void status_field(pid_t pid, const char *name, char *out, size_t cap)
{
	char path[64], key[40];
	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	snprintf(key, sizeof(key), "\n%s:", name);
	out[0] = '\0';
	char *d = read_file(path, NULL);
	char *p = d ? strstr(d, key) : NULL;
	if (p) {
		p += strlen(key);
		p += strspn(p, " \t");
		snprintf(out, cap, "%.*s", (int)strcspn(p, "\n"), p);
	}
	free(d);
}

/* same_ns - is pid in our namespace of this kind? */
static bool same_ns(pid_t pid, const char *kind)
{
	char mine[64] = "", theirs[64] = "", a[64], b[64];
	snprintf(a, sizeof(a), "/proc/self/ns/%s", kind);
	snprintf(b, sizeof(b), "/proc/%d/ns/%s", (int)pid, kind);
	if (readlink(a, mine, sizeof(mine) - 1) < 0 || readlink(b, theirs, sizeof(theirs) - 1) < 0)
		return true; /* cannot tell: claim no isolation rather than invent it */
	return strcmp(mine, theirs) == 0;
}

struct jailinfo {
	bool jailed; /* its own user, mount and pid namespaces */
	char desc[400];
};

/* jail_describe - how the agent is isolated, as /proc shows it from the host */
static void jail_describe(const struct sbprocs *sp, struct jailinfo *ji)
{
	memset(ji, 0, sizeof(*ji));
	pid_t ag = sp->agent;
	static const char *const kinds[] = { "user", "mnt", "pid", "ipc", "uts", "net" };
	bool own[6];
	char nsl[96] = "";
	for (int k = 0; k < 6; k++) {
		own[k] = !same_ns(ag, kinds[k]);
		if (own[k] && k < 5)
			snprintf(nsl + strlen(nsl), sizeof(nsl) - strlen(nsl), "%s%s", nsl[0] ? ", " : "",
				 kinds[k]);
	}
	ji->jailed = sp->jail_a && own[0] && own[1] && own[2];
	char uid[64] = "", seccomp[16] = "", nnp[16] = "", capeff[32] = "";
	status_field(ag, "Uid", uid, sizeof(uid));
	status_field(ag, "Seccomp", seccomp, sizeof(seccomp));
	status_field(ag, "NoNewPrivs", nnp, sizeof(nnp));
	status_field(ag, "CapEff", capeff, sizeof(capeff));
	unsigned long hu = strtoul(uid, NULL, 10);
	char uidtxt[128];
	if (hu == (unsigned long)getuid())
		snprintf(uidtxt, sizeof(uidtxt), "agent runs as our own uid %lu", hu);
	else
		snprintf(uidtxt, sizeof(uidtxt), "agent runs as host uid %lu, the sandbox's own "
						 "(serve runs as %s)", hu, getuid() == 0 ? "root" : "another uid");
	/* cgroup v1 lines "N:controller:/kode-gopher/NAME" (policy/jail.c) */
	char cgp[64], cgs[64] = "";
	snprintf(cgp, sizeof(cgp), "/proc/%d/cgroup", (int)ag);
	char *cg = read_file(cgp, NULL);
	for (char *line = cg, *nl; line && *line; line = nl ? nl + 1 : NULL) {
		nl = strchr(line, '\n');
		if (nl)
			*nl = '\0';
		char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
		if (c2 && strstr(c2, "/kode-gopher/"))
			snprintf(cgs + strlen(cgs), sizeof(cgs) - strlen(cgs), "%s%.*s", cgs[0] ? ", " : "",
				 (int)(c2 - c1 - 1), c1 + 1);
		if (!nl)
			break;
	}
	free(cg);
	bool nocaps = capeff[0] && strspn(capeff, "0") == strlen(capeff);
	snprintf(ji->desc, sizeof(ji->desc),
		 "%s: own %s namespaces%s; %s; cgroups: %s; %s%s%s",
		 sp->jail_a ? "`kode-gopher jail`" : "no jail process",
		 nsl[0] ? nsl : "no", own[5] ? " and network" : " (network shared)", uidtxt,
		 cgs[0] ? cgs : "none (rlimits only)",
		 strcmp(seccomp, "2") == 0 ? "seccomp filter" : "no seccomp filter",
		 strcmp(nnp, "1") == 0 ? ", no_new_privs" : "", nocaps ? ", no capabilities" : "");
}

/* code_first - the first call of each fresh session: the same source in every session and run */
static char *code_first(void)
{
	return strdup("package snippet\n\n"
		      "import (\n\t\"context\"\n\t\"fmt\"\n)\n\n"
		      "func run(ctx context.Context) (any, error) {\n"
		      "\treturn fmt.Sprintf(\"kgbench first call of a fresh session\"), nil\n"
		      "}\n");
}

struct sess_rec {
	double init_ms;  /* serve started -> initialize answered */
	double ready_ms; /* serve started -> the agent answers GET /health */
	double claim_ms, first_ms, first_build_ms, later_ms, later_build_ms;
	bool first_cached;
	double a_mib, b_mib, agent_mib, sum_mib; /* VmRSS; NAN when the process is not there */
	double pss_mib, private_mib;            /* summed over the three; NAN when unreadable */
	double disk_mib, cache_mib;
	long files, dirs;
};

/* sandbox_session - one fresh session: warm-up, memory and disk, the first call, LATER_CALLS more */
static int sandbox_session(const struct opts *o, int i, struct sess_rec *r, struct jailinfo *ji,
			   const char *fig)
{
	struct server s;
	char root[PATH_MAX + 8], log[PATH_MAX + 16];
	snprintf(root, sizeof(root), "%s/sb3", o->tmp);
	snprintf(log, sizeof(log), "%s/serve3.log", o->tmp);
	double t0 = now_us();
	if (session_open(&s, o->bin, root, o->runtime_dir, log) < 0) {
		row_fail(fig, "session %d could not start and initialize", i + 1);
		return -1;
	}
	double t1 = now_us();
	r->init_ms = (t1 - t0) / 1000.0;

	/* warm-up: the worker asked for its sandbox at start-up; wait for its agent to answer */
	struct sbprocs sp;
	char sock[PATH_MAX + 32];
	bool ready = false;
	while (!ready && now_us() - t1 < READY_TIMEOUT_MS * 1000.0) {
		sandbox_procs(s.pid, &sp);
		if (sp.agent && sp.dir[0]) {
			snprintf(sock, sizeof(sock), "%s/sock/agent.sock", sp.dir);
			ready = agent_health(sock, 500) == 0;
		}
		if (!ready)
			usleep(READY_POLL_MS * 1000);
	}
	if (!ready) {
		row_fail(fig, "session %d: %s within %d s of initialize", i + 1,
			 !sp.agent ? "no `kode-gopher agent` process below serve"
			 : !sp.dir[0] ? "the agent is not under `kode-gopher jail --dir`: no socket to probe"
				      : "the agent did not answer GET /health on its socket",
			 READY_TIMEOUT_MS / 1000);
		log_tail(s.log_path);
		server_stop(&s);
		return -1;
	}
	r->ready_ms = (now_us() - t0) / 1000.0;
	usleep(100000); /* let the idle processes settle before their memory is read */

	sandbox_procs(s.pid, &sp);
	struct procmem m;
	long pss = 0, priv = 0;
	bool rollup_ok = true;
	double *slot[3] = { &r->a_mib, &r->b_mib, &r->agent_mib };
	pid_t pids[3] = { sp.jail_a, sp.jail_b, sp.agent };
	r->sum_mib = 0;
	for (int k = 0; k < 3; k++) {
		*slot[k] = pids[k] && proc_mem(pids[k], &m) == 0 ? m.rss_kb / 1024.0 : NAN;
		if (!isnan(*slot[k]))
			r->sum_mib += *slot[k];
		long p = 0, q = 0;
		if (pids[k] && proc_rollup(pids[k], &p, &q) == 0)
			pss += p, priv += q;
		else if (pids[k])
			rollup_ok = false;
	}
	r->pss_mib = rollup_ok ? pss / 1024.0 : NAN;
	r->private_mib = rollup_ok ? priv / 1024.0 : NAN;
	long long bytes = 0, cbytes = 0;
	long cf, cd;
	char cache[PATH_MAX + 16];
	snprintf(cache, sizeof(cache), "%s/cache", sp.dir);
	r->disk_mib = r->cache_mib = NAN;
	if (du_tree(sp.dir, &bytes, &r->files, &r->dirs) == 0)
		r->disk_mib = (double)bytes / (1024.0 * 1024.0);
	if (du_tree(cache, &cbytes, &cf, &cd) == 0)
		r->cache_mib = (double)cbytes / (1024.0 * 1024.0);
	jail_describe(&sp, ji);

	struct call_rec c;
	int rc = call_once(&s, code_first(), fig, &c);
	if (rc == 0) {
		r->claim_ms = c.claim_ms;
		r->first_ms = c.e2e_ms;
		r->first_build_ms = c.build_ms;
		r->first_cached = c.cached;
		double v[LATER_CALLS], b[LATER_CALLS], p90;
		for (int k = 0; k < LATER_CALLS && rc == 0; k++) {
			rc = call_once(&s, code_stdlib('l', i * LATER_CALLS + k), fig, &c);
			v[k] = c.e2e_ms;
			b[k] = c.build_ms;
		}
		if (rc == 0) {
			stats(v, LATER_CALLS, &r->later_ms, &p90);
			stats(b, LATER_CALLS, &r->later_build_ms, &p90);
		}
	}
	server_stop(&s);
	return rc;
}

/* section_sandbox - f: the local sandbox backend over o->sessions fresh sessions */
static void section_sandbox(const struct opts *o)
{
	const char *fig = "f. local sandbox, fresh sessions";
	int n = o->sessions, done = 0, njailed = 0;
	struct sess_rec *r = calloc((size_t)n, sizeof(*r));
	struct jailinfo ji, first = { 0 };
	for (int i = 0; r && i < n; i++) {
		fprintf(stderr, "\r  f. local sandbox, fresh session %d/%d", i + 1, n);
		if (sandbox_session(o, i, &r[i], &ji, fig) < 0)
			break;
		njailed += ji.jailed;
		if (i == 0)
			first = ji;
		done++;
	}
	fprintf(stderr, "\n");
	if (!r || done < n) {
		free(r);
		return;
	}
	double *v = calloc((size_t)n, sizeof(double)), *w = calloc((size_t)n, sizeof(double));
	char note[400], aim[64], x[32], y[32];
	int nv;
	double med, p90, med2;
#define COLLECT(field)                                                                      \
	do {                                                                                \
		nv = 0;                                                                     \
		for (int i_ = 0; i_ < n; i_++)                                              \
			if (!isnan(r[i_].field))                                            \
				v[nv++] = r[i_].field;                                      \
	} while (0)

	row_add("f. local sandbox: jailed?", njailed == n ? "yes" : njailed ? "partly" : "no", "-", n,
		"%s%s", first.desc,
		njailed == n || !njailed ? "" : "; NOT jailed in every session");

	COLLECT(init_ms);
	stats(v, nv, &med, &p90);
	snprintf(note, sizeof(note), "from starting serve to the agent answering GET /health on its "
		 "socket (polled every %d ms); initialize was answered after %s ms (median): the "
		 "sandbox builds while the client initializes", READY_POLL_MS, fmt_num(x, sizeof(x), med));
	COLLECT(ready_ms);
	row_series("f0. sandbox ready, after serve started (ms)", v, nv, note);

	COLLECT(claim_ms);
	if (nv < n) {
		row_fail("f1. claim of a warm local sandbox", "%d of %d first calls had no "
			 "structuredContent.timings.claim_ms (a worker older than the field?)", n - nv, n);
	} else {
		stats(v, nv, &med, &p90);
		snprintf(note, sizeof(note), "%s; timings.claim_ms of each fresh session's first call, "
			 "made once the agent answered (whole ms, as the worker reports it)",
			 aim_text(aim, sizeof(aim), med, 50, " ms"));
		row_series("f1. claim of a warm local sandbox (ms)", v, nv, note);
	}

	int cached = 0;
	for (int i = 0; i < n; i++)
		cached += r[i].first_cached;
	COLLECT(first_build_ms);
	stats(v, nv, &med, &p90);
	snprintf(note, sizeof(note), "end to end; the same stdlib snippet in every session (a new "
		 "sandbox has an empty binary cache: cached_build %d/%d); build_ms %s (median)",
		 cached, n, fmt_num(x, sizeof(x), med));
	COLLECT(first_ms);
	row_series("f2. first call of a fresh session (ms)", v, nv, note);
	stats(v, nv, &med, &p90);
	COLLECT(later_build_ms);
	stats(v, nv, &med2, &p90);
	snprintf(note, sizeof(note), "per session the median of the next %d calls (stdlib, new source "
		 "each); median and p90 over the sessions; build_ms %s (median)", LATER_CALLS,
		 fmt_num(x, sizeof(x), med2));
	COLLECT(later_ms);
	row_series("f2. later calls of the session (ms)", v, nv, note);
	stats(v, nv, &med2, &p90);
	for (int i = 0; i < n; i++)
		w[i] = r[i].first_ms / r[i].later_ms;
	double rm, rp;
	stats(w, n, &rm, &rp);
	snprintf(x, sizeof(x), "%.2f", med / med2);
	row_add("f2. ratio: first / later", x, "-", n, "median of the first calls / median of the "
		"later; per session: median %.2f, p90 %.2f", rm, rp);

	static const struct { const char *fig, *note; size_t off; } mem[] = {
		{ "f3. RSS jail A, idle prepared sandbox (MiB)",
		  "`kode-gopher jail` in the host's pid namespace; waits for B",
		  offsetof(struct sess_rec, a_mib) },
		{ "f3. RSS jail B, idle prepared sandbox (MiB)",
		  "pid 1 of the sandbox: built its file system, started the agent, reaps",
		  offsetof(struct sess_rec, b_mib) },
		{ "f3. RSS agent, idle prepared sandbox (MiB)",
		  "listening on its socket, not yet claimed", offsetof(struct sess_rec, agent_mib) },
	};
	for (size_t k = 0; k < sizeof(mem) / sizeof(mem[0]); k++) {
		nv = 0;
		for (int i = 0; i < n; i++) {
			double d = *(const double *)((const char *)&r[i] + mem[k].off);
			if (!isnan(d))
				v[nv++] = d;
		}
		if (nv == 0)
			row_add(mem[k].fig, "-", "-", 0, "no such process: the sandbox is not jailed");
		else
			row_series(mem[k].fig, v, nv, mem[k].note);
	}
	COLLECT(pss_mib);
	stats(v, nv, &med, &p90);
	COLLECT(private_mib);
	stats(v, nv, &med2, &p90);
	snprintf(note, sizeof(note), "VmRSS of A + B + agent per session, after warm-up and before "
		 "any call; counts pages they share with each other and with serve (one binary, its "
		 "libraries) in full: their private pages sum to %s MiB, their PSS to %s MiB (medians)",
		 fmt_num(y, sizeof(y), med2), fmt_num(x, sizeof(x), med));
	COLLECT(sum_mib);
	row_series("f3. RSS sum of the sandbox's processes (MiB)", v, nv, note);

	long files = r[0].files, dirs = r[0].dirs;
	COLLECT(cache_mib);
	stats(v, nv, &med, &p90);
	snprintf(note, sizeof(note), "du of <sandbox root>/<name> right after warm-up (allocated "
		 "blocks, hard links once): %ld directories, %ld other entr%s (first session); of "
		 "which cache/ (the overlays' upper layers with the base caches' directory skeleton) "
		 "%s MiB", dirs, files, files == 1 ? "y" : "ies", fmt_num(y, sizeof(y), med));
	COLLECT(disk_mib);
	if (nv < n)
		row_fail("f3. disk use of the sandbox directory", "du of the sandbox directory failed "
			 "in %d of %d sessions", n - nv, n);
	else
		row_series("f3. disk use of the sandbox directory (MiB)", v, nv, note);
#undef COLLECT
	free(v);
	free(w);
	free(r);
}

/* ---- f4: a base cache aged past the go command's trim limit ---- */

#define AGED_S (8 * 86400) /* a week and a day after `make runtime` */

/* copy_aged - copy_file, then mtime and atime set to when */
static int copy_aged(const char *src, const char *dst, time_t when)
{
	int r = copy_file(src, dst);
	struct timespec t[2] = { { when, 0 }, { when, 0 } };
	if (r == 0 && utimensat(AT_FDCWD, dst, t, 0) != 0)
		r = -errno;
	return r;
}

/*
 * runtime_copy - dst: the runtime's build cache as make runtime left it, `age_s` old: action
 * entries (-a, which decide a hit) and the small files copied with that mtime, outputs (-d)
 * hard links (same inodes: never written, an overlay never writes its lower layer), trim.txt
 * saying the last trim was then; no lockfile and an empty module cache (f's snippets use the
 * standard library only). A fresh copy (age 0) is the same with today's times, for comparison.
 */
static int runtime_copy(const char *src, const char *dst, long age_s)
{
	char s[PATH_MAX], d[PATH_MAX], sf[PATH_MAX * 2], df[PATH_MAX * 2];
	time_t when = time(NULL) - age_s;
	snprintf(d, sizeof(d), "%s/gomodcache", dst);
	if (mkdir(dst, 0755) != 0 || mkdir(d, 0755) != 0)
		return -errno;
	snprintf(s, sizeof(s), "%s/gocache", src);
	snprintf(d, sizeof(d), "%s/gocache", dst);
	if (mkdir(d, 0755) != 0)
		return -errno;
	DIR *top = opendir(s);
	if (!top)
		return -errno;
	struct dirent *e;
	int r = 0;
	while (r == 0 && (e = readdir(top)) != NULL) {
		if (e->d_name[0] == '.')
			continue;
		snprintf(sf, sizeof(sf), "%s/%s", s, e->d_name);
		snprintf(df, sizeof(df), "%s/%s", d, e->d_name);
		if (e->d_type != DT_DIR) {
			r = strcmp(e->d_name, "trim.txt") == 0 ? 0 : copy_aged(sf, df, when);
			continue;
		}
		if (mkdir(df, 0755) != 0) {
			r = -errno;
			break;
		}
		DIR *sub = opendir(sf);
		struct dirent *f;
		while (sub && r == 0 && (f = readdir(sub)) != NULL) {
			if (f->d_type != DT_REG)
				continue;
			char a[PATH_MAX * 3], b[PATH_MAX * 3];
			snprintf(a, sizeof(a), "%s/%s", sf, f->d_name);
			snprintf(b, sizeof(b), "%s/%s", df, f->d_name);
			size_t l = strlen(f->d_name);
			if (l > 2 && strcmp(f->d_name + l - 2, "-d") == 0 && link(a, b) == 0)
				continue;
			r = copy_aged(a, b, when);
		}
		if (sub)
			closedir(sub);
	}
	closedir(top);
	snprintf(df, sizeof(df), "%s/trim.txt", d);
	FILE *t = r == 0 ? fopen(df, "w") : NULL;
	if (t) {
		fprintf(t, "%lld", (long long)when);
		fclose(t);
	}
	return r;
}

/* section_aged - f4: fresh sessions on a base cache aged 8 days against the same copy with
 * today's times, interleaved; the aged one must be as warm */
static void section_aged(const struct opts *o)
{
	const char *fig = "f4. base cache aged 8 days";
	char fresh[PATH_MAX + 16], aged[PATH_MAX + 16];
	snprintf(fresh, sizeof(fresh), "%s/rt-fresh", o->tmp);
	snprintf(aged, sizeof(aged), "%s/rt-aged", o->tmp);
	int r = runtime_copy(o->runtime_dir, fresh, 0);
	if (r == 0)
		r = runtime_copy(o->runtime_dir, aged, AGED_S);
	if (r != 0) {
		row_fail(fig, "cannot copy the runtime's build cache from %s: %s", o->runtime_dir,
			 strerror(-r));
		return;
	}
	int n = o->sessions;
	struct sess_rec *rec[2] = { calloc((size_t)n, sizeof(struct sess_rec)),
				    calloc((size_t)n, sizeof(struct sess_rec)) };
	double *v = calloc((size_t)n, sizeof(double));
	struct jailinfo ji;
	struct opts oo = *o;
	const char *dirs[2] = { fresh, aged };
	for (int i = 0; rec[0] && rec[1] && v && i < n; i++)
		for (int k = 0; k < 2; k++) {
			int which = (i + k) % 2; /* interleaved, each first in turn */
			fprintf(stderr, "\r  f4. %s base cache, session %d/%d", which ? "aged" : "fresh", i + 1, n);
			oo.runtime_dir = dirs[which];
			if (sandbox_session(&oo, i, &rec[which][i], &ji, fig) < 0) {
				fprintf(stderr, "\n");
				goto out;
			}
		}
	fprintf(stderr, "\n");
	double later[2], first[2], lb[2], p90;
	for (int k = 0; k < 2; k++) {
		for (int i = 0; i < n; i++)
			v[i] = rec[k][i].first_ms;
		stats(v, n, &first[k], &p90);
		for (int i = 0; i < n; i++)
			v[i] = rec[k][i].later_build_ms;
		stats(v, n, &lb[k], &p90);
		for (int i = 0; i < n; i++)
			v[i] = rec[k][i].later_ms;
		stats(v, n, &later[k], &p90);
		char note[300], x[32], y[32];
		snprintf(note, sizeof(note), "%s; later calls' median of medians; first call %s ms, "
			 "later build_ms %s (medians)", k ? "every base entry and trim.txt 8 days old "
			 "(past the go command's 5-day trim limit)" : "the same copy with today's times",
			 fmt_num(x, sizeof(x), first[k]), fmt_num(y, sizeof(y), lb[k]));
		row_series(k ? "f4. later calls, aged base cache (ms)" : "f4. later calls, fresh base cache (ms)",
			   v, n, note);
	}
	char x[32];
	snprintf(x, sizeof(x), "%.2f", later[1] / later[0]);
	row_add("f4. ratio: aged / fresh, later calls", x, "-", n, "aim: equal within noise; first "
		"calls %.2f; interleaved sessions", first[1] / first[0]);
out:
	free(v);
	free(rec[0]);
	free(rec[1]);
	rm_tree(fresh);
	rm_tree(aged);
}

/* usage - how to call */
static void usage(FILE *f)
{
	fprintf(f,
		"usage: mcpbench [--quick] [--only ping|rss|calls|exec|sandbox] [--pings N] [--calls N]\n"
		"                [--sessions N] [--execs N] [--peer PATH] [KODE-GOPHER-BINARY]\n"
		"  binary: argument, else $KODE_GOPHER_BIN, else " DEFAULT_BIN "\n"
		"  runtime: $RUNTIME_DIR, else $KODE_GOPHER_RUNTIME_DIR, else " DEFAULT_RUNTIME "\n"
		"  --peer: the Go SDK server of the ping rows (bench/run.sh builds bench/peer-go)\n"
		"  --quick: 100 pings, 5 calls per series, 3 fresh sessions, 3 execs (a smoke run)\n");
}

/* header - what was measured where */
static void header(const struct opts *o, double load_start)
{
	char date[64], gov[64] = "?";
	time_t t = time(NULL);
	strftime(date, sizeof(date), "%Y-%m-%d %H:%M %Z", localtime(&t));
	FILE *p = popen("go env GOVERSION 2>/dev/null", "r");
	if (p) {
		if (fgets(gov, sizeof(gov), p))
			gov[strcspn(gov, "\n")] = '\0';
		pclose(p);
	}
	double load[3] = { 0 };
	getloadavg(load, 3);
	printf("kode-gopher benchmarks, %s: %ld CPUs, load average %.2f at start, %.2f at end; %s; "
	       "%s; runtime %s\n\n",
	       date, sysconf(_SC_NPROCESSORS_ONLN), load_start, load[0], gov, o->bin, o->runtime_dir);
}

int main(int argc, char **argv)
{
	struct opts o = { .pings = 1000, .calls = 20, .sessions = 10, .execs = 10, .rss = true,
			  .ping = true, .calls_on = true, .exec = true, .sandbox = true };
	bool quick = false;
	int pings = -1, calls = -1, sessions = -1, execs = -1;
	static const struct option lo[] = {
		{ "quick", no_argument, 0, 'q' },      { "only", required_argument, 0, 'o' },
		{ "pings", required_argument, 0, 'p' }, { "calls", required_argument, 0, 'c' },
		{ "sessions", required_argument, 0, 's' }, { "help", no_argument, 0, 'h' },
		{ "execs", required_argument, 0, 'e' },    { "peer", required_argument, 0, 'P' },
		{ 0, 0, 0, 0 }
	};
	int ch;
	while ((ch = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
		switch (ch) {
		case 'q': quick = true; break;
		case 'o':
			o.rss = strcmp(optarg, "rss") == 0;
			o.ping = strcmp(optarg, "ping") == 0;
			o.calls_on = strcmp(optarg, "calls") == 0;
			o.sandbox = strcmp(optarg, "sandbox") == 0;
			o.exec = strcmp(optarg, "exec") == 0;
			if (!o.rss && !o.ping && !o.calls_on && !o.sandbox && !o.exec) {
				fprintf(stderr, "mcpbench: --only wants ping, rss, calls, exec or sandbox\n");
				return 2;
			}
			break;
		case 'p': pings = atoi(optarg); break;
		case 'c': calls = atoi(optarg); break;
		case 's': sessions = atoi(optarg); break;
		case 'e': execs = atoi(optarg); break;
		case 'P': o.peer = optarg; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (quick)
		o.pings = 100, o.calls = 5, o.sessions = 3, o.execs = 3;
	if (pings > 0)
		o.pings = pings;
	if (calls > 0)
		o.calls = calls;
	if (sessions > 0)
		o.sessions = sessions;
	if (execs > 0)
		o.execs = execs;
	if (o.pings > MAX_SERIES * 100 || o.calls > MAX_SERIES || o.sessions > MAX_SERIES ||
	    o.execs > MAX_SERIES) {
		fprintf(stderr, "mcpbench: at most %d pings, %d calls and %d sessions or execs\n", MAX_SERIES * 100,
			MAX_SERIES, MAX_SERIES);
		return 2;
	}
	o.bin = optind < argc ? argv[optind] : getenv("KODE_GOPHER_BIN") ? getenv("KODE_GOPHER_BIN")
									 : DEFAULT_BIN;
	o.runtime_dir = getenv("RUNTIME_DIR")		 ? getenv("RUNTIME_DIR")
			: getenv("KODE_GOPHER_RUNTIME_DIR") ? getenv("KODE_GOPHER_RUNTIME_DIR")
							    : DEFAULT_RUNTIME;
	if (access(o.bin, X_OK) != 0) {
		fprintf(stderr, "mcpbench: %s is not an executable (build it with `make`)\n", o.bin);
		return 1;
	}
	signal(SIGPIPE, SIG_IGN);
	unsigned char rnd[4];
	if (getrandom(rnd, sizeof(rnd), 0) != sizeof(rnd)) {
		uint32_t x = (uint32_t)time(NULL) ^ (uint32_t)getpid();
		memcpy(rnd, &x, 4);
	}
	snprintf(nonce, sizeof(nonce), "%02x%02x%02x%02x", rnd[0], rnd[1], rnd[2], rnd[3]);
	const char *tmpdir = getenv("TMPDIR") && *getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
	snprintf(o.tmp, sizeof(o.tmp), "%s/kgbench-XXXXXX", tmpdir);
	if (!mkdtemp(o.tmp)) {
		fprintf(stderr, "mcpbench: cannot create a temporary directory in %s: %s\n", tmpdir,
			strerror(errno));
		return 1;
	}
	/* sandboxes run as other uids (the local jail maps one): they must be able to walk
	 * through our directory to their own, though not list it */
	chmod(o.tmp, 0711);
	char root[PATH_MAX + 8], log[PATH_MAX + 16];
	snprintf(root, sizeof(root), "%s/sb", o.tmp);
	snprintf(log, sizeof(log), "%s/serve.log", o.tmp);

	struct server s;
	int rc = 0;
	double load_start = 0;
	getloadavg(&load_start, 1);
	fprintf(stderr, "mcpbench: %s serve, sandboxes in %s\n", o.bin, root);
	if (!o.rss && !o.ping && !o.calls_on)
		goto sandbox;
	if (session_open(&s, o.bin, root, o.runtime_dir, log) < 0) {
		rc = 1;
		goto done;
	}
	if (o.rss) {
		usleep(500000); /* let the worker settle after initialize */
		rss_rows(&s, "idle after initialize");
	}
	if (o.ping)
		section_ping(&s, &o);
	if (o.calls_on) {
		section_calls(&s, &o);
		rss_rows(&s, "after the calls");
	} else if (o.rss) {
		struct call_rec c;
		if (call_once(&s, code_stdlib('r', 0), "RSS: one stdlib call", &c) == 0)
			rss_rows(&s, "after one call");
	}
	server_stop(&s);
	if (o.calls_on)
		section_tidy(&o);
sandbox:
	if (o.exec)
		section_exec(&o);
	if (o.sandbox) {
		section_sandbox(&o);
		section_aged(&o);
	}

	header(&o, load_start);
	table_print();
	rc = failures ? 1 : 0;
done:
	rm_tree(o.tmp);
	return rc;
}
