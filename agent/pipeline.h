/*
 * pipeline.h - steps 1 to 4 of execute_go_code, and lookup_package_docs, inside the sandbox.
 *
 * Called by the agent's HTTP server (agent/server.c) for POST /execute and POST /doc. Runs the
 * real Go toolchain against the base caches in runtime_dir (see runtime/prepare.sh for the layout).
 *
 * Directory layout the pipeline owns:
 *   app_dir            /app: wiped before every execute except app_dir/persist
 *   state_dir          survives wipes, private to the agent: the session's go.mod/go.sum after
 *                      a tidy (so later calls need no new tidy), the content-addressed binary cache
 *   runtime_dir/lock   go.mod + go.sum of the precompiled modules (module "app")
 *   runtime_dir/gomodcache, runtime_dir/gocache   base GOMODCACHE and GOCACHE
 * Until the jail lands (issue "Local sandbox backend") GOMODCACHE/GOCACHE may point at the base
 * caches directly, or at gomodcache_dir/gocache_dir when those are set.
 */
#ifndef KG_PIPELINE_H
#define KG_PIPELINE_H

#include <jansson.h>
#include <stddef.h>

struct sock_fprog;
struct metadata_server;

struct pipeline_config {
	const char *app_dir;
	const char *state_dir;
	const char *runtime_dir;
	const char *gomodcache_dir;  /* NULL: runtime_dir/gomodcache */
	const char *gocache_dir;     /* NULL: runtime_dir/gocache */
	const char *go_bin;          /* NULL: "go" from PATH */
	int default_timeout_ms;      /* 60000 */
	int max_timeout_ms;          /* 300000 */
	size_t output_cap;           /* per stream, bytes; default 1 MiB */
	size_t doc_cap;              /* go doc output cap; default 64 KiB */
	/* a seccomp program installed on the user's binary just before exec (the agent's own
	 * protection: policy/seccomp.c, seccomp_user_prepare); NULL: none */
	const struct sock_fprog *user_filter;
	/* the sandbox's limits, to explain a program they stopped; 0: unknown */
	long long memory_limit;
	long long disk_limit;        /* bytes of /app's own file system (local jail, k8s) */
	int pids_limit;
	/* descriptor + 1 of the sandbox's memory cgroup's event counters (memory.events on v2,
	 * memory.oom_control on v1), whose oom_kill count tells an OOM kill from another SIGKILL;
	 * 0: none (no memory cgroup) */
	int oom_events;
	/* credentials (docs/credentials.md): the metadata-server emulator that serves a call's
	 * "metadata" credentials during its run (NULL: such calls fail), and how it asks the
	 * worker for more tokens: push one event object (stolen) onto the running call's stream,
	 * given the progress callback's ctx */
	struct metadata_server *metadata;
	void (*event)(void *ctx, json_t *event);
};

/* Called from the pipeline's thread as work progresses; phase is "normalize", "build", "tidy",
 * "run"; message is one short human line. May be NULL. */
typedef void (*pipeline_progress_fn)(void *ctx, const char *phase, const char *message);

/*
 * pipeline_execute - run one execute request.
 *   req: {"files":[{"path","content"}], "timeout_ms"?: int, "env"?: {"NAME":"value"},
 *         "credentials"?: {"mode":"adc","adc":"<ADC file text>"} | {"mode":"metadata",...}}
 *        (the worker has already turned a bare `code` string into files[{"main.go",code}])
 *   credentials, for the run only: "adc" is written to a 0600 file under state_dir/credentials
 *   (GOOGLE_APPLICATION_CREDENTIALS) and deleted when the run ends; "metadata" starts the
 *   emulator (agent/metadata.h) and points GCE_METADATA_HOST, _IP and _ROOT at it.
 * Returns a new reference to the result object (docs/snippets-and-results.md):
 *   {"phase","mode","exit_code","signal","build_ms","duration_ms","tidied","cached_build",
 *    "result":{"kind", "value"|"message"|"type"|"stack"...}, "diagnostics"?, "build_output"?,
 *    "tidy_output"?, "stdout","stderr","stdout_truncated","stderr_truncated",
 *    "timings":{"normalize_ms","write_ms","tidy_ms","build_ms","run_ms","total_ms",
 *               "cpu_user_ms","cpu_sys_ms","max_rss_kb"}}
 * Snippets read state_dir/run/result.json and crash.txt; binaries are cached in state_dir/bin
 * (agent/gobuild.h); the session's go.mod/go.sum after a resolve live in state_dir.
 * Never NULL: internal failures become {"phase":"internal","result":{"kind":"internal_error",...}}.
 */
json_t *pipeline_execute(const struct pipeline_config *cfg, json_t *req,
			 pipeline_progress_fn progress, void *ctx);

/*
 * pipeline_warm - ask the toolchain where its tools are (`go env GOVERSION GOROOT GOTOOLDIR`,
 * once per process) ahead of the first call: the agent runs it on a thread of its own as it
 * starts listening, so a new sandbox's first call (every `kode-gopher exec`) does not wait for
 * that go command; a call that comes first waits for it, never runs it twice.
 */
void pipeline_warm(const struct pipeline_config *cfg);

/*
 * pipeline_doc - `go doc` in the session's module (stdlib, lockfile modules, anything tidied in).
 *   req: {"package": "cloud.google.com/go/storage", "symbol"?: "Client"}
 * Returns {"ok":true,"text":...,"truncated":bool} or {"ok":false,"error": sentence}.
 */
json_t *pipeline_doc(const struct pipeline_config *cfg, json_t *req);

/*
 * pipeline_files - POST /files: the session's files in /app/persist and /app/out, listed or
 * read (agent/artifacts.h, artifacts_files: a read's bytes come back in *bytes). Read-only;
 * needs no call slot.
 */
json_t *pipeline_files(const struct pipeline_config *cfg, json_t *req, unsigned char **bytes,
		       size_t *nbytes);

#endif
