/*
 * test_kubecfg.c - unit tests for the master's Kubernetes access (master/kubecfg.c): the YAML
 * reader yaml_to_json, and kubecfg_load + kubecfg_current on real kubeconfig files, real exec
 * credential plugins (small /bin/sh scripts) and a fake service-account directory.
 *
 * kubecfg keeps its state in one static struct that is filled once per process, so each load
 * runs in a forked child (run_load): the child calls kubecfg_load, then kubecfg_current (the
 * credential only the master holds and master/kube_api.c puts on its requests), and sends the
 * result and the credential's bytes back through a pipe for the parent to assert on.
 *
 * Tests named test_bug_* pin defects found while writing these tests (all fixed since).
 * No server named here is ever contacted: kubecfg only stores the URL.
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "ipc/chan.h"
#include "ipc/ipc.h"
#include "master/kubecfg.h"
#include "master/master.h"
#include "master/stdio.h"
#include "tests/unit/testutil.h"

/* the CA, client certificate and key the kubeconfigs carry (never parsed as PEM by kubecfg) */
#define CA_PEM "-----BEGIN CERTIFICATE-----\nfake-ca\n-----END CERTIFICATE-----\n"
#define CA_B64 "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCmZha2UtY2EKLS0tLS1FTkQgQ0VSVElGSUNBVEUtLS0tLQo="
#define CERT_PEM "-----BEGIN CERTIFICATE-----\nfake-client\n-----END CERTIFICATE-----\n"
#define CERT_B64                                                                                  \
	"LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCmZha2UtY2xpZW50Ci0tLS0tRU5EIENFUlRJRklDQVRFLS0tLS0K"
#define KEY_PEM "-----BEGIN PRIVATE KEY-----\nfake-key\n-----END PRIVATE KEY-----\n"
#define KEY_B64 "LS0tLS1CRUdJTiBQUklWQVRFIEtFWS0tLS0tCmZha2Uta2V5Ci0tLS0tRU5EIFBSSVZBVEUgS0VZLS0tLS0K"

static char tmp[512]; /* one temp dir for the whole file, removed at the end */

/* ---- helpers ---- */

/* path_in - tmp/rel, in a static ring so a test can hold several at once */
static const char *path_in(const char *rel)
{
	static char ring[32][PATH_MAX];
	static int next;
	char *p = ring[next++ % 32];
	snprintf(p, PATH_MAX, "%s/%s", tmp, rel);
	return p;
}

/* write_file - tmp/rel with text (parent directories made), mode as given */
static const char *write_file(const char *rel, const char *text, mode_t mode)
{
	const char *p = path_in(rel);
	char dir[PATH_MAX];
	snprintf(dir, sizeof(dir), "%s", p);
	for (char *s = strchr(dir + strlen(tmp) + 1, '/'); s; s = strchr(s + 1, '/')) {
		*s = '\0';
		mkdir(dir, 0700);
		*s = '/';
	}
	unlink(p);
	int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	close(fd);
	return p;
}

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *f)
{
	(void)st, (void)flag, (void)f;
	return remove(p);
}

static int group_setup(void **st)
{
	(void)st;
	const char *base = getenv("TMPDIR");
	snprintf(tmp, sizeof(tmp), "%s/kg-test-kubecfg-XXXXXX", base && *base ? base : "/tmp");
	if (!mkdtemp(tmp))
		return -1;
	mkdir(path_in("home"), 0700); /* an empty $HOME: no ~/.kube/config */
	return 0;
}

