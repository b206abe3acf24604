/*
 * kubecfg.c - the master's Kubernetes access (see kubecfg.h): kubeconfig files in YAML or
 * JSON (libyaml), the in-cluster service account, and exec credential plugins.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <openssl/crypto.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <yaml.h>

#include "ipc/fsutil.h"
#include "ipc/ipc.h"
#include "lib/base64.h"
#include "lib/http_client.h"
#include "lib/rfc3339.h"
#include "lib/runproc.h"
#include "lib/secret.h"
#include "master/kubecfg.h"
#include "master/master.h"
#include "policy/limits.h"

/* the pod's service account; KODE_GOPHER_SERVICEACCOUNT_DIR points elsewhere (tests) */
#define KC_SA_DIR "/var/run/secrets/kubernetes.io/serviceaccount"

/* What the master knows: fixed after kubecfg_load, except the credential cache (under mu). */
static struct {
	pthread_mutex_t mu;
	bool loaded;
	char context[256], server[2049], ns[254], dir[PATH_MAX], describe[2700];
	char *ca;                  /* PEM or NULL (the system's CAs) */
	size_t ca_len;
	bool insecure, in_cluster;
	char *cert, *key;          /* static client certificate */
	size_t cert_len, key_len;
	char *token;               /* static bearer token */
	char token_file[PATH_MAX]; /* re-read for every answer (projected tokens rotate) */
	json_t *exec;              /* the user's exec section, or NULL */
	/* the exec plugin's last output */
	char *x_token, *x_cert, *x_key;
	time_t x_expires, x_at;
} kc = { .mu = PTHREAD_MUTEX_INITIALIZER };

/* ---- YAML ---- */

static json_t *yj_node(yaml_parser_t *p, yaml_event_t *ev, int depth, char *err, size_t errlen);

/* yj_next - the next event, or NULL-ish failure with err set */
static int yj_next(yaml_parser_t *p, yaml_event_t *ev, char *err, size_t errlen)
{
	if (!yaml_parser_parse(p, ev)) {
		snprintf(err, errlen, "line %zu: %s", p->problem_mark.line + 1,
			 p->problem ? p->problem : "malformed YAML");
		return -1;
	}
	return 0;
}

static json_t *yj_scalar(const yaml_event_t *ev)
{
	const char *v = (const char *)ev->data.scalar.value;
	size_t n = ev->data.scalar.length;
	if (ev->data.scalar.plain_implicit &&
	    (n == 0 || (n == 1 && v[0] == '~') || (n == 4 && memcmp(v, "null", 4) == 0)))
		return json_null();
	return json_stringn(v, n);
}

/* yj_node - the value that starts with *ev (consumed) */
static json_t *yj_node(yaml_parser_t *p, yaml_event_t *ev, int depth, char *err, size_t errlen)
{
	if (depth > 64) {
		snprintf(err, errlen, "nested more than 64 levels deep");
		return NULL;
	}
	json_t *out = NULL;
	yaml_event_t e;
	switch (ev->type) {
	case YAML_SCALAR_EVENT:
		if (ev->data.scalar.anchor) {
			snprintf(err, errlen, "YAML anchors are not supported");
			return NULL;
		}
		return yj_scalar(ev);
	case YAML_ALIAS_EVENT:
		snprintf(err, errlen, "YAML aliases are not supported");
		return NULL;
	case YAML_SEQUENCE_START_EVENT:
		if (ev->data.sequence_start.anchor) {
			snprintf(err, errlen, "YAML anchors are not supported");
			return NULL;
		}
		out = json_array();
		for (;;) {
			if (yj_next(p, &e, err, errlen) != 0)
				goto fail;
			if (e.type == YAML_SEQUENCE_END_EVENT) {
				yaml_event_delete(&e);
				return out;
			}
			json_t *v = yj_node(p, &e, depth + 1, err, errlen);
			yaml_event_delete(&e);
			if (!v)
				goto fail;
			json_array_append_new(out, v);
		}
	case YAML_MAPPING_START_EVENT:
		if (ev->data.mapping_start.anchor) {
			snprintf(err, errlen, "YAML anchors are not supported");
			return NULL;
		}
		out = json_object();
		for (;;) {
			if (yj_next(p, &e, err, errlen) != 0)
				goto fail;
			if (e.type == YAML_MAPPING_END_EVENT) {
				yaml_event_delete(&e);
				return out;
			}
			if (e.type != YAML_SCALAR_EVENT) {
				snprintf(err, errlen, "line %zu: a mapping key must be a plain value",
					 e.start_mark.line + 1);
				yaml_event_delete(&e);
				goto fail;
			}
			char *key = strndup((const char *)e.data.scalar.value, e.data.scalar.length);
			yaml_event_delete(&e);
			if (!key || yj_next(p, &e, err, errlen) != 0) {
				free(key);
				goto fail;
			}
			json_t *v = yj_node(p, &e, depth + 1, err, errlen);
			yaml_event_delete(&e);
			if (!v) {
				free(key);
				goto fail;
			}
			json_object_set_new(out, key, v);
			free(key);
		}
	default:
		snprintf(err, errlen, "unexpected YAML structure");
		return NULL;
	}
fail:
	json_decref(out);
	return NULL;
}

json_t *yaml_to_json(const char *text, size_t len, char *err, size_t errlen)
{
	yaml_parser_t p;
	yaml_event_t ev;
	json_t *out = NULL;
	if (!yaml_parser_initialize(&p)) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	yaml_parser_set_input_string(&p, (const unsigned char *)text, len);
	/* stream start, document start, the node, document end */
	for (;;) {
		if (yj_next(&p, &ev, err, errlen) != 0)
			break;
		yaml_event_type_t t = ev.type;
		if (t == YAML_STREAM_START_EVENT || t == YAML_DOCUMENT_START_EVENT) {
			yaml_event_delete(&ev);
			continue;
		}
		if (t == YAML_STREAM_END_EVENT) {
			yaml_event_delete(&ev);
			if (!out)
				out = json_null(); /* an empty file */
			break;
		}
		if (t == YAML_DOCUMENT_END_EVENT) {
			yaml_event_delete(&ev);
			continue;
		}
		if (out) {
			yaml_event_delete(&ev);
			json_decref(out);
			out = NULL;
			snprintf(err, errlen, "more than one YAML document");
			break;
		}
		out = yj_node(&p, &ev, 0, err, errlen);
		yaml_event_delete(&ev);
		if (!out)
			break;
	}
	yaml_parser_delete(&p);
	return out;
}

/* ---- helpers ---- */

/* kc_read - a whole small file, NUL-terminated */
static char *kc_read(const char *path, size_t *len, char *err, size_t errlen)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		snprintf(err, errlen, "cannot read %s: %s", path, strerror(errno));
		return NULL;
	}
	char *buf = NULL;
	size_t n = 0;
	int r = fs_read_fd(fd, KC_MAX_FILE_BYTES, &buf, &n);
	close(fd);
	if (r != 0) {
		snprintf(err, errlen, "cannot read %s: %s", path, strerror(-r));
		return NULL;
	}
	if (len)
		*len = n;
	return buf;
}

/* kc_true - a kubeconfig boolean (the YAML reader gives strings) */
static bool kc_true(json_t *v)
{
	const char *s = json_string_value(v);
	return json_is_true(v) || (s && strcmp(s, "true") == 0);
}

/* kc_path - a kubeconfig's relative paths are relative to the file that names them */
static void kc_path(const char *p, char *out, size_t cap)
{
	int n = p[0] == '/' || !kc.dir[0] ? snprintf(out, cap, "%s", p)
					   : snprintf(out, cap, "%s/%s", kc.dir, p);
	if (n < 0 || (size_t)n >= cap)
		out[0] = '\0'; /* too long: fails to open, with its name in the message */
}

/* kc_pem - X-data (base64) or X (a file) */
static int kc_pem(json_t *obj, const char *data_key, const char *file_key, char **out,
		  size_t *len, char *err, size_t errlen)
{
	const char *d = json_string_value(json_object_get(obj, data_key));
	const char *f = json_string_value(json_object_get(obj, file_key));
	if (d && *d) {
		/* white space allowed; padding only at the end, at most two '=', and optional */
		if (!(*out = (char *)b64_decode_alloc(d, strlen(d), B64_LAX, len))) {
			if (errno == ENOMEM)
				abort();
			snprintf(err, errlen, "%s is not valid base64", data_key);
			return -1;
		}
		return 0;
	}
	if (f && *f) {
		char path[PATH_MAX];
		kc_path(f, path, sizeof(path));
		return (*out = kc_read(path, len, err, errlen)) ? 0 : -1;
	}
	return 0;
}

/* kc_named - the entry called name in list key of the first file that has one */
static json_t *kc_named(json_t *files, const char *key, const char *inner, const char *name)
{
	size_t i, j;
	json_t *f, *e;
	json_array_foreach(files, i, f) {
		json_array_foreach(json_object_get(f, key), j, e) {
			const char *n = json_string_value(json_object_get(e, "name"));
			if (n && strcmp(n, name) == 0)
				return json_object_get(e, inner);
		}
	}
	return NULL;
}