static int group_teardown(void **st)
{
	(void)st;
	return nftw(tmp, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

/* yaml - yaml_to_json on a C string; err filled on failure */
static json_t *yaml(const char *text, char *err, size_t errlen)
{
	err[0] = '\0';
	return yaml_to_json(text, strlen(text), err, errlen);
}

/* assert_yaml_is - text parses to the value the JSON expect describes */
static void assert_yaml_is(const char *text, const char *expect)
{
	char err[256];
	json_t *got = yaml(text, err, sizeof(err));
	if (!got)
		fail_msg("yaml_to_json refused %s: %s", text, err);
	json_t *want = json_loads(expect, JSON_DECODE_ANY, NULL);
	assert_non_null(want);
	if (!json_equal(got, want)) {
		char *g = json_dumps(got, JSON_ENCODE_ANY | JSON_SORT_KEYS);
		fail_msg("yaml_to_json(%s) = %s, want %s", text, g, expect);
	}
	json_decref(got);
	json_decref(want);
}

/* yaml_error - yaml_to_json's error for text, in err; the test fails if text is accepted */
static void yaml_error(const char *text, char *err, size_t errlen)
{
	json_t *got = yaml(text, err, errlen);
	if (got) {
		char *g = json_dumps(got, JSON_ENCODE_ANY);
		fail_msg("yaml_to_json accepted %s as %s", text, g);
	}
}

/* assert_yaml_refused - text is refused with an error that contains want */
static void assert_yaml_refused(const char *text, const char *want)
{
	char err[256];
	yaml_error(text, err, sizeof(err));
	if (!strstr(err, want))
		fail_msg("yaml_to_json(%s): error \"%s\" does not contain \"%s\"", text, err, want);
}

/* assert_yaml_error_at - text is refused with an error that starts with line ("line N:") */
static void assert_yaml_error_at(const char *text, const char *line)
{
	char err[256];
	yaml_error(text, err, sizeof(err));
	if (strncmp(err, line, strlen(line)) != 0)
		fail_msg("error \"%s\" does not start with \"%s\"", err, line);
}

/* ---- one kubecfg_load in a child ---- */

/* What kubecfg_current gave, as byte ranges into the child's report (the master's own view:
 * no part of it goes to a worker any more). */
struct kube_ans {
	bool ok, insecure, in_cluster;
	struct ipc_bytes error, server, ca, cert, key, token, namespace;
	uint64_t expires;
};

struct kube_run {
	int load_rc;        /* kubecfg_load's result */
	char err[1024];     /* its message */
	char describe[2600];
	bool answered;      /* kubecfg_current was asked */
	char *raw;          /* the report's byte fields */
	struct kube_ans a;
	struct kube_ans *ans;
};

/* the child's report, ahead of the credential's bytes */
struct child_report {
	int load_rc;
	char err[1024];
	char describe[2600];
	uint32_t ans_len; /* 0: not asked */
	bool ok, insecure, in_cluster;
	uint64_t expires;
	uint32_t len[7];  /* error, server, ca, cert, key, token, namespace */
	char why[256];    /* the child's own trouble, if any */
};

/* child_answer - kubecfg_current, its byte fields one after the other into *raw */
static int child_answer(struct child_report *rep, char **raw)
{
	struct kubecfg_cred c;
	char err[1024];
	int r = kubecfg_current(&c, false, err, sizeof(err));
	rep->ok = r == 0;
	rep->insecure = c.insecure;
	rep->in_cluster = c.in_cluster;
	rep->expires = (uint64_t)c.expires;
	const char *f[7] = { r ? err : "", c.server, c.ca, c.cert, c.key, c.token, c.ns };
	size_t n[7] = { r ? strlen(err) : 0, c.server ? strlen(c.server) : 0, c.ca_len, c.cert_len,
			c.key_len, c.token ? strlen(c.token) : 0, c.ns ? strlen(c.ns) : 0 };
	size_t total = 0;
	for (int i = 0; i < 7; i++)
		total += n[i];
	*raw = malloc(total + 1);
	size_t off = 0;
	for (int i = 0; i < 7; i++) {
		rep->len[i] = (uint32_t)n[i];
		if (n[i])
			memcpy(*raw + off, f[i], n[i]);
		off += n[i];
	}
	rep->ans_len = (uint32_t)total + 1; /* never 0 when asked */
	(*raw)[total] = '\0';
	kubecfg_cred_free(&c);
	return 0;
}

/* write_all - the whole buffer to fd */
static bool write_all(int fd, const void *buf, size_t len)
{
	const char *p = buf;
	while (len) {
		ssize_t n = write(fd, p, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return false;
		p += n, len -= (size_t)n;
	}
	return true;
}

/* run_child - the child's side of run_load; never returns */
static void run_child(int fd, const struct serve_config *cfg, const char *const *env, int loads,
		      bool answer)
{
	/* a crash must kill the child, not land in cmocka's handler in a copy of the runner */
	static const int sigs[] = { SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT };
	for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
		signal(sigs[i], SIG_DFL);
	unsetenv("KUBECONFIG");
	unsetenv("KUBERNETES_SERVICE_HOST");
	unsetenv("KUBERNETES_SERVICE_PORT");
	unsetenv("KODE_GOPHER_SERVICEACCOUNT_DIR");
	char home[PATH_MAX];
	snprintf(home, sizeof(home), "%s/home", tmp);
	setenv("HOME", home, 1);
	for (size_t i = 0; env && env[i]; i++) {
		const char *eq = strchr(env[i], '=');
		if (!eq) {
			unsetenv(env[i]);
			continue;
		}
		char name[128];
		snprintf(name, sizeof(name), "%.*s", (int)(eq - env[i]), env[i]);
		setenv(name, eq + 1, 1);
	}
	struct child_report rep = { 0 };
	char *raw = NULL;
	/* cfg[1..loads-1] are loaded after cfg[0] in the same process (test_bug_reload) */
	for (int i = 0; i < loads; i++)
		rep.load_rc = kubecfg_load(&cfg[i], rep.err, sizeof(rep.err));
	snprintf(rep.describe, sizeof(rep.describe), "%s", kubecfg_describe());
	if (answer)
		child_answer(&rep, &raw);
	bool ok = write_all(fd, &rep, sizeof(rep)) && (!raw || write_all(fd, raw, rep.ans_len));
	_exit(ok ? 0 : 3);
}

/* run_load_n - fork; in the child set env ("NAME=VALUE" sets, "NAME" unsets; KUBECONFIG,
 * KUBERNETES_SERVICE_* and KODE_GOPHER_SERVICEACCOUNT_DIR are unset and HOME is an empty dir
 * first), kubecfg_load each of cfg[0..loads-1] in turn, then kubecfg_current if answer */
static void run_load_n(const struct serve_config *cfg, int loads, const char *const *env,
		       bool answer, struct kube_run *out)
{
	memset(out, 0, sizeof(*out));
	int fds[2];
	assert_int_equal(pipe2(fds, O_CLOEXEC), 0);
	fflush(NULL);
	pid_t pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		close(fds[0]);
		run_child(fds[1], cfg, env, loads, answer);
	}
	close(fds[1]);
	char *buf = NULL;
	size_t len = 0, cap = 0;
	for (;;) {
		if (len + 4096 > cap) {
			cap = cap ? cap * 2 : 65536;
			buf = realloc(buf, cap);
			assert_non_null(buf);
		}
		ssize_t n = read(fds[0], buf + len, cap - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		len += (size_t)n;
	}
	close(fds[0]);
	int status;
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	char how[128];
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
		fail_msg("the child that ran kubecfg_load %s",
			 proc_status_text(status, how, sizeof(how)));
	struct child_report rep;
	assert_true(len >= sizeof(rep));
	memcpy(&rep, buf, sizeof(rep));
	if (rep.why[0])
		fail_msg("%s", rep.why);
	out->load_rc = rep.load_rc;
	memcpy(out->err, rep.err, sizeof(out->err));
	memcpy(out->describe, rep.describe, sizeof(out->describe));
	assert_int_equal(len, sizeof(rep) + rep.ans_len);
	if (rep.ans_len) {
		out->raw = malloc(rep.ans_len);
		memcpy(out->raw, buf + sizeof(rep), rep.ans_len);
		struct ipc_bytes *f[7] = { &out->a.error, &out->a.server, &out->a.ca, &out->a.cert,
					   &out->a.key, &out->a.token, &out->a.namespace };
		size_t off = 0;
		for (int i = 0; i < 7; i++) {
			*f[i] = (struct ipc_bytes){ out->raw + off, rep.len[i] };
			off += rep.len[i];
		}
		out->a.ok = rep.ok;
		out->a.insecure = rep.insecure;
		out->a.in_cluster = rep.in_cluster;
		out->a.expires = rep.expires;
		out->answered = true;
		out->ans = &out->a;
	}
	free(buf);
}

static void run_load(const struct serve_config *cfg, const char *const *env, struct kube_run *out)
{
	run_load_n(cfg, 1, env, true, out);
}

static void kube_run_free(struct kube_run *r)
{
	free(r->raw);
	r->raw = NULL;
	r->answered = false;
}

/* kcfg - the serve defaults with --backend kubernetes */
static struct serve_config kcfg(void)
{
	struct serve_config c;
	serve_config_defaults(&c);
	c.kubernetes = true;
	return c;
}

/* assert_bytes - a decoded byte range equals a C string */
#define assert_bytes(b, s)                                                                        \
	do {                                                                                      \
		char got_[4096];                                                                  \
		ipc_bytes_str((b), got_, sizeof(got_));                                           \
		assert_string_equal(got_, (s));                                                   \
		assert_int_equal((b).len, strlen(s));                                             \
	} while (0)

/* assert_contains - hay contains needle, with both in the message when not */
#define assert_contains(hay, needle)                                                              \
	do {                                                                                      \
		if (!strstr((hay), (needle)))                                                     \
			fail_msg("\"%s\" does not contain \"%s\"", (hay), (needle));              \
	} while (0)

/* assert_loaded - kubecfg_load succeeded and the answer is ok */
static void assert_loaded(const struct kube_run *r)
{
	if (r->load_rc != 0)
		fail_msg("kubecfg_load failed: %s", r->err);
	assert_true(r->answered);
	if (!r->ans->ok)
		fail_msg("kubecfg_current failed: %.*s", (int)r->ans->error.len, r->ans->error.ptr);
}

/* load_ok - run_load, and assert_loaded of its result (kube_run_free it after the asserts) */
static void load_ok(const struct serve_config *cfg, const char *const *env, struct kube_run *r)
{
	run_load(cfg, env, r);
	assert_loaded(r);
}

/* assert_load_fails - kubecfg_load refused with a message containing want, and a worker that
 * asks anyway is told no */
static void assert_load_fails(const struct kube_run *r, const char *want)
{
	if (r->load_rc == 0)
		fail_msg("kubecfg_load succeeded (%s), expected an error containing \"%s\"",
			 r->describe, want);
	assert_contains(r->err, want);
	assert_true(r->answered);
	assert_false(r->ans->ok);
	assert_int_equal(r->ans->token.len, 0);
}

/* assert_refused - kubecfg_load of cfg (in a child, with env as run_load takes it) fails with a
 * message containing want and, unless it is NULL, also */
static void assert_refused(const struct serve_config *cfg, const char *const *env, const char *want,
			   const char *also)
{
	struct kube_run r;
	run_load(cfg, env, &r);
	assert_load_fails(&r, want);
	if (also)
		assert_contains(r.err, also);
	kube_run_free(&r);
}

/* kubeconfig_x - a kubeconfig at rel whose current context x joins cluster c (cluster: the YAML
 * after "cluster:", a flow mapping or lines under it) and the user named user (user_yaml: the
 * YAML after "user:"), or no user when user is NULL */
static const char *kubeconfig_x(const char *rel, const char *cluster, const char *user,
				const char *user_yaml)
{
	char text[4096], users[2048] = "", ctx_user[256] = "";
	if (user) {
		snprintf(users, sizeof(users), "users:\n- name: %s\n  user:%s", user, user_yaml);
		snprintf(ctx_user, sizeof(ctx_user), ", user: %s", user);
	}
	snprintf(text, sizeof(text),
		 "clusters:\n- name: c\n  cluster:%s%s"
		 "contexts:\n- name: x\n  context: {cluster: c%s}\ncurrent-context: x\n",
		 cluster, users, ctx_user);
	return write_file(rel, text, 0600);
}

/* cluster_config - kubeconfig_x with no user and server https://h.test, followed by extra (YAML
 * lines under cluster:, each starting with four spaces) */
static const char *cluster_config(const char *rel, const char *extra)
{
	char cluster[2048];
	snprintf(cluster, sizeof(cluster), "\n    server: https://h.test\n%s", extra);
	return kubeconfig_x(rel, cluster, NULL, NULL);
}

/* two clusters, two users, two contexts; current-context ctx-b */
static const char two_contexts[] =
	"apiVersion: v1\n"
	"kind: Config\n"
	"clusters:\n"
	"- name: cl-a\n"
	"  cluster:\n"
	"    server: https://a.example.test:6443\n"
	"    certificate-authority-data: " CA_B64 "\n"
	"- name: cl-b\n"
	"  cluster:\n"
	"    server: https://b.example.test/\n"
	"    insecure-skip-tls-verify: true\n"
	"users:\n"
	"- name: u-a\n"
	"  user:\n"
	"    client-certificate-data: " CERT_B64 "\n"
	"    client-key-data: " KEY_B64 "\n"
	"- name: u-b\n"
	"  user:\n"
	"    token: token-of-b\n"
	"contexts:\n"
	"- name: ctx-a\n"
	"  context: {cluster: cl-a, user: u-a, namespace: team-a}\n"
	"- name: ctx-b\n"
	"  context:\n"
	"    cluster: cl-b\n"
	"    user: u-b\n"
	"current-context: ctx-b\n";

/* kcfg_two - kcfg with --kubeconfig two_contexts (written at two/config) and --context context
 * (NULL: none) */
static struct serve_config kcfg_two(const char *context)
{
	struct serve_config c = kcfg();
	c.kubeconfig = write_file("two/config", two_contexts, 0600);
	c.kube_context = context;
	return c;
}

/* ---- yaml_to_json ---- */

static void test_yaml_block(void **st)
{
	(void)st;
	assert_yaml_is("a: b\n"
		       "nested:\n"
		       "  deeper:\n"
		       "    x: \"quoted: yes\"\n"
		       "    y: 'single # not a comment'\n"
		       "list:\n"
		       "- one\n"
		       "- k: v\n"
		       "  k2: v2\n"
		       "# a comment\n"
		       "folded: >\n"
		       "  two\n"
		       "  lines\n"
		       "literal: |\n"
		       "  keep\n"
		       "  lines\n",
		       "{\"a\": \"b\", \"nested\": {\"deeper\": {\"x\": \"quoted: yes\", \"y\": "
		       "\"single # not a comment\"}}, \"list\": [\"one\", {\"k\": \"v\", \"k2\": "
		       "\"v2\"}], \"folded\": \"two lines\\n\", \"literal\": \"keep\\nlines\\n\"}");
	/* every scalar is a string: kubecfg compares "true" itself */
	assert_yaml_is("n: 6443\nb: true\nf: 1.5\n", "{\"n\": \"6443\", \"b\": \"true\", \"f\": \"1.5\"}");
	/* a top-level scalar or list is a value too */
	assert_yaml_is("just text\n", "\"just text\"");
	assert_yaml_is("- a\n- b\n", "[\"a\", \"b\"]");
}

static void test_yaml_flow_json(void **st)
{
	(void)st;
	/* a kubeconfig written as JSON (kubectl accepts both) */
	const char *j = "{\"apiVersion\": \"v1\", \"clusters\": [{\"name\": \"c\", \"cluster\": "
			"{\"server\": \"https://h:6443\"}}], \"users\": [], \"current-context\": \"x\","
			" \"escaped\": \"tab\\there \\u00e9\", \"n\": null}";
	assert_yaml_is(j, j);
	assert_yaml_is("{\"a\": [1, true, null, \"s\"]}", "{\"a\": [\"1\", \"true\", null, \"s\"]}");
	assert_yaml_is("[a, [b, c], {d: e}]", "[\"a\", [\"b\", \"c\"], {\"d\": \"e\"}]");
	/* flow and block mixed */
	assert_yaml_is("a: {b: [c, d]}\ne:\n- [f]\n", "{\"a\": {\"b\": [\"c\", \"d\"]}, \"e\": [[\"f\"]]}");
}

static void test_yaml_null_scalars(void **st)
{
	(void)st;
	assert_yaml_is("a: null\nb: ~\nc:\nd: \"null\"\ne: '~'\nf: \"\"\ng: nullish\n",
		       "{\"a\": null, \"b\": null, \"c\": null, \"d\": \"null\", \"e\": \"~\", "
		       "\"f\": \"\", \"g\": \"nullish\"}");
	assert_yaml_is("[~, null, '', ]", "[null, null, \"\"]");
	/* an empty file, or one with only a comment or a document marker, is null */
	assert_yaml_is("", "null");
	assert_yaml_is("# nothing\n", "null");
	assert_yaml_is("---\n", "null");
	assert_yaml_is("--- ~\n...\n", "null");
}

static void test_yaml_nested_lists(void **st)
{
	(void)st;
	assert_yaml_is("- - a\n  - b\n- - - c\n- []\n- {}\n",
		       "[[\"a\", \"b\"], [[\"c\"]], [], {}]");
	assert_yaml_is("k:\n- - x: [1, [2, [3]]]\n", "{\"k\": [[{\"x\": [\"1\", [\"2\", [\"3\"]]]}]]}");
	/* 65 levels (the top value and 64 below it) are fine, 66 are refused */
	char deep[200];
	memset(deep, '[', 65);
	memset(deep + 65, ']', 65);
	deep[130] = '\0';
	char err[256];
	json_t *v = yaml(deep, err, sizeof(err));
	if (!v)
		fail_msg("65 nested lists refused: %s", err);
	json_decref(v);
	memset(deep, '[', 66);
	memset(deep + 66, ']', 66);
	deep[132] = '\0';
	assert_yaml_refused(deep, "nested more than 64 levels deep");
}

static void test_yaml_anchors_aliases_refused(void **st)
{
	(void)st;
	assert_yaml_refused("a: &x value\nb: c\n", "YAML anchors are not supported");
	assert_yaml_refused("a: b\nc: *x\n", "YAML aliases are not supported");
	assert_yaml_refused("a: &x v\nb: *x\n", "not supported");
	assert_yaml_refused("- &x v\n- *x\n", "not supported");
	/* an alias as a key is not a plain value */
	assert_yaml_refused("a: b\n*k : c\n", "line 2: a mapping key must be a plain value");
	/* a billion laughs cannot happen: the first alias stops the parse */
	assert_yaml_refused("a: &a [x, x]\nb: &b [*a, *a]\nc: [*b, *b]\n", "not supported");
}

static void test_yaml_multiple_documents_refused(void **st)
{
	(void)st;
	assert_yaml_refused("a: 1\n---\nb: 2\n", "more than one YAML document");
	assert_yaml_refused("--- a\n...\n--- b\n", "more than one YAML document");
	assert_yaml_refused("---\n---\n", "more than one YAML document");
	/* one document with its markers is fine */
	assert_yaml_is("---\na: 1\n...\n", "{\"a\": \"1\"}");
}

static void test_yaml_malformed_has_line(void **st)
{
	(void)st;
	/* an unclosed flow list on line 3, noticed on line 4 where the next key starts */
	assert_yaml_error_at("a: 1\nb: 2\nc: [x, y\nd: 4\n", "line 4:");
	/* a bad indentation on line 4 */
	assert_yaml_error_at("a:\n  b: 1\n  c: 2\n d: 3\n", "line 4:");
	/* a tab as indentation on line 2 */
	assert_yaml_error_at("a:\n\tb: 1\n", "line 2:");
	/* a quoted string still open at the end of line 2's text */
	assert_yaml_error_at("a: b\nc: \"open\n", "line 3:");
	/* a key that is a list, on line 2: the whole message */
	char err[256];
	assert_null(yaml("a: b\n? [x]\n: y\n", err, sizeof(err)));
	if (strcmp(err, "line 2: a mapping key must be a plain value") != 0)
		fail_msg("error \"%s\"", err);
	/* bytes that are not UTF-8 */
	assert_yaml_error_at("a: \xff\xfe\n", "line 1:");
}

static void test_yaml_length_is_honoured(void **st)
{
	(void)st;
	/* only len bytes are read: what follows (a second document here) is not seen */
	const char text[] = "a: b\n---\nc: d\n";
	char err[256];
	json_t *v = yaml_to_json(text, 5, err, sizeof(err));
	assert_non_null(v);
	assert_string_equal(json_string_value(json_object_get(v, "a")), "b");
	assert_int_equal(json_object_size(v), 1);
	json_decref(v);
	/* a NUL inside the length is not the end of the input */
	const char nul[] = "a: b\0c: d\n";
	assert_null(yaml_to_json(nul, sizeof(nul) - 1, err, sizeof(err)));
	assert_true(err[0] != '\0');
}

/* ---- kubecfg_load ---- */

static void test_answer_before_load(void **st)
{
	(void)st;
	struct serve_config c = kcfg();
	struct kube_run r;
	run_load_n(&c, 0, NULL, true, &r);
	assert_true(r.answered);
	assert_false(r.ans->ok);
	char e[256];
	ipc_bytes_str(r.ans->error, e, sizeof(e));
	assert_contains(e, "not started with --backend kubernetes");
	assert_string_equal(r.describe, "");
	kube_run_free(&r);
}

static void test_no_access(void **st)
{
	(void)st;
	struct serve_config c = kcfg();
	assert_refused(&c, NULL, "no Kubernetes access", NULL);
	/* an explicit --kubeconfig that is missing is an error, not a fallback */
	c.kubeconfig = path_in("no-such-kubeconfig");
	assert_refused(&c, NULL, "cannot read", "no-such-kubeconfig");
}

static void test_current_context(void **st)
{
	(void)st;
	struct serve_config c = kcfg_two(NULL);
	struct kube_run r;
	load_ok(&c, NULL, &r);
	/* the trailing slash of the server goes */
	assert_string_equal(r.describe,
			    "context ctx-b, server https://b.example.test, namespace default");
	assert_bytes(r.ans->server, "https://b.example.test");
	assert_bytes(r.ans->token, "token-of-b");
	assert_bytes(r.ans->namespace, "default");
	assert_true(r.ans->insecure);
	assert_false(r.ans->in_cluster);
	assert_int_equal(r.ans->ca.len, 0);
	assert_int_equal(r.ans->cert.len, 0);
	assert_int_equal(r.ans->key.len, 0);
	assert_true(r.ans->expires == 0);
	kube_run_free(&r);
}

static void test_explicit_context(void **st)
{
	(void)st;
	struct serve_config c = kcfg_two("ctx-a");
	struct kube_run r;
	load_ok(&c, NULL, &r);
	assert_string_equal(r.describe,
			    "context ctx-a, server https://a.example.test:6443, namespace team-a");
	assert_bytes(r.ans->server, "https://a.example.test:6443");
	/* the -data fields, base64-decoded */
	assert_bytes(r.ans->ca, CA_PEM);
	assert_bytes(r.ans->cert, CERT_PEM);
	assert_bytes(r.ans->key, KEY_PEM);
	assert_int_equal(r.ans->token.len, 0);
	assert_bytes(r.ans->namespace, "team-a");
	assert_false(r.ans->insecure);
	kube_run_free(&r);
	/* --namespace wins over the context's */
	c.kube_namespace = "override";
	load_ok(&c, NULL, &r);
	assert_bytes(r.ans->namespace, "override");
	kube_run_free(&r);
}

static void test_missing_context(void **st)
{
	(void)st;
	struct serve_config c = kcfg_two("nope");
	assert_refused(&c, NULL, "no context named \"nope\" (contexts: ctx-a, ctx-b)", NULL);
	/* a current-context that is not there */
	c.kube_context = NULL;
	c.kubeconfig = write_file("gone/config",
				  "contexts:\n- name: only\n  context: {cluster: c}\n"
				  "current-context: elsewhere\n", 0600);
	assert_refused(&c, NULL, "no context named \"elsewhere\" (contexts: only)", NULL);
	/* no current-context at all */
	c.kubeconfig = write_file("nocur/config", "contexts:\n- name: x\n  context: {cluster: c}\n"
						  "- name: y\n  context: {cluster: c}\n", 0600);
	assert_refused(&c, NULL, "sets no current-context; pass --context (contexts: x, y)", NULL);
	/* a context whose cluster is missing */
	c.kube_context = "x";
	assert_refused(&c, NULL, "context \"x\" names cluster \"c\", which is not in the kubeconfig",
		       NULL);
}

static void test_relative_paths(void **st)
{
	(void)st;
	write_file("rel/sub/ca.pem", CA_PEM, 0600);
	write_file("rel/sub/certs/client.pem", CERT_PEM, 0600);
	write_file("rel/sub/certs/client.key", KEY_PEM, 0600);
	write_file("rel/sub/token", "file-token\n", 0600);
	struct serve_config c = kcfg();
	c.kubeconfig = kubeconfig_x("rel/sub/config",
				    "\n    server: https://h.test:443\n"
				    "    certificate-authority: ca.pem\n",
				    "u",
				    "\n    client-certificate: certs/client.pem\n"
				    "    client-key: ./certs/client.key\n"
				    "    tokenFile: token\n");
	struct kube_run r;
	/* the test runs in the repository root: the paths are relative to the kubeconfig */
	load_ok(&c, NULL, &r);
	assert_bytes(r.ans->ca, CA_PEM);
	assert_bytes(r.ans->cert, CERT_PEM);
	assert_bytes(r.ans->key, KEY_PEM);
	/* a tokenFile is read for each answer, its line end dropped */
	assert_bytes(r.ans->token, "file-token");
	kube_run_free(&r);
	/* a missing file is named in full */
	c.kubeconfig = cluster_config("rel/sub/config2", "    certificate-authority: missing/ca.pem\n");
	assert_refused(&c, NULL, "cluster \"c\": cannot read ", path_in("rel/sub/missing/ca.pem"));
}

static void test_base64_data(void **st)
{
	(void)st;
	struct serve_config c = kcfg();
	/* wrapped over lines and without its padding: both still decode */
	c.kubeconfig = kubeconfig_x("b64/config",
				    "\n    server: https://h.test\n"
				    "    certificate-authority-data: |\n"
				    "      LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCmZha2Ut\n"
				    "      Y2EKLS0tLS1FTkQgQ0VSVElGSUNBVEUtLS0tLQo\n",
				    "u", " {token: t}\n");
	struct kube_run r;
	load_ok(&c, NULL, &r);
	assert_bytes(r.ans->ca, CA_PEM);
	kube_run_free(&r);
	/* a -data field wins over the file one */
	c.kubeconfig = cluster_config("b64/config2", "    certificate-authority-data: " CA_B64 "\n"
						     "    certificate-authority: /nonexistent/ca.pem\n");
	load_ok(&c, NULL, &r);
	assert_bytes(r.ans->ca, CA_PEM);
	kube_run_free(&r);
	/* not base64 */
	c.kubeconfig = cluster_config("b64/config3", "    certificate-authority-data: \"not*base64!\"\n");
	assert_refused(&c, NULL, "cluster \"c\": certificate-authority-data is not valid base64", NULL);
	/* a certificate without its key */
	c.kubeconfig = kubeconfig_x("b64/config4", " {server: https://h.test}\n", "u",
				    "\n    client-certificate-data: " CERT_B64 "\n");
	assert_refused(&c, NULL, "user \"u\" has a client certificate without its key", NULL);
}

static void test_server_must_be_https(void **st)
{
	(void)st;
	struct serve_config c = kcfg();
	c.kubeconfig = write_file("http/config",
				  "clusters:\n- name: plain\n  cluster: {server: \"http://h.test:8080\"}\n"
				  "contexts:\n- name: x\n  context: {cluster: plain}\ncurrent-context: x\n",
				  0600);
	assert_refused(&c, NULL, "cluster \"plain\" has a non-https server", "https:// only");
	c.kubeconfig = write_file("http/config2",
				  "clusters:\n- name: none\n  cluster: {}\n"
				  "contexts:\n- name: x\n  context: {cluster: none}\ncurrent-context: x\n",
				  0600);
	assert_refused(&c, NULL, "cluster \"none\" has no server", NULL);
}

static void test_refused_user_kinds(void **st)
{
	(void)st;
	struct serve_config c = kcfg();
	c.kubeconfig = kubeconfig_x("ap/config", " {server: https://h.test}\n", "old-gke",
				    "\n    auth-provider:\n      name: gcp\n      config: {cmd-path: gcloud}\n");
	assert_refused(&c, NULL, "user \"old-gke\" uses an auth-provider",
		       "use an exec credential plugin (for GKE: gke-gcloud-auth-plugin)");
	c.kubeconfig = kubeconfig_x("ap/config2", " {server: https://h.test}\n", "basic",
				    " {username: admin, password: secret}\n");
	struct kube_run r;
	run_load(&c, NULL, &r);
	assert_load_fails(&r, "user \"basic\" uses a username and password");
	assert_true(strstr(r.err, "secret") == NULL);
	kube_run_free(&r);
}

/* an exec plugin that records its arguments and environment, then prints $EXPIRY's credential */
static const char plugin_ok[] =
	"#!/bin/sh\n"
	"printf '%s\\n' \"$KUBERNETES_EXEC_INFO\" > \"$PLUGIN_OUT.info\"\n"
	"printf '%s %s|%s\\n' \"$1\" \"$2\" \"$FROM_KUBECONFIG\" > \"$PLUGIN_OUT.args\"\n"
	"cat <<EOF\n"
	"{\"apiVersion\": \"client.authentication.k8s.io/v1beta1\", \"kind\": \"ExecCredential\",\n"
	" \"status\": {\"token\": \"exec-token-1\", \"expirationTimestamp\": \"$EXPIRY\"}}\n"
	"EOF\n";

/* plugin_config - a kubeconfig at rel whose user runs command with extra (YAML lines under
 * exec:, each starting with four spaces) */
static const char *plugin_config(const char *rel, const char *command, const char *extra)
{
	char text[4096];
	snprintf(text, sizeof(text),
		 "clusters:\n- name: c\n  cluster:\n    server: https://h.test\n"
		 "    certificate-authority-data: " CA_B64 "\n"
		 "users:\n- name: u\n  user:\n    exec:\n"
		 "      apiVersion: client.authentication.k8s.io/v1beta1\n"
		 "      command: %s\n%s"
		 "contexts:\n- name: x\n  context: {cluster: c, user: u, namespace: ns1}\n"
		 "current-context: x\n",
		 command, extra);
	return write_file(rel, text, 0600);
}

/* slurp - a small file's text (static buffer), "" if it cannot be read */
static const char *slurp(const char *path)
{
	static char buf[8192];
	buf[0] = '\0';
	FILE *f = fopen(path, "r");
	if (f) {
		size_t n = fread(buf, 1, sizeof(buf) - 1, f);
		buf[n] = '\0';
		fclose(f);
	}
	return buf;
}

static void test_exec_plugin_token(void **st)
{
	(void)st;
	write_file("exec/plugin.sh", plugin_ok, 0700);
	struct serve_config c = kcfg();
	/* a relative command with a slash is relative to the kubeconfig's directory */
	c.kubeconfig = plugin_config("exec/config", "./plugin.sh",
				     "      args: [get-token, --fast]\n"
				     "      env:\n      - {name: FROM_KUBECONFIG, value: set-by-kubeconfig}\n"
				     "      installHint: not needed\n");
	char out_env[PATH_MAX + 16];
	snprintf(out_env, sizeof(out_env), "PLUGIN_OUT=%s", path_in("exec/out"));
	const char *env[] = { out_env, "EXPIRY=2099-01-02T03:04:05Z",
			      "FROM_KUBECONFIG=overridden-by-kubeconfig", NULL };
	struct kube_run r;
	load_ok(&c, env, &r);
	assert_string_equal(r.describe, "context x, server https://h.test, namespace ns1, "
					"credentials from an exec plugin");
	assert_bytes(r.ans->token, "exec-token-1");
	assert_bytes(r.ans->ca, CA_PEM);
	assert_bytes(r.ans->namespace, "ns1");
	struct tm tm = { .tm_year = 199, .tm_mon = 0, .tm_mday = 2, .tm_hour = 3, .tm_min = 4,
			 .tm_sec = 5 };
	time_t want = timegm(&tm);
	assert_true(r.ans->expires == (uint64_t)want);
	kube_run_free(&r);
	/* what the plugin saw: its args, the kubeconfig's env over ours, and the exec info */
	assert_string_equal(slurp(path_in("exec/out.args")), "get-token --fast|set-by-kubeconfig\n");
	json_error_t je;
	json_t *info = json_loads(slurp(path_in("exec/out.info")), 0, &je);
	if (!info)
		fail_msg("KUBERNETES_EXEC_INFO is not JSON: %s", je.text);
	assert_string_equal(json_string_value(json_object_get(info, "kind")), "ExecCredential");
	assert_string_equal(json_string_value(json_object_get(info, "apiVersion")),
			    "client.authentication.k8s.io/v1beta1");
	assert_true(json_is_false(json_object_get(json_object_get(info, "spec"), "interactive")));
	json_decref(info);

	/* an expiry with a fraction and an offset is the same instant */
	const char *env2[] = { out_env, "EXPIRY=2099-01-02T05:04:05.250+02:00", NULL };
	load_ok(&c, env2, &r);
	assert_true(r.ans->expires == (uint64_t)want);
	kube_run_free(&r);

	/* a plugin that gives a client certificate and key instead */
	write_file("exec/cert.sh",
		   "#!/bin/sh\n"
		   "echo '{\"kind\": \"ExecCredential\", \"status\": {\"clientCertificateData\": "
		   "\"CERT\", \"clientKeyData\": \"KEY\"}}'\n", 0700);
	c.kubeconfig = plugin_config("exec/config-cert", path_in("exec/cert.sh"), "");
	load_ok(&c, NULL, &r);
	assert_bytes(r.ans->cert, "CERT");
	assert_bytes(r.ans->key, "KEY");
	assert_int_equal(r.ans->token.len, 0);
	assert_true(r.ans->expires == 0);
	kube_run_free(&r);
}

static void test_exec_plugin_fails(void **st)
{
	(void)st;
	write_file("execfail/fail.sh", "#!/bin/sh\necho 'plugin: not logged in' >&2\nexit 1\n", 0700);
	struct serve_config c = kcfg();
	c.kubeconfig = plugin_config("execfail/config", path_in("execfail/fail.sh"),
				     "      installHint: \"Install it with: apt install fake-auth-plugin\"\n");
	assert_refused(&c, NULL, "user \"u\": the credential plugin ",
		       "fail.sh exited with status 1. Install it with: apt install fake-auth-plugin");
	/* without a hint, the message points at the log */
	c.kubeconfig = plugin_config("execfail/config2", path_in("execfail/fail.sh"), "");
	assert_refused(&c, NULL, "exited with status 1 (its messages are in the server's log)", NULL);
	/* a command that does not exist */
	c.kubeconfig = plugin_config("execfail/config3", "kg-test-no-such-plugin",
				     "      installHint: get kg-test-no-such-plugin\n");
	assert_refused(&c, NULL, "the credential plugin kg-test-no-such-plugin cannot be run: No such "
		       "file or directory. get kg-test-no-such-plugin", NULL);
	/* a plugin flooding its output is stopped at the cap, on stdout or on stderr */
	write_file("execfail/flood.sh", "#!/bin/sh\nexec yes ExecCredential\n", 0700);
	c.kubeconfig = plugin_config("execfail/config7", path_in("execfail/flood.sh"), "");
	assert_refused(&c, NULL, "flood.sh wrote more than 1048576 bytes (stdout) or 65536 (stderr)",
		       NULL);
	write_file("execfail/flood2.sh", "#!/bin/sh\nexec yes complaint >&2\n", 0700);
	c.kubeconfig = plugin_config("execfail/config8", path_in("execfail/flood2.sh"), "");
	assert_refused(&c, NULL, "flood2.sh wrote more than", NULL);
	/* output that is not an ExecCredential */
	write_file("execfail/junk.sh", "#!/bin/sh\necho 'hello'\n", 0700);
	c.kubeconfig = plugin_config("execfail/config4", path_in("execfail/junk.sh"), "");
	assert_refused(&c, NULL, "did not print an ExecCredential", NULL);
	/* an ExecCredential with nothing in it */
	write_file("execfail/empty.sh",
		   "#!/bin/sh\necho '{\"kind\": \"ExecCredential\", \"status\": {}}'\n", 0700);
	c.kubeconfig = plugin_config("execfail/config5", path_in("execfail/empty.sh"), "");
	assert_refused(&c, NULL, "has neither a token nor a client certificate and key", NULL);
	/* a plugin that wants a terminal is not run */
	c.kubeconfig = plugin_config("execfail/config6", path_in("execfail/fail.sh"),
				     "      interactiveMode: Always\n");
	assert_refused(&c, NULL, "wants a terminal (interactiveMode Always)", NULL);
}

/* A plugin that prints its credential and leaves helpers behind, one holding its stdout in a
 * session of its own: the credential is taken when the plugin exits (not when the last holder
 * of the pipe closes it, at the 60 s deadline), and no helper is left running */
static void test_exec_plugin_leaves_nothing(void **st)
{
	(void)st;
	char digits[16], script[1024];
	marker_digits(digits, sizeof(digits));
	snprintf(script, sizeof(script),
		 "#!/bin/sh\n"
		 "setsid sleep 7777.%s1 &\n"
		 "(setsid sleep 7777.%s2 >/dev/null 2>&1 &)\n"
		 "echo '{\"kind\": \"ExecCredential\", \"status\": {\"token\": \"left-behind\"}}'\n",
		 digits, digits);
	write_file("execleft/plugin.sh", script, 0700);
	struct serve_config c = kcfg();
	c.kubeconfig = plugin_config("execleft/config", path_in("execleft/plugin.sh"), "");
	struct kube_run r;
	load_ok(&c, NULL, &r);
	assert_bytes(r.ans->token, "left-behind");
	kube_run_free(&r);
	assert_int_equal(count_marker(digits), 0);
}

static void test_kubeconfig_env_list(void **st)
{
	(void)st;
	write_file("envlist/second/ca.pem", CA_PEM, 0600);
	const char *second = kubeconfig_x("envlist/second/config",
					  "\n    server: https://second.test\n"
					  "    certificate-authority: ca.pem\n",
					  "u", " {token: second-token}\n");
	char kubeconfig[2 * PATH_MAX + 32];
	snprintf(kubeconfig, sizeof(kubeconfig), "KUBECONFIG=%s:%s", path_in("envlist/missing"),
		 second);
	const char *env[] = { kubeconfig, NULL };
	struct serve_config c = kcfg();
	struct kube_run r;
	load_ok(&c, env, &r);
	assert_bytes(r.ans->server, "https://second.test");
	assert_bytes(r.ans->token, "second-token");
	/* relative to the file that was read, not to the missing first one */
	assert_bytes(r.ans->ca, CA_PEM);
	kube_run_free(&r);

	/* merged: the first file names the context and its user, the second has the cluster;
	 * the first file's current-context and its entry of a name win */
	const char *first = write_file(
		"envlist/first/config",
		"users:\n- name: u\n  user: {token: first-token}\n"
		"contexts:\n- name: mine\n  context: {cluster: c, user: u, namespace: first-ns}\n"
		"current-context: mine\n", 0600);
	const char *third = write_file(
		"envlist/third/config",
		"clusters:\n- name: c\n  cluster:\n    server: https://third.test\n"
		"    certificate-authority-data: " CA_B64 "\n"
		"users:\n- name: u\n  user: {token: third-token}\n"
		"contexts:\n- name: other\n  context: {cluster: c, user: u}\n"
		"current-context: other\n", 0600);
	snprintf(kubeconfig, sizeof(kubeconfig), "KUBECONFIG=%s:%s", first, third);
	load_ok(&c, env, &r);
	assert_string_equal(r.describe, "context mine, server https://third.test, namespace first-ns");
	assert_bytes(r.ans->token, "first-token");
	assert_bytes(r.ans->ca, CA_PEM);
	kube_run_free(&r);

	/* ~/.kube/config when $KUBECONFIG is unset */
	write_file("home2/.kube/config", two_contexts, 0600);
	char home[PATH_MAX + 8];
	snprintf(home, sizeof(home), "HOME=%s", path_in("home2"));
	const char *env2[] = { home, NULL };
	load_ok(&c, env2, &r);
	assert_bytes(r.ans->token, "token-of-b");
	kube_run_free(&r);

	/* a kubeconfig that is not YAML names the file and the line */
	const char *bad = write_file("envlist/bad", "clusters:\n- name: [\n", 0600);
	snprintf(kubeconfig, sizeof(kubeconfig), "KUBECONFIG=%s", bad);
	run_load(&c, env, &r);
	assert_load_fails(&r, "kubeconfig ");
	assert_contains(r.err, bad);
	assert_contains(r.err, ": line ");
	kube_run_free(&r);
	/* and one that is YAML but not a mapping */
	bad = write_file("envlist/list", "- a\n- b\n", 0600);
	snprintf(kubeconfig, sizeof(kubeconfig), "KUBECONFIG=%s", bad);
	assert_refused(&c, env, "not a mapping", NULL);
}

static void test_in_cluster(void **st)
{
	(void)st;
	write_file("sa/ca.crt", CA_PEM, 0600);
	write_file("sa/token", "sa-token\n", 0600);
	write_file("sa/namespace", "team-x\n", 0600);
	char sa[PATH_MAX + 40];
	snprintf(sa, sizeof(sa), "KODE_GOPHER_SERVICEACCOUNT_DIR=%s", path_in("sa"));
	const char *env[] = { sa, "KUBERNETES_SERVICE_HOST=127.0.0.1", "KUBERNETES_SERVICE_PORT=6443",
			      NULL };
	struct serve_config c = kcfg();
	struct kube_run r;
	load_ok(&c, env, &r);
	assert_string_equal(r.describe, "context in-cluster, server https://127.0.0.1:6443, "
					"namespace team-x");
	assert_true(r.ans->in_cluster);
	assert_bytes(r.ans->server, "https://127.0.0.1:6443");
	assert_bytes(r.ans->ca, CA_PEM);
	assert_bytes(r.ans->token, "sa-token");
	assert_bytes(r.ans->namespace, "team-x");
	kube_run_free(&r);

	/* an IPv6 service address, the default port, and --namespace */
	const char *env6[] = { sa, "KUBERNETES_SERVICE_HOST=::1", NULL };
	c.kube_namespace = "mine";
	load_ok(&c, env6, &r);
	assert_bytes(r.ans->server, "https://[::1]:443");
	assert_bytes(r.ans->namespace, "mine");
	kube_run_free(&r);
	c.kube_namespace = NULL;

	/* a kubeconfig, when there is one, comes first */
	write_file("home3/.kube/config", two_contexts, 0600);
	char home[PATH_MAX + 8];
	snprintf(home, sizeof(home), "HOME=%s", path_in("home3"));
	const char *envk[] = { sa, "KUBERNETES_SERVICE_HOST=127.0.0.1", home, NULL };
	load_ok(&c, envk, &r);
	assert_false(r.ans->in_cluster);
	assert_bytes(r.ans->token, "token-of-b");
	kube_run_free(&r);

	/* a service-account directory without its token */
	write_file("sa-notoken/ca.crt", CA_PEM, 0600);
	snprintf(sa, sizeof(sa), "KODE_GOPHER_SERVICEACCOUNT_DIR=%s", path_in("sa-notoken"));
	assert_refused(&c, env, "cannot read ", path_in("sa-notoken/token"));
}

/* ---- defects (see the file's opening comment) ---- */

/* A -data field made only of '=' (or with more '=' than data) decodes to a negative length:
 * kc_b64 writes out[-n/4] and reports a length of SIZE_MAX; the answer then crashes. */
static void test_bug_base64_all_padding(void **st)
{
	(void)st;
	struct serve_config c = kcfg();
	c.kubeconfig = cluster_config("bug-b64/config", "    certificate-authority-data: \"========\"\n");
	assert_refused(&c, NULL, "certificate-authority-data is not valid base64", NULL);
}

/* yaml_to_json makes every scalar a string, so json_is_true() never sees provideClusterInfo:
 * true, and the plugin is not told the cluster. */
static void test_bug_provide_cluster_info(void **st)
{
	(void)st;
	write_file("bug-pci/plugin.sh", plugin_ok, 0700);
	struct serve_config c = kcfg();
	c.kubeconfig = plugin_config("bug-pci/config", "./plugin.sh",
				     "      provideClusterInfo: true\n");
	char out_env[PATH_MAX + 16];
	snprintf(out_env, sizeof(out_env), "PLUGIN_OUT=%s", path_in("bug-pci/out"));
	const char *env[] = { out_env, "EXPIRY=2099-01-02T03:04:05Z", NULL };
	struct kube_run r;
	load_ok(&c, env, &r);
	kube_run_free(&r);
	json_t *info = json_loads(slurp(path_in("bug-pci/out.info")), 0, NULL);
	assert_non_null(info);
	json_t *cl = json_object_get(json_object_get(info, "spec"), "cluster");
	assert_non_null(cl);
	assert_string_equal(json_string_value(json_object_get(cl, "server")), "https://h.test");
	assert_string_equal(json_string_value(json_object_get(cl, "certificate-authority-data")),
			    CA_B64);
	json_decref(info);
}

/* kubecfg_load a second time in one process keeps the first load's exec plugin, token file,
 * client certificate and in-cluster flag: the second config's static token is not what a
 * worker gets. (serve calls it once; any second caller, or a reload, would mix the two.) */
static void test_bug_reload(void **st)
{
	(void)st;
	write_file("bug-reload/plugin.sh", plugin_ok, 0700);
	struct serve_config c[2] = { kcfg(), kcfg() };
	c[0].kubeconfig = plugin_config("bug-reload/config", "./plugin.sh", "");
	c[1].kubeconfig = write_file("bug-reload/two", two_contexts, 0600);
	char out_env[PATH_MAX + 16];
	snprintf(out_env, sizeof(out_env), "PLUGIN_OUT=%s", path_in("bug-reload/out"));
	const char *env[] = { out_env, "EXPIRY=2099-01-02T03:04:05Z", NULL };
	struct kube_run r;
	run_load_n(c, 2, env, true, &r);
	assert_loaded(&r);
	assert_string_equal(r.describe,
			    "context ctx-b, server https://b.example.test, namespace default");
	assert_bytes(r.ans->token, "token-of-b");
	assert_int_equal(r.ans->ca.len, 0);
	kube_run_free(&r);
}

/* With $KUBECONFIG=A:B, a relative certificate-authority in B is resolved against A's
 * directory (kc_files keeps only the first file's directory); kubectl resolves it against B's. */
static void test_bug_merged_relative_path(void **st)
{
	(void)st;
	write_file("bug-merge/b/ca.pem", CA_PEM, 0600);
	char a[PATH_MAX], b[PATH_MAX];
	snprintf(a, sizeof(a), "%s",
		 write_file("bug-merge/a/config",
			    "users:\n- name: u\n  user: {token: a-token}\n"
			    "contexts:\n- name: x\n  context: {cluster: c, user: u}\n"
			    "current-context: x\n", 0600));
	snprintf(b, sizeof(b), "%s",
		 write_file("bug-merge/b/config",
			    "clusters:\n- name: c\n  cluster:\n    server: https://b.test\n"
			    "    certificate-authority: ca.pem\n", 0600));
	char kubeconfig[2 * PATH_MAX + 16];
	snprintf(kubeconfig, sizeof(kubeconfig), "KUBECONFIG=%s:%s", a, b);
	const char *env[] = { kubeconfig, NULL };
	struct serve_config c = kcfg();
	struct kube_run r;
	load_ok(&c, env, &r);
	assert_bytes(r.ans->ca, CA_PEM);
	kube_run_free(&r);
}

/* An anchor on a mapping or a list is accepted, while one on a scalar is refused (kubecfg.h:
 * "Anchors and aliases are refused"). */
static void test_bug_collection_anchor(void **st)
{
	(void)st;
	assert_yaml_refused("a: &x {b: c}\n", "YAML anchors are not supported");
	assert_yaml_refused("a: &x [b]\n", "YAML anchors are not supported");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_yaml_block),
		cmocka_unit_test(test_yaml_flow_json),
		cmocka_unit_test(test_yaml_null_scalars),
		cmocka_unit_test(test_yaml_nested_lists),
		cmocka_unit_test(test_yaml_anchors_aliases_refused),
		cmocka_unit_test(test_yaml_multiple_documents_refused),
		cmocka_unit_test(test_yaml_malformed_has_line),
		cmocka_unit_test(test_yaml_length_is_honoured),
		cmocka_unit_test(test_answer_before_load),
		cmocka_unit_test(test_no_access),
		cmocka_unit_test(test_current_context),
		cmocka_unit_test(test_explicit_context),
		cmocka_unit_test(test_missing_context),
		cmocka_unit_test(test_relative_paths),
		cmocka_unit_test(test_base64_data),
		cmocka_unit_test(test_server_must_be_https),
		cmocka_unit_test(test_refused_user_kinds),
		cmocka_unit_test(test_exec_plugin_token),
		cmocka_unit_test(test_exec_plugin_fails),
		cmocka_unit_test(test_exec_plugin_leaves_nothing),
		cmocka_unit_test(test_kubeconfig_env_list),
		cmocka_unit_test(test_in_cluster),
		/* found while these tests were written, fixed since */
		cmocka_unit_test(test_bug_base64_all_padding),
		cmocka_unit_test(test_bug_provide_cluster_info),
		cmocka_unit_test(test_bug_reload),
		cmocka_unit_test(test_bug_merged_relative_path),
		cmocka_unit_test(test_bug_collection_anchor),
	};
	int failed = cmocka_run_group_tests(tests, group_setup, group_teardown);
	return failed;
}