/* kc_names - "a, b, c": the entries of a list, for error messages */
static void kc_names(json_t *files, const char *key, char *out, size_t cap)
{
	size_t i, j, n = 0;
	json_t *f, *e;
	out[0] = '\0';
	json_array_foreach(files, i, f) {
		json_array_foreach(json_object_get(f, key), j, e) {
			const char *name = json_string_value(json_object_get(e, "name"));
			if (name && n < cap)
				n += (size_t)snprintf(out + n, cap - n, "%s%s", n ? ", " : "", name);
		}
	}
	if (!out[0])
		snprintf(out, cap, "none");
}

/* ---- exec credential plugins ---- */

/* kc_exec_info - KUBERNETES_EXEC_INFO for the plugin */
static char *kc_exec_info(const char *api)
{
	json_t *spec = json_pack("{s:b}", "interactive", 0);
	if (kc_true(json_object_get(kc.exec, "provideClusterInfo"))) {
		json_t *cl = json_pack("{s:s, s:b}", "server", kc.server, "insecure-skip-tls-verify",
				       kc.insecure);
		if (kc.ca) {
			char *b = b64_encode((unsigned char *)kc.ca, kc.ca_len, 0);
			if (!b)
				abort();
			json_object_set_new(cl, "certificate-authority-data", json_string(b));
			free(b);
		}
		json_object_set_new(spec, "cluster", cl);
	}
	json_t *info = json_pack("{s:s, s:s, s:o}", "apiVersion", api, "kind", "ExecCredential",
				 "spec", spec);
	char *s = json_dumps(info, JSON_COMPACT);
	json_decref(info);
	return s;
}

/* kc_exec_log - the plugin's stderr into our log, a line each (control bytes shown as '?'),
 * at most KC_EXEC_LOG_LINES of them */
static void kc_exec_log(const char *cmd, const char *text, size_t len)
{
	int lines = 0;
	for (size_t i = 0; i < len && lines < KC_EXEC_LOG_LINES;) {
		const char *nl = memchr(text + i, '\n', len - i);
		size_t n = nl ? (size_t)(nl - (text + i)) : len - i;
		char line[KC_EXEC_LOG_LINE_CHARS + 1];
		size_t k = n < KC_EXEC_LOG_LINE_CHARS ? n : KC_EXEC_LOG_LINE_CHARS;
		for (size_t j = 0; j < k; j++) {
			unsigned char ch = (unsigned char)text[i + j];
			line[j] = ch < 0x20 || ch == 0x7f ? '?' : (char)ch;
		}
		line[k] = '\0';
		if (k)
			log_warn("credential plugin %s: %s%s", cmd, line, k < n ? " [...]" : "");
		lines += k > 0;
		i += n + 1;
	}
}

/* kc_exec_run - run the plugin, return its stdout (NUL-terminated) or NULL with err */
static char *kc_exec_run(char *err, size_t errlen)
{
	const char *cmd = json_string_value(json_object_get(kc.exec, "command"));
	const char *api = json_string_value(json_object_get(kc.exec, "apiVersion"));
	const char *hint = json_string_value(json_object_get(kc.exec, "installHint"));
	const char *mode = json_string_value(json_object_get(kc.exec, "interactiveMode"));
	if (!cmd || !*cmd) {
		snprintf(err, errlen, "the kubeconfig's exec section names no command");
		return NULL;
	}
	if (mode && strcmp(mode, "Always") == 0) {
		snprintf(err, errlen, "the credential plugin %s wants a terminal (interactiveMode "
			 "Always), which a server does not have", cmd);
		return NULL;
	}
	char path[PATH_MAX];
	if (strchr(cmd, '/'))
		kc_path(cmd, path, sizeof(path));
	else
		snprintf(path, sizeof(path), "%s", cmd);
	json_t *args = json_object_get(kc.exec, "args"), *env = json_object_get(kc.exec, "env");
	size_t nargs = json_array_size(args), nenv = json_array_size(env);
	char **argv = calloc(nargs + 2, sizeof(char *));
	char **envp = calloc(nenv + 2, sizeof(char *));
	if (!argv || !envp)
		abort();
	argv[0] = path;
	for (size_t i = 0; i < nargs; i++)
		argv[i + 1] = (char *)(json_string_value(json_array_get(args, i)) ?: "");
	char *info = kc_exec_info(api ? api : "client.authentication.k8s.io/v1");
	size_t ne = 0;
	if (asprintf(&envp[ne++], "KUBERNETES_EXEC_INFO=%s", info) < 0)
		abort();
	for (size_t i = 0; i < nenv; i++) {
		json_t *e = json_array_get(env, i);
		const char *n = json_string_value(json_object_get(e, "name"));
		const char *v = json_string_value(json_object_get(e, "value"));
		if (n && v && asprintf(&envp[ne++], "%s=%s", n, v) < 0)
			abort();
	}
	free(info);

	/* the plugin sees our environment plus its own settings and KUBERNETES_EXEC_INFO */
	extern char **environ;
	size_t nown = 0;
	while (environ[nown])
		nown++;
	char **full = calloc(nown + ne + 1, sizeof(char *));
	if (!full)
		abort();
	size_t nf = 0;
	for (size_t i = 0; i < ne; i++)
		full[nf++] = envp[i];
	for (size_t i = 0; i < nown; i++) {
		const char *eq = strchr(environ[i], '=');
		bool shadowed = false;
		for (size_t j = 0; eq && j < ne; j++)
			if (strncmp(envp[j], environ[i], (size_t)(eq - environ[i]) + 1) == 0)
				shadowed = true;
		if (!shadowed)
			full[nf++] = environ[i];
	}

	/* contained (nothing it starts outlives it), stdin /dev/null, stdout captured up to the
	 * cap and stderr into our log; over a cap or past the deadline it is killed */
	struct runproc_opts ro = { .argv = (const char *const *)argv,
				   .envp = (const char *const *)full,
				   .timeout_ms = KC_EXEC_TIMEOUT_S * 1000,
				   .term_signal = SIGTERM,
				   .grace_ms = KC_EXEC_GRACE_MS,
				   .out_cap = KC_EXEC_MAX_OUT_BYTES,
				   .err_cap = KC_EXEC_MAX_ERR_BYTES,
				   .kill_at_cap = true,
				   .contain = true };
	struct runproc_result rr;
	char *buf = NULL;
	int rc = runproc_run(&ro, &rr);
	if (rc < 0) {
		snprintf(err, errlen, "the credential plugin %s cannot be run: %s%s%s", cmd,
			 strerror(-rc), hint ? ". " : "", hint ? hint : "");
		goto done;
	}
	kc_exec_log(cmd, rr.err.data, rr.err.len);
	bool failed = rr.timed_out || rr.over_cap || rr.signal || rr.exit_code != 0;
	if (failed) {
		char how[96];
		if (rr.timed_out)
			snprintf(how, sizeof(how), "did not finish within %d s", KC_EXEC_TIMEOUT_S);
		else if (rr.over_cap)
			snprintf(how, sizeof(how), "wrote more than %u bytes (stdout) or %u (stderr)",
				 KC_EXEC_MAX_OUT_BYTES, KC_EXEC_MAX_ERR_BYTES);
		else if (rr.signal)
			snprintf(how, sizeof(how), "was killed by signal %d (%s)", rr.signal,
				 runproc_signame(rr.signal));
		else
			snprintf(how, sizeof(how), "exited with status %d", rr.exit_code);
		snprintf(err, errlen, "the credential plugin %s %s%s%s", cmd, how,
			 hint ? ". " : " (its messages are in the server's log)", hint ? hint : "");
		OPENSSL_cleanse(rr.out.data, rr.out.len);
	} else {
		buf = rr.out.data; /* NUL-terminated; the caller cleanses and frees it */
		rr.out.data = NULL;
	}
	runproc_result_free(&rr);
done:
	for (size_t i = 0; i < ne; i++)
		free(envp[i]);
	free(envp);
	free(full);
	free(argv);
	return buf;
}

/* kc_exec_refresh - run the plugin and keep what it printed; under kc.mu */
static int kc_exec_refresh(char *err, size_t errlen)
{
	char *out = kc_exec_run(err, errlen);
	if (!out)
		return -1;
	json_error_t je;
	json_t *j = json_loads(out, 0, &je);
	OPENSSL_cleanse(out, strlen(out));
	free(out);
	json_t *st = json_object_get(j, "status");
	const char *kind = json_string_value(json_object_get(j, "kind"));
	const char *tok = json_string_value(json_object_get(st, "token"));
	const char *cert = json_string_value(json_object_get(st, "clientCertificateData"));
	const char *key = json_string_value(json_object_get(st, "clientKeyData"));
	int r = 0;
	if (!j || !kind || strcmp(kind, "ExecCredential") != 0 || !json_is_object(st)) {
		snprintf(err, errlen, "the credential plugin did not print an ExecCredential%s%s",
			 j ? "" : ": ", j ? "" : je.text);
		r = -1;
	} else if (!tok && !(cert && key)) {
		snprintf(err, errlen, "the credential plugin's ExecCredential has neither a token "
			 "nor a client certificate and key");
		r = -1;
	} else {
		if (kc.x_token)
			OPENSSL_cleanse(kc.x_token, strlen(kc.x_token));
		if (kc.x_key)
			OPENSSL_cleanse(kc.x_key, strlen(kc.x_key));
		free(kc.x_token), free(kc.x_cert), free(kc.x_key);
		kc.x_token = tok ? strdup(tok) : NULL;
		kc.x_cert = cert && key ? strdup(cert) : NULL;
		kc.x_key = cert && key ? strdup(key) : NULL;
		if (rfc3339_parse(json_string_value(json_object_get(st, "expirationTimestamp")),
				  &kc.x_expires) < 0)
			kc.x_expires = 0;
		kc.x_at = time(NULL);
	}
	json_decref(j);
	return r;
}

/* ---- loading ---- */

static void kc_set(char **dst, size_t *dlen, char *v, size_t len)
{
	free(*dst);
	*dst = v;
	if (dlen)
		*dlen = len;
}

/* kc_in_cluster - the pod's service account */
static int kc_in_cluster(const struct serve_config *cfg, char *err, size_t errlen)
{
	const char *host = getenv("KUBERNETES_SERVICE_HOST"), *port = getenv("KUBERNETES_SERVICE_PORT");
	const char *dir = getenv("KODE_GOPHER_SERVICEACCOUNT_DIR");
	if (!dir || !*dir)
		dir = KC_SA_DIR;
	char path[PATH_MAX];
	snprintf(kc.server, sizeof(kc.server), strchr(host, ':') ? "https://[%s]:%s" : "https://%s:%s",
		 host, port && *port ? port : "443");
	snprintf(path, sizeof(path), "%s/ca.crt", dir);
	size_t n;
	char *ca = kc_read(path, &n, err, errlen);
	if (!ca)
		return -1;
	kc_set(&kc.ca, &kc.ca_len, ca, n);
	snprintf(kc.token_file, sizeof(kc.token_file), "%s/token", dir);
	char *tok = kc_read(kc.token_file, NULL, err, errlen);
	if (!tok)
		return -1;
	OPENSSL_cleanse(tok, strlen(tok));
	free(tok);
	snprintf(path, sizeof(path), "%s/namespace", dir);
	char ierr[64];
	char *ns = kc_read(path, NULL, ierr, sizeof(ierr));
	snprintf(kc.ns, sizeof(kc.ns), "%s",
		 cfg->kube_namespace ? cfg->kube_namespace : ns ? strtok(ns, " \t\r\n") ?: "default" : "default");
	free(ns);
	snprintf(kc.context, sizeof(kc.context), "in-cluster");
	kc.in_cluster = true;
	return 0;
}

/* kc_absolutize - a file's relative paths are relative to that file (kubectl's rule): make
 * them absolute before the files are merged */
static void kc_absolutize(json_t *doc, const char *file)
{
	char dir[PATH_MAX];
	if ((size_t)snprintf(dir, sizeof(dir), "%s", file) >= sizeof(dir))
		return; /* unreadable anyway */
	char *slash = strrchr(dir, '/');
	if (slash)
		*slash = '\0';
	else if (!getcwd(dir, sizeof(dir)))
		snprintf(dir, sizeof(dir), ".");
	static const struct {
		const char *list, *inner, *key;
	} fields[] = {
		{ "clusters", "cluster", "certificate-authority" },
		{ "users", "user", "client-certificate" },
		{ "users", "user", "client-key" },
		{ "users", "user", "tokenFile" },
	};
	for (size_t f = 0; f < sizeof(fields) / sizeof(fields[0]); f++) {
		size_t i;
		json_t *e;
		json_array_foreach(json_object_get(doc, fields[f].list), i, e) {
			json_t *obj = json_object_get(e, fields[f].inner);
			json_t *exec = f == 1 ? json_object_get(obj, "exec") : NULL;
			const char *cmd = json_string_value(json_object_get(exec, "command"));
			/* an exec command with a slash is a path too; a bare name is looked up in PATH */
			if (cmd && cmd[0] != '/' && strchr(cmd, '/')) {
				char abs[PATH_MAX * 2];
				snprintf(abs, sizeof(abs), "%s/%s", dir, cmd);
				json_object_set_new(exec, "command", json_string(abs));
			}
			const char *v = json_string_value(json_object_get(obj, fields[f].key));
			if (v && *v && v[0] != '/') {
				char abs[PATH_MAX * 2];
				snprintf(abs, sizeof(abs), "%s/%s", dir, v);
				json_object_set_new(obj, fields[f].key, json_string(abs));
			}
		}
	}
}

/* kc_reset - forget a previous load */
static void kc_reset(void)
{
	if (kc.token)
		OPENSSL_cleanse(kc.token, strlen(kc.token));
	if (kc.key)
		OPENSSL_cleanse(kc.key, kc.key_len);
	if (kc.x_token)
		OPENSSL_cleanse(kc.x_token, strlen(kc.x_token));
	if (kc.x_key)
		OPENSSL_cleanse(kc.x_key, strlen(kc.x_key));
	free(kc.ca), free(kc.cert), free(kc.key), free(kc.token);
	free(kc.x_token), free(kc.x_cert), free(kc.x_key);
	json_decref(kc.exec);
	kc.ca = kc.cert = kc.key = kc.token = kc.x_token = kc.x_cert = kc.x_key = NULL;
	kc.exec = NULL;
	kc.ca_len = kc.cert_len = kc.key_len = 0;
	kc.x_expires = kc.x_at = 0;
	kc.loaded = kc.insecure = kc.in_cluster = false;
	kc.context[0] = kc.server[0] = kc.ns[0] = kc.dir[0] = kc.describe[0] = '\0';
	kc.token_file[0] = '\0';
}

/* kc_files - the kubeconfig files to merge, in order; 0 none found */
static int kc_files(const struct serve_config *cfg, json_t *files, char *err, size_t errlen)
{
	char list[8192];
	const char *env = getenv("KUBECONFIG"), *home = getenv("HOME");
	bool explicit_one = cfg->kubeconfig != NULL;
	if (cfg->kubeconfig)
		snprintf(list, sizeof(list), "%s", cfg->kubeconfig);
	else if (env && *env)
		snprintf(list, sizeof(list), "%s", env);
	else
		snprintf(list, sizeof(list), "%s/.kube/config", home ? home : "/");
	char *save = NULL;
	/* --kubeconfig is one path; $KUBECONFIG a list */
	for (char *p = explicit_one ? list : strtok_r(list, ":", &save); p;
	     p = explicit_one ? NULL : strtok_r(NULL, ":", &save)) {
		char ferr[512];
		size_t n;
		if (!explicit_one && access(p, F_OK) != 0)
			continue; /* kubectl skips missing files of $KUBECONFIG */
		char *text = kc_read(p, &n, ferr, sizeof(ferr));
		if (!text) {
			snprintf(err, errlen, "kubeconfig: %s", ferr);
			return -1;
		}
		json_t *doc = yaml_to_json(text, n, ferr, sizeof(ferr));
		OPENSSL_cleanse(text, n);
		free(text);
		if (!doc || !json_is_object(doc)) {
			snprintf(err, errlen, "kubeconfig %s: %s", p, doc ? "not a mapping" : ferr);
			json_decref(doc);
			return -1;
		}
		kc_absolutize(doc, p);
		json_array_append_new(files, doc);
	}
	return (int)json_array_size(files);
}

int kubecfg_load(const struct serve_config *cfg, char *err, size_t errlen)
{
	pthread_mutex_lock(&kc.mu);
	kc_reset();
	json_t *files = json_array();
	int r = kc_files(cfg, files, err, errlen);
	const char *host = getenv("KUBERNETES_SERVICE_HOST");
	if (r == 0 && host && *host && !cfg->kube_context) {
		r = kc_in_cluster(cfg, err, errlen);
		goto out;
	}
	if (r == 0 && host && *host) {
		snprintf(err, errlen, "--context %s names a kubeconfig context, but there is no "
			 "kubeconfig (--kubeconfig, $KUBECONFIG or ~/.kube/config); in a cluster, leave "
			 "--context out to use the pod's service account", cfg->kube_context);
		r = -1;
	}
	if (r == 0) {
		snprintf(err, errlen, "no Kubernetes access: no kubeconfig (--kubeconfig, $KUBECONFIG "
			 "or ~/.kube/config) and not running in a cluster");
		r = -1;
	}
	if (r < 0)
		goto out;
	r = -1;
	const char *ctx_name = cfg->kube_context;
	for (size_t i = 0; !ctx_name && i < json_array_size(files); i++) {
		const char *cc = json_string_value(json_object_get(json_array_get(files, i),
								  "current-context"));
		if (cc && *cc)
			ctx_name = cc;
	}
	char names[1024];
	kc_names(files, "contexts", names, sizeof(names));
	if (!ctx_name) {
		snprintf(err, errlen, "kubeconfig sets no current-context; pass --context (contexts: "
			 "%s)", names);
		goto out;
	}
	snprintf(kc.context, sizeof(kc.context), "%s", ctx_name);
	json_t *ctx = kc_named(files, "contexts", "context", ctx_name);
	if (!json_is_object(ctx)) {
		snprintf(err, errlen, "kubeconfig has no context named \"%s\" (contexts: %s)", ctx_name,
			 names);
		goto out;
	}
	const char *cl_name = json_string_value(json_object_get(ctx, "cluster"));
	const char *us_name = json_string_value(json_object_get(ctx, "user"));
	const char *ns = json_string_value(json_object_get(ctx, "namespace"));
	json_t *cl = cl_name ? kc_named(files, "clusters", "cluster", cl_name) : NULL;
	json_t *us = us_name ? kc_named(files, "users", "user", us_name) : NULL;
	if (!json_is_object(cl)) {
		snprintf(err, errlen, "kubeconfig context \"%s\" names cluster \"%s\", which is not "
			 "in the kubeconfig", ctx_name, cl_name ? cl_name : "");
		goto out;
	}
	const char *server = json_string_value(json_object_get(cl, "server"));
	if (!server || strncmp(server, "https://", 8) != 0) {
		snprintf(err, errlen, "kubeconfig cluster \"%s\" has %s server; kode-gopher talks to "
			 "the API server over https:// only", cl_name, server ? "a non-https" : "no");
		goto out;
	}
	snprintf(kc.server, sizeof(kc.server), "%s", server);
	size_t sl = strlen(kc.server);
	while (sl && kc.server[sl - 1] == '/')
		kc.server[--sl] = '\0';
	kc.insecure = kc_true(json_object_get(cl, "insecure-skip-tls-verify"));
	char perr[512];
	if (kc_pem(cl, "certificate-authority-data", "certificate-authority", &kc.ca, &kc.ca_len,
		   perr, sizeof(perr)) != 0) {
		snprintf(err, errlen, "kubeconfig cluster \"%s\": %s", cl_name, perr);
		goto out;
	}
	if (json_object_get(cl, "tls-server-name"))
		log_warn("kubeconfig cluster \"%s\": tls-server-name is not supported; the server's "
			 "certificate is checked against %s", cl_name, kc.server);
	if (json_is_object(us)) {
		if (json_object_get(us, "auth-provider")) {
			snprintf(err, errlen, "kubeconfig user \"%s\" uses an auth-provider, which kubectl "
				 "itself dropped; use an exec credential plugin (for GKE: "
				 "gke-gcloud-auth-plugin)", us_name);
			goto out;
		}
		if (json_object_get(us, "username") || json_object_get(us, "password")) {
			snprintf(err, errlen, "kubeconfig user \"%s\" uses a username and password, which "
				 "kode-gopher does not send; use a token, a client certificate or an exec "
				 "plugin", us_name);
			goto out;
		}
		if (kc_pem(us, "client-certificate-data", "client-certificate", &kc.cert, &kc.cert_len,
			   perr, sizeof(perr)) != 0 ||
		    kc_pem(us, "client-key-data", "client-key", &kc.key, &kc.key_len, perr,
			   sizeof(perr)) != 0) {
			snprintf(err, errlen, "kubeconfig user \"%s\": %s", us_name, perr);
			goto out;
		}
		if (!kc.cert != !kc.key) {
			snprintf(err, errlen, "kubeconfig user \"%s\" has a client certificate without "
				 "its key, or a key without its certificate", us_name);
			goto out;
		}
		const char *tok = json_string_value(json_object_get(us, "token"));
		const char *tf = json_string_value(json_object_get(us, "tokenFile"));
		if (tok && *tok)
			kc.token = strdup(tok);
		else if (tf && *tf)
			kc_path(tf, kc.token_file, sizeof(kc.token_file));
		json_t *ex = json_object_get(us, "exec");
		if (json_is_object(ex))
			kc.exec = json_incref(ex);
	}
	snprintf(kc.ns, sizeof(kc.ns), "%s",
		 cfg->kube_namespace ? cfg->kube_namespace : ns && *ns ? ns : "default");
	r = 0;
	if (kc.exec && kc_exec_refresh(perr, sizeof(perr)) != 0) {
		snprintf(err, errlen, "kubeconfig user \"%s\": %s", us_name, perr);
		r = -1;
	}
out:
	json_decref(files);
	if (r == 0) {
		kc.loaded = true;
		snprintf(kc.describe, sizeof(kc.describe), "context %s, server %s, namespace %s%s",
			 kc.context, kc.server, kc.ns,
			 kc.exec ? ", credentials from an exec plugin" : "");
	}
	pthread_mutex_unlock(&kc.mu);
	return r < 0 ? -1 : 0;
}

const char *kubecfg_describe(void)
{
	return kc.describe;
}

/* kc_dup - a copy of n bytes, NUL-terminated; NULL for none */
static char *kc_dup(const char *p, size_t n)
{
	if (!p)
		return NULL;
	char *c = malloc(n + 1);
	if (!c)
		abort();
	memcpy(c, p, n);
	c[n] = '\0';
	return c;
}

/* kubecfg_current - see kubecfg.h */
int kubecfg_current(struct kubecfg_cred *c, bool refresh, char *err, size_t errlen)
{
	memset(c, 0, sizeof(*c));
	char *ftoken = NULL;
	int r = 0;
	err[0] = '\0';
	pthread_mutex_lock(&kc.mu);
	if (!kc.loaded) {
		snprintf(err, errlen, "this server was not started with --backend kubernetes");
		r = -1;
	} else if (kc.exec && (!kc.x_at || (refresh && time(NULL) - kc.x_at > 10) ||
			       (kc.x_expires && time(NULL) + 90 >= kc.x_expires))) {
		if (kc_exec_refresh(err, errlen) != 0) {
			log_warn("kubernetes: %s", err);
			r = -1;
		}
	}
	if (r == 0 && kc.token_file[0]) {
		/* a projected service-account token rotates: read it for every request */
		ftoken = kc_read(kc.token_file, NULL, err, errlen);
		if (ftoken)
			ftoken[strcspn(ftoken, "\r\n")] = '\0';
		else
			r = -1;
	}
	if (r == 0) {
		const char *tok = kc.x_token ? kc.x_token : ftoken ? ftoken : kc.token;
		const char *cert = kc.x_cert ? kc.x_cert : kc.cert, *key = kc.x_cert ? kc.x_key : kc.key;
		size_t cl = kc.x_cert ? strlen(kc.x_cert) : kc.cert_len;
		size_t kl = kc.x_cert ? strlen(kc.x_key) : kc.key_len;
		c->server = kc_dup(kc.server, strlen(kc.server));
		c->ns = kc_dup(kc.ns, strlen(kc.ns));
		c->ca = kc_dup(kc.ca, kc.ca_len);
		c->ca_len = kc.ca ? kc.ca_len : 0;
		c->cert = kc_dup(cert, cl);
		c->cert_len = cert ? cl : 0;
		c->key = kc_dup(key, kl);
		c->key_len = key ? kl : 0;
		c->token = tok ? kc_dup(tok, strlen(tok)) : NULL;
		c->insecure = kc.insecure;
		c->in_cluster = kc.in_cluster;
		c->expires = kc.exec && kc.x_expires > 0 ? kc.x_expires : 0;
	}
	pthread_mutex_unlock(&kc.mu);
	secret_free(ftoken);
	return r;
}

/* kubecfg_cred_free - see kubecfg.h */
void kubecfg_cred_free(struct kubecfg_cred *c)
{
	if (c->key)
		OPENSSL_cleanse(c->key, c->key_len);
	secret_free(c->token);
	free(c->server), free(c->ns), free(c->ca), free(c->cert), free(c->key);
	memset(c, 0, sizeof(*c));
}

/* kubecfg_request - see kubecfg.h */
int kubecfg_request(struct http_request *q, struct kubecfg_cred *c, bool refresh, char *url,
		    size_t urlcap, const char *path, char *err, size_t errlen)
{
	if (kubecfg_current(c, refresh, err, errlen) != 0)
		return -EACCES;
	if ((size_t)snprintf(url, urlcap, "%s%s", c->server, path) >= urlcap) {
		snprintf(err, errlen, "the request path is too long");
		kubecfg_cred_free(c);
		return -EINVAL;
	}
	q->url = url;
	q->ca_blob = c->ca, q->ca_len = c->ca_len;
	q->cert_blob = c->cert, q->cert_len = c->cert_len;
	q->key_blob = c->key, q->key_len = c->key_len;
	q->bearer = c->token;
	q->insecure = c->insecure;
	return 0;
}

const char *kubecfg_server(void)
{
	return kc.server;
}

const char *kubecfg_namespace(void)
{
	return kc.ns;
}

bool kubecfg_in_cluster(void)
{
	return kc.in_cluster;
}
