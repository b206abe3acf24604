#!/usr/bin/env node
/*
 * k8sbench.mjs - the Kubernetes backend's figures (`serve --backend kubernetes`), printed as one
 * markdown table, measured against the real test cluster of tests/k8s (cluster.sh).
 *
 * Called by bench/run.sh --only k8s (so by `make bench-k8s`), or by hand:
 *   node bench/k8sbench.mjs [--quick] [--only latency|throughput] [--bin PATH] ...
 * (--help lists the options).  Progress goes to stderr, the table alone to stdout.  Steps:
 *   0. `tests/k8s/cluster.sh up` in a temporary directory (kube-apiserver, etcd, kwok, the
 *      agent-sandbox controller, and the agents fixture: a real jailed `kode-gopher agent` on
 *      every sandbox pod's loopback IP), then the namespace, the RuntimeClass gvisor and the
 *      packaged SandboxTemplate + SandboxWarmPool go-runtime-pool, the pool scaled so that every
 *      session of part 2 finds a warm sandbox; before each measurement, every warm sandbox is
 *      Ready and its agent answers GET /health unclaimed;
 *   1. claim-to-first-result latency: N fresh stdio sessions one after another, each timing its
 *      first tools/call (the claim, then the build in the new sandbox), with the result's own
 *      timings.claim_ms and build_ms;
 *   2. calls per second across 16 sessions of one `serve --http`: the 16 claims at once (a first
 *      call that stops before the build), then 16 first builds at once, neither counted; then
 *      all run closed loops of calls for a fixed time, once with a new source each call (a build
 *      each time) and once resubmitting an unchanged source (the sandbox's binary cache), with
 *      the CPU that kode-gopher, the sandboxes and the test cluster used meanwhile.
 * Like httpbench.mjs, the client speaks raw JSON-RPC (newline-delimited over the serve
 * process's pipes, or Streamable HTTP over undici), not the SDK client, so its own cost stays
 * small.  Every process started here is ended here, and the cluster is taken down, on success,
 * failure and SIGINT/SIGTERM alike.  The exit status is non-zero only when a figure could not be
 * measured.  See bench/README.md.
 */
import { spawn, execFile, execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import readline from 'node:readline';
import { fileURLToPath } from 'node:url';
import { performance } from 'node:perf_hooks';
import { Pool } from 'undici';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const ROOT = path.resolve(HERE, '..');
const CLUSTER_SH = path.join(ROOT, 'tests/k8s/cluster.sh');
const PACKAGING = path.join(ROOT, 'packaging/k8s');
const PROTOCOL = '2025-11-25';
const CALL_TIMEOUT_MS = 300000; /* 16 builds at once on 2 cores take seconds each; a claim may wait */
const POOL = 'go-runtime-pool';
const AGENT_PORT = 8888;

/* ------------------------------------------------------------------ options */

const USAGE = `usage: node bench/k8sbench.mjs [options]
  --quick               3 fresh sessions, 8 s per throughput flavour after 1 s unmeasured
  --only PART           latency or throughput (default: both)
  --bin PATH            kode-gopher binary (default $KODE_GOPHER_BIN, else build/kode-gopher)
  --runtime-dir DIR     the Go caches the agents use (default $RUNTIME_DIR, else
                        /var/cache/kode-gopher/runtime)
  --sessions N          fresh stdio sessions of part 1, one after another (default 10)
  --concurrency N       sessions of part 2 (default 16)
  --duration S          measured seconds per flavour of part 2 (default 20)
  --warmup S            unmeasured seconds before each flavour (default 2)
  --namespace NS        where the pool and the claims are (default kg-bench)
  --cluster DIR         use the test cluster already running in DIR (cluster.sh up DIR) and
                        leave it running; default: a new one in a temporary directory
`;

/* parse_args - options into a settings object; exits on --help or a bad option */
function parse_args(argv) {
	const o = {
		quick: false, only: null, sessions: 10, concurrency: 16, duration: 20, warmup: 2,
		namespace: 'kg-bench', cluster: null,
		bin: process.env.KODE_GOPHER_BIN || path.join(ROOT, process.env.BUILD || 'build', 'kode-gopher'),
		runtime: process.env.RUNTIME_DIR || process.env.KODE_GOPHER_RUNTIME_DIR || '/var/cache/kode-gopher/runtime',
	};
	const set = {};
	for (let i = 0; i < argv.length; i++) {
		const a = argv[i];
		const val = () => {
			if (i + 1 >= argv.length)
				die(`${a} needs a value\n${USAGE}`);
			return argv[++i];
		};
		if (a === '--quick') o.quick = true;
		else if (a === '--help' || a === '-h') { process.stdout.write(USAGE); process.exit(0); }
		else if (a === '--only') o.only = val();
		else if (a === '--bin') o.bin = val();
		else if (a === '--runtime-dir') o.runtime = val();
		else if (a === '--sessions') set.sessions = Number(val());
		else if (a === '--concurrency') set.concurrency = Number(val());
		else if (a === '--duration') set.duration = Number(val());
		else if (a === '--warmup') set.warmup = Number(val());
		else if (a === '--namespace') o.namespace = val();
		else if (a === '--cluster') o.cluster = path.resolve(val());
		else die(`unknown option ${a}\n${USAGE}`);
	}
	if (o.quick)
		Object.assign(o, { sessions: 3, duration: 8, warmup: 1 });
	Object.assign(o, set);
	if (o.only && !['latency', 'throughput'].includes(o.only))
		die(`--only takes latency or throughput, not ${o.only}`);
	for (const k of ['sessions', 'concurrency'])
		if (!Number.isInteger(o[k]) || o[k] < 1)
			die(`--${k} needs a positive whole number`);
	if (!(o.duration > 0)) die('--duration needs a positive number of seconds');
	if (!(o.warmup >= 0)) die('--warmup needs a number of seconds, 0 or more');
	if (!/^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/.test(o.namespace)) die(`--namespace ${o.namespace} is not a DNS label`);
	/* one warm sandbox for each session of part 2, and one to spare */
	o.replicas = Math.max(17, o.concurrency + 1);
	return o;
}

/* die - a sentence on stderr, exit 1 (before anything was started) */
function die(msg) {
	process.stderr.write(`k8sbench: ${msg}\n`);
	process.exit(1);
}

/* progress - a line on stderr */
function progress(msg) {
	process.stderr.write(`k8sbench: ${msg}\n`);
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

let interrupted = null; /* the signal that asked us to stop, once one has */
let keepLogs = false;    /* something went wrong that the logs may explain: keep them */

/* check_interrupt - throw once a signal asked us to stop, so that main's clean-up runs */
function check_interrupt() {
	if (interrupted) throw new Error(`stopped by ${interrupted}`);
}

/* ------------------------------------------------------------------ numbers (as httpbench) */

/* fmt - three significant digits, no exponent (as mcpbench prints) */
function fmt(v) {
	if (v === null || v === undefined || Number.isNaN(v)) return '-';
	if (Math.abs(v) >= 1000) return String(Math.round(v));
	if (v === 0) return '0';
	return v.toPrecision(3);
}

const sorted = (a) => Float64Array.from(a).sort();

/* pct - nearest-rank percentile */
function pct(a, p) {
	const s = sorted(a);
	if (!s.length) return NaN;
	const rank = Math.ceil((p / 100) * s.length);
	return s[Math.max(rank, 1) - 1];
}

/* median - middle value (mean of the middle two for an even n) */
function median(a) {
	const s = sorted(a);
	if (!s.length) return NaN;
	return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
}

const p90 = (a) => pct(a, 90);
const count = (a, f) => a.filter(f).length;

/* ------------------------------------------------------------------ CPU accounting */

const CLK_TCK = (() => {
	try {
		return Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || 100;
	} catch {
		return 100;
	}
})();

/* proc_stat - ppid and CPU seconds from /proc/PID/stat: the process's own (utime+stime) plus
 * what its children that it has reaped used (cutime+cstime), so a `go build` that came and went
 * inside a window still counts, in the agent that waited for it */
function proc_stat(pid) {
	let s;
	try {
		s = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
	} catch {
		return null;
	}
	const f = s.slice(s.lastIndexOf(')') + 2).split(' ');
	return { ppid: Number(f[1]), cpu: (Number(f[11]) + Number(f[12]) + Number(f[13]) + Number(f[14])) / CLK_TCK };
}

/* proc_table - every process: pid -> stat, and ppid -> child pids */
function proc_table() {
	const kids = new Map();
	const st = new Map();
	for (const d of fs.readdirSync('/proc')) {
		if (!/^\d+$/.test(d)) continue;
		const x = proc_stat(d);
		if (!x) continue;
		st.set(Number(d), x);
		if (!kids.has(x.ppid)) kids.set(x.ppid, []);
		kids.get(x.ppid).push(Number(d));
	}
	return { st, kids };
}

/* subtree_cpu - CPU seconds of the living processes below and including root */
function subtree_cpu({ st, kids }, root) {
	let sum = 0;
	const todo = [root];
	while (todo.length) {
		const p = todo.pop();
		sum += st.get(p)?.cpu || 0;
		todo.push(...(kids.get(p) || []));
	}
	return sum;
}

/* sandboxes_cpu - CPU seconds of the sandboxes the agents fixture runs: the trees of its
 * children that are `kode-gopher jail` (jail, agent, go build, the programs), not the fixture's
 * own node process nor its kubectl watch */
function sandboxes_cpu(t, fixturePid) {
	if (!fixturePid || !t.st.has(fixturePid)) return NaN;
	let sum = 0;
	for (const p of t.kids.get(fixturePid) || []) {
		let cmd = '';
		try {
			cmd = fs.readFileSync(`/proc/${p}/cmdline`, 'latin1');
		} catch { /* gone */ }
		if (cmd.includes('\0jail\0')) sum += subtree_cpu(t, p);
	}
	return sum;
}

/* machine_cpu - busy and total CPU seconds of the whole machine so far (/proc/stat) */
function machine_cpu() {
	const f = fs.readFileSync('/proc/stat', 'utf8').split('\n')[0].trim().split(/\s+/).slice(1).map(Number);
	const total = f.reduce((a, b) => a + b, 0);
	return { busy: (total - f[3] - (f[4] || 0)) / CLK_TCK };
}

/* cpu_mark - a snapshot of everything whose CPU a window reports: kode-gopher (serve and its
 * workers), the sandboxes, the rest of the test cluster (control plane, kwok, the agents
 * fixture's own process and kubectl), this client, and the whole machine */
function cpu_mark(kgPid, k) {
	const t = proc_table();
	const sandboxes = sandboxes_cpu(t, k.agentsPid);
	let cluster = (k.agentsPid && t.st.has(k.agentsPid) ? subtree_cpu(t, k.agentsPid) : 0) - (sandboxes || 0);
	for (const pid of k.controlPids) cluster += t.st.has(pid) ? subtree_cpu(t, pid) : 0;
	return {
		wall: performance.now(), client: process.cpuUsage(), serve: t.st.has(kgPid) ? subtree_cpu(t, kgPid) : NaN,
		agents: sandboxes, cluster, machine: machine_cpu().busy,
	};
}

/* cpu_diff - cores used by each between two marks */
function cpu_diff(a, b) {
	const wall = (b.wall - a.wall) / 1000;
	const c = process.cpuUsage(a.client);
	return {
		wall, client: (c.user + c.system) / 1e6 / wall, serve: (b.serve - a.serve) / wall,
		agents: (b.agents - a.agents) / wall, cluster: (b.cluster - a.cluster) / wall, machine: (b.machine - a.machine) / wall,
	};
}

/* ------------------------------------------------------------------ children */

const children = new Set(); /* every kode-gopher started here, until it has exited */

/* track - remember a started child until it exits */
function track(name, proc) {
	const c = { name, proc, exited: false, status: null, problems: [] };
	c.done = new Promise((resolve) => {
		proc.on('exit', (code, sig) => {
			c.exited = true;
			c.status = sig ? `signal ${sig}` : `exit ${code}`;
			children.delete(c);
			resolve();
		});
	});
	children.add(c);
	return c;
}

/* child_stop - SIGTERM (kode-gopher then ends its sessions and deletes its claims), SIGKILL after 60 s */
async function child_stop(c) {
	if (c.exited) return;
	c.proc.kill('SIGTERM');
	const killer = setTimeout(() => {
		progress(`${c.name} (pid ${c.proc.pid}) did not end within 60 s of SIGTERM: killing it`);
		c.proc.kill('SIGKILL');
	}, 60000);
	await c.done;
	clearTimeout(killer);
	if (c.pool) c.pool.destroy().catch(() => {});
}

const stop_all = () => Promise.all([...children].map(child_stop));

/* log_stderr - a child's stderr to a file; its warn and error lines also kept on c.problems */
function log_stderr(c, file) {
	c.log = file;
	const out = fs.createWriteStream(file);
	c.proc.stderr.setEncoding('utf8');
	let partial = '';
	c.proc.stderr.on('data', (chunk) => {
		out.write(chunk);
		const lines = (partial + chunk).split('\n');
		partial = lines.pop();
		for (const l of lines)
			if (/Z (warn|error) /.test(l)) c.problems.push(l);
	});
	c.proc.on('exit', () => out.end());
}

/* wait_line - resolve with the first match of re in a child's stderr, reject on exit/timeout */
function wait_line(c, re, what, ms) {
	return new Promise((resolve, reject) => {
		let buf = '';
		const t = setTimeout(() => done(new Error(`${c.name} did not print ${what} within ${ms / 1000} s`)), ms);
		const on = (chunk) => {
			buf += chunk;
			const m = buf.match(re);
			if (m) done(null, m);
			else if (buf.length > 65536) buf = buf.slice(-4096);
		};
		const onexit = () => done(new Error(`${c.name} exited (${c.status}) before printing ${what}; see ${c.log}`));
		function done(err, m) {
			clearTimeout(t);
			c.proc.stderr.off('data', on);
			c.proc.off('exit', onexit);
			err ? reject(err) : resolve(m);
		}
		c.proc.stderr.on('data', on);
		c.proc.on('exit', onexit);
	});
}

/* ------------------------------------------------------------------ the cluster */

let running = null; /* the cluster.sh command under way, so that a signal can end it first */

/* run_cmd - run a command, its output to our stderr; rejects with a sentence when it fails */
function run_cmd(cmd, args, env) {
	return new Promise((resolve, reject) => {
		const p = spawn(cmd, args, { env, stdio: ['ignore', 2, 2] });
		running = { proc: p, done: new Promise((r) => p.on('close', r)) };
		p.on('error', (e) => reject(new Error(`cannot run ${cmd}: ${e.message}`)));
		p.on('exit', (code, sig) => {
			running = null;
			if (code === 0) resolve();
			else reject(new Error(`${path.basename(cmd)} ${args[0]} failed (${sig ? `signal ${sig}` : `exit ${code}`}); its reason is above`));
		});
	});
}

/* end_running - SIGTERM the cluster.sh command under way, if any, and wait for it */
async function end_running() {
	const r = running;
	if (!r) return;
	r.proc.kill('SIGTERM');
	await r.done;
}

/* cluster_env - the environment of cluster.sh: our copy of the binary for the agents, the
 * runtime, and no network namespace (pod IPs stay loopback, which this process may contact) */
function cluster_env(o) {
	const env = { ...process.env, KG_BIN: o.run_bin, KG_RUNTIME_DIR: o.runtime };
	delete env.KG_K8S_NETNS;
	delete env.KG_K8S_POD_CIDR;
	return env;
}

/* kubectl - kubectl against the cluster; resolves to stdout, rejects with its stderr */
function kubectl(k, args, { input, namespace } = {}) {
	const ns = namespace ? ['-n', namespace] : [];
	return new Promise((resolve, reject) => {
		const child = execFile(k.kubectl, ['--kubeconfig', k.kubeconfig, ...ns, ...args],
			{ maxBuffer: 64 << 20, timeout: 60000 }, (err, stdout, stderr) => {
				if (err) reject(new Error(`kubectl ${args.join(' ')}: ${stderr.trim() || err.message}`));
				else resolve(stdout);
			});
		child.stdin.end(input === undefined ? undefined : typeof input === 'string' ? input : JSON.stringify(input));
	});
}

/* cluster_info - kubectl and kubeconfig of the cluster in dir (from its env file), and the
 * agents fixture's pid (its jails and agents are its descendants: the sandboxes' CPU) */
function cluster_info(dir) {
	let envText;
	try {
		envText = fs.readFileSync(path.join(dir, 'env'), 'utf8');
	} catch {
		throw new Error(`${dir} holds no running test cluster (no env file): start one with tests/k8s/cluster.sh up ${dir}`);
	}
	const bin = envText.match(/^export PATH=([^:\n]+):/m);
	if (!bin) throw new Error(`${dir}/env does not name kubectl's folder`);
	const netns = (() => {
		try {
			return (fs.readFileSync(path.join(dir, 'ports.env'), 'utf8').match(/^NETNS=(.*)$/m) || [])[1] || '';
		} catch {
			return '';
		}
	})();
	if (netns)
		throw new Error(`the cluster in ${dir} runs in network namespace ${netns}; k8sbench reaches pod IPs on loopback only: use a cluster started without KG_K8S_NETNS`);
	const pid = (name) => {
		try {
			return Number(fs.readFileSync(path.join(dir, `pids/${name}.pid`), 'utf8').trim()) || null;
		} catch {
			return null; /* its CPU is then not counted */
		}
	};
	const controlPids = ['etcd', 'kube-apiserver', 'kube-controller-manager', 'kube-scheduler', 'kwok', 'agent-sandbox-controller']
		.map(pid).filter(Boolean);
	return { dir, kubectl: path.join(bin[1], 'kubectl'), kubeconfig: path.join(dir, 'kubeconfig'), agentsPid: pid('agents'), controlPids };
}

/* inline objects, as tests/k8s/run.sh writes them when packaging/k8s lacks its files */
const RUNTIME_CLASS = 'apiVersion: node.k8s.io/v1\nkind: RuntimeClass\nmetadata:\n  name: gvisor\nhandler: runsc\n';
const TEST_POOL = `apiVersion: extensions.agents.x-k8s.io/v1beta1
kind: SandboxTemplate
metadata:
  name: go-runtime
spec:
  podTemplate:
    spec:
      runtimeClassName: gvisor
      containers:
      - name: agent
        image: kode-gopher-sandbox:test
        ports:
        - containerPort: ${AGENT_PORT}
---
apiVersion: extensions.agents.x-k8s.io/v1beta1
kind: SandboxWarmPool
metadata:
  name: ${POOL}
spec:
  replicas: 2
  sandboxTemplateRef:
    name: go-runtime
`;

/* cluster_objects - namespace, RuntimeClass gvisor, template and warm pool (packaging/k8s's
 * when they exist, as tests/k8s/run.sh does), the pool scaled to o.replicas */
async function cluster_objects(o, k) {
	const ns = o.namespace;
	await kubectl(k, ['apply', '-f', '-'], { input: { apiVersion: 'v1', kind: 'Namespace', metadata: { name: ns } } });
	const rc = path.join(PACKAGING, 'runtimeclass-gvisor.yaml');
	await kubectl(k, ['apply', '-f', fs.existsSync(rc) ? rc : '-'], { input: fs.existsSync(rc) ? undefined : RUNTIME_CLASS });
	const tpl = path.join(PACKAGING, 'sandbox-template.yaml'), wp = path.join(PACKAGING, 'warm-pool.yaml');
	if (fs.existsSync(tpl) && fs.existsSync(wp)) {
		await kubectl(k, ['apply', '-f', tpl, '-f', wp], { namespace: ns });
		k.objects = 'packaging/k8s/sandbox-template.yaml and warm-pool.yaml';
	} else {
		await kubectl(k, ['apply', '-f', '-'], { input: TEST_POOL, namespace: ns });
		k.objects = "tests/k8s/run.sh's test template and pool";
	}
	await kubectl(k, ['patch', 'sandboxwarmpool', POOL, '--type', 'merge', '-p', JSON.stringify({ spec: { replicas: o.replicas } })],
		{ namespace: ns });
	progress(`namespace ${ns}: RuntimeClass gvisor, ${k.objects}; ${POOL} scaled to ${o.replicas} replicas`);
}

/* agent_health - GET /health of an agent on a loopback pod IP: its JSON, or null */
function agent_health(ip) {
	if (!/^127\./.test(ip))
		throw new Error(`refusing to contact pod IP ${ip}: k8sbench only reaches loopback pod IPs`);
	return new Promise((resolve) => {
		const req = http.get({ host: ip, port: AGENT_PORT, path: '/health', agent: false, timeout: 2000 }, (res) => {
			let s = '';
			res.setEncoding('utf8');
			res.on('data', (d) => (s += d));
			res.on('end', () => {
				try {
					resolve(res.statusCode === 200 ? JSON.parse(s) : null);
				} catch {
					resolve(null);
				}
			});
		});
		req.on('timeout', () => req.destroy(new Error('timeout')));
		req.on('error', () => resolve(null));
	});
}

/* warm_count - how many of the pool's Sandboxes are Ready with an agent that answers unclaimed */
async function warm_count(o, k) {
	const items = JSON.parse(await kubectl(k, ['get', 'sandboxes', '-o', 'json'], { namespace: o.namespace })).items;
	const ips = [];
	for (const sb of items) {
		const owner = (sb.metadata.ownerReferences || []).find((r) => r.controller);
		const ready = (sb.status?.conditions || []).find((c) => c.type === 'Ready')?.status === 'True';
		const ip = sb.status?.podIPs?.[0];
		if (owner?.kind === 'SandboxWarmPool' && owner.name === POOL && ready && ip && !sb.metadata.deletionTimestamp)
			ips.push(ip);
	}
	const health = await Promise.all(ips.map(agent_health));
	return count(health, (h) => h && h.ok !== false && h.claimed === false);
}

/* wait_warm - until the pool has o.replicas warm sandboxes whose agents answer; throws after ms */
async function wait_warm(o, k, ms = 180000) {
	const t0 = performance.now();
	let n = 0;
	let said = 0;
	while (performance.now() - t0 < ms) {
		check_interrupt();
		try {
			n = await warm_count(o, k);
		} catch (e) {
			progress(`counting the warm sandboxes: ${e.message}`);
		}
		if (n >= o.replicas) return (performance.now() - t0) / 1000;
		if (performance.now() - said > 10000) {
			progress(`waiting for ${o.replicas} warm sandboxes with answering agents: ${n} so far`);
			said = performance.now();
		}
		await sleep(300);
	}
	throw new Error(`the warm pool did not get to ${o.replicas} Ready sandboxes with answering agents within ${ms / 1000} s (${n}); see the cluster's logs (logs/agents.log, logs/agent-sandbox-controller.log)`);
}

/* claims_left - the SandboxClaims in the namespace (kode-gopher's, after its sessions ended) */
async function claims_left(o, k) {
	return JSON.parse(await kubectl(k, ['get', 'sandboxclaims', '-o', 'json'], { namespace: o.namespace })).items.length;
}

/* claims_gone - the SandboxClaims left in the namespace once kode-gopher's sessions ended:
 * polled for up to 30 s (deletes are asynchronous), so normally 0 */
async function claims_gone(o, k) {
	let left = NaN;
	const t0 = performance.now();
	while (performance.now() - t0 < 30000 && !interrupted) {
		left = await claims_left(o, k);
		if (left === 0) break;
		await sleep(300);
	}
	return left;
}

/* short - a log line for a note: without its timestamp, at most 200 characters */
function short(line) {
	const l = line.replace(/^\S+ /, '').replace(/\s+/g, ' ');
	return l.length > 200 ? l.slice(0, 199) + '…' : l;
}

/* ------------------------------------------------------------------ snippets */

/* the first call of every session: identical everywhere, so each new sandbox does the same build */
const SNIPPET_FIRST = 'package snippet\n\nimport (\n\t"context"\n\t"strings"\n)\n\n' +
	'func run(ctx context.Context) (any, error) {\n\treturn strings.ToUpper("hello, gopher"), nil\n}\n';

/* a first call that claims the sandbox and stops in the agent's normalize step: no build */
const CLAIM_ONLY = 'package snippet\n\nfunc run( {\n';

const NONCE = randomBytes(4).toString('hex');

/* code_stdlib - mcpbench's stdlib snippet: a tag "kgbench-<run nonce>-<series>-<i>" makes every
 * source of a run, and of every run, new to the build cache and the binary cache */
function code_stdlib(series, i) {
	const tag = `kgbench-${NONCE}-${series}-${String(i).padStart(6, '0')}`;
	return 'package snippet\n\nimport (\n\t"context"\n\t"fmt"\n)\n\n' +
		`const benchTag = "${tag}"\n\n` +
		`func run(ctx context.Context) (any, error) {\n\treturn fmt.Sprintf("n=%d %s", ${i}, benchTag), nil\n}\n`;
}

/* check_result - the structuredContent of a tools/call result that ran the snippet, or throw */
function check_result(res) {
	const sc = res.structuredContent || {};
	if (res.isError || !sc.result || sc.result.kind !== 'ok')
		throw new Error(`execute_go_code did not run the snippet: ${JSON.stringify(res).slice(0, 500)}`);
	return sc;
}

const call_params = (code) => ({ name: 'execute_go_code', arguments: { code } });

/* ------------------------------------------------------------------ 1. stdio sessions */

const KUBE_ARGS = (o) => ['--backend', 'kubernetes', '--namespace', o.namespace, '--agent-access', 'pod-ip',
	'--credentials', 'none', '--runtime-dir', o.runtime];

/* stdio_start - `kode-gopher serve` on pipes: requests are lines on its stdin, answers lines on
 * its stdout; request() resolves with the answer and the time its line arrived */
function stdio_start(o, k, tmp, tag) {
	const argv = ['serve', ...KUBE_ARGS(o)];
	const proc = spawn(o.run_bin, argv, {
		env: { ...process.env, KUBECONFIG: k.kubeconfig, KODE_GOPHER_SANDBOX_ROOT: path.join(tmp, 'sandboxes') },
		stdio: ['pipe', 'pipe', 'pipe'],
	});
	const c = track(`kode-gopher serve (${tag})`, proc);
	log_stderr(c, path.join(tmp, `serve-${tag}.log`));
	proc.on('error', (e) => progress(`cannot start ${o.run_bin}: ${e.message}`));
	const pending = new Map();
	let seq = 0;
	readline.createInterface({ input: proc.stdout }).on('line', (line) => {
		const t = performance.now();
		let msg;
		try {
			msg = JSON.parse(line);
		} catch {
			progress(`${c.name} wrote a line that is not JSON: ${line.slice(0, 200)}`);
			return;
		}
		if (msg.method !== undefined && msg.id !== undefined) { /* a request to us: we offer nothing */
			proc.stdin.write(JSON.stringify({ jsonrpc: '2.0', id: msg.id, error: { code: -32601, message: 'not supported by k8sbench' } }) + '\n');
			return;
		}
		const p = msg.id !== undefined && pending.get(msg.id);
		if (!p) return; /* notifications (logging, progress) */
		pending.delete(msg.id);
		p.resolve({ msg, t });
	});
	proc.on('exit', () => {
		for (const p of pending.values()) p.reject(new Error(`${c.name} exited (${c.status}) before answering; see ${c.log}`));
		pending.clear();
	});
	c.send = (obj) => proc.stdin.write(JSON.stringify(obj) + '\n');
	/* request - send one request; resolves with { result, t0, t1 }, rejects with a sentence */
	c.request = (method, params) => {
		const id = ++seq;
		return new Promise((resolve, reject) => {
			const timer = setTimeout(() => reject(new Error(`${method}: no answer within ${CALL_TIMEOUT_MS / 1000} s`)), CALL_TIMEOUT_MS);
			pending.set(id, {
				resolve: ({ msg, t }) => {
					clearTimeout(timer);
					if (msg.error) reject(new Error(`${method}: JSON-RPC error ${msg.error.code}: ${msg.error.message}`));
					else resolve({ result: msg.result, t0, t1: t });
				},
				reject: (e) => { clearTimeout(timer); reject(e); },
			});
			const t0 = performance.now();
			c.send({ jsonrpc: '2.0', id, method, params });
		});
	};
	return c;
}

/* part_latency - figure 1: N fresh stdio sessions, one after another, each on a full warm pool */
async function part_latency(o, k, tmp, rows) {
	const r = { start: [], init: [], call: [], total: [], claim: [], build: [], rest: [], later: [], laterBuild: [], end: [] };
	let cached = 0, retried = 0, laterCached = 0, problems = 0, firstProblem = '';
	const statuses = new Map(); /* serve's exit status -> how many sessions ended so */
	for (let i = 0; i < o.sessions; i++) {
		check_interrupt();
		await wait_warm(o, k);
		progress(`latency: session ${i + 1}/${o.sessions}`);
		const tSpawn = performance.now();
		const c = stdio_start(o, k, tmp, `latency-${i}`);
		try {
			const init = await c.request('initialize', {
				protocolVersion: PROTOCOL, capabilities: {}, clientInfo: { name: 'kode-gopher-k8sbench', version: '1' },
			});
			c.send({ jsonrpc: '2.0', method: 'notifications/initialized' });
			const first = await c.request('tools/call', call_params(SNIPPET_FIRST));
			const sc = check_result(first.result);
			const later = await c.request('tools/call', call_params(code_stdlib('l', i)));
			const lsc = check_result(later.result);
			r.start.push(init.t1 - tSpawn);
			r.init.push(init.t1 - init.t0);
			r.call.push(first.t1 - first.t0);
			r.total.push(first.t1 - init.t0);
			r.claim.push(sc.timings?.claim_ms);
			r.build.push(sc.build_ms);
			r.rest.push(first.t1 - first.t0 - (sc.timings?.claim_ms ?? NaN) - sc.build_ms);
			r.later.push(later.t1 - later.t0);
			r.laterBuild.push(lsc.build_ms);
			if (sc.cached_build) cached++;
			if (sc.retried) retried++;
			if (lsc.cached_build) laterCached++;
			if (lsc.sandbox !== sc.sandbox) throw new Error(`the second call ran in ${lsc.sandbox}, not in the session's ${sc.sandbox}`);
			/* session end: stdin closed, the worker deletes its claim, serve exits */
			const tEnd = performance.now();
			c.proc.stdin.end();
			const killer = setTimeout(() => c.proc.kill('SIGKILL'), 60000);
			await c.done;
			clearTimeout(killer);
			r.end.push(performance.now() - tEnd);
			/* a bad end is reported in the table, not a reason to stop measuring */
			statuses.set(c.status, (statuses.get(c.status) || 0) + 1);
			if (c.status !== 'exit 0') {
				progress(`${c.name} ended with ${c.status} after its stdin closed; see ${c.log}`);
				keepLogs = true;
			}
			problems += c.problems.length;
			firstProblem = firstProblem || c.problems[0] || '';
		} finally {
			await child_stop(c);
		}
	}
	const left = await claims_gone(o, k);
	const n = String(o.sessions);
	rows.push(['1. first tools/call → result, fresh session (ms)', median(r.call), p90(r.call), n,
		`stdio serve --backend kubernetes --agent-access pod-ip, ${o.replicas} warm sandboxes before each; the same stdlib snippet (strings.ToUpper) in every session: ` +
		`claim, then build in the new sandbox (cached_build ${cached}/${n}, retried ${retried}/${n})`]);
	rows.push(['  timings.claim_ms (ms)', median(r.claim), p90(r.claim), n,
		'as the result reports it: create the SandboxClaim, watch it until Ready, read the pod IP, claim handshake with the agent']);
	rows.push(['  build_ms (ms)', median(r.build), p90(r.build), n, 'as the result reports it: go build in the new sandbox (its own layer over the warm base cache)']);
	rows.push(['  end to end − claim_ms − build_ms (ms)', median(r.rest), p90(r.rest), n,
		'the rest: stdio relay, worker, normalize, write, run, the result back']);
	rows.push(['1. initialize → first result (ms)', median(r.total), p90(r.total), n,
		`from sending initialize; initialize answered in ${fmt(median(r.init))} ms (median; ${fmt(median(r.start))} ms after serve was started)`]);
	rows.push(['  a second call, same session, new source (ms)', median(r.later), p90(r.later), n,
		`no claim: the sandbox is the session's; stdlib, tagged so it is built (build_ms ${fmt(median(r.laterBuild))} median; cached_build ${laterCached}/${n})`]);
	rows.push(['  session end: stdin closed → serve exited (ms)', median(r.end), p90(r.end), n,
		`for information: the worker deletes its SandboxClaim on the way out; serve ended with ${[...statuses].map(([st, m]) => `${st} ×${m}`).join(', ')}; ` +
		`SandboxClaims left in ${o.namespace} after the ${n} sessions: ${left}` +
		`${problems ? `; warn/error log lines ${problems}, first: ${short(firstProblem)}` : ''}`]);
}

/* ------------------------------------------------------------------ 2. the shared server */

/* sse_answer - the JSON-RPC response with this id among the events of a text/event-stream body */
function sse_answer(text, id) {
	for (const ev of text.split(/\r?\n\r?\n/)) {
		const data = ev.split(/\r?\n/).filter((l) => l.startsWith('data:')).map((l) => l.slice(5).replace(/^ /, '')).join('\n');
		if (!data) continue;
		const msg = JSON.parse(data);
		if (msg.id === id) return msg;
	}
	return null;
}

/* post - one HTTP request to /mcp (as httpbench's) */
async function post(pool, method, body, sid, id) {
	const headers = { 'content-type': 'application/json', accept: 'application/json, text/event-stream' };
	if (sid) {
		headers['mcp-session-id'] = sid;
		headers['mcp-protocol-version'] = PROTOCOL;
	}
	const res = await pool.request({
		path: '/mcp', method, headers, body: body === null ? undefined : body,
		headersTimeout: CALL_TIMEOUT_MS, bodyTimeout: CALL_TIMEOUT_MS,
	});
	const text = await res.body.text();
	const type = res.headers['content-type'] || '';
	let msg = null;
	try {
		if (type.startsWith('text/event-stream')) msg = sse_answer(text, id);
		else if (text.length && type.startsWith('application/json')) msg = JSON.parse(text);
	} catch (e) {
		throw new Error(`HTTP ${res.statusCode}: unparsable answer (${e.message}): ${text.slice(0, 200)}`);
	}
	return { status: res.statusCode, headers: res.headers, msg, text };
}

/* rpc - a JSON-RPC request in a session; resolves with the result, rejects with a sentence */
async function rpc(pool, sess, method, params) {
	const id = ++sess.seq;
	const r = await post(pool, 'POST', JSON.stringify({ jsonrpc: '2.0', id, method, params }), sess.sid, id);
	if (r.status !== 200 || !r.msg) throw new Error(`${method}: HTTP ${r.status}: ${r.text.slice(0, 200)}`);
	if (r.msg.error) throw new Error(`${method}: JSON-RPC error ${r.msg.error.code}: ${r.msg.error.message}`);
	return r.msg.result;
}

/* open_session - initialize, then notifications/initialized */
async function open_session(pool) {
	const body = JSON.stringify({
		jsonrpc: '2.0', id: 0, method: 'initialize',
		params: { protocolVersion: PROTOCOL, capabilities: {}, clientInfo: { name: 'kode-gopher-k8sbench', version: '1' } },
	});
	const r = await post(pool, 'POST', body, null, 0);
	const sid = r.headers['mcp-session-id'];
	if (r.status !== 200 || !r.msg || !r.msg.result || !sid)
		throw new Error(`initialize: HTTP ${r.status}${sid ? '' : ', no Mcp-Session-Id'}: ${r.text.slice(0, 300)}`);
	const n = await post(pool, 'POST', JSON.stringify({ jsonrpc: '2.0', method: 'notifications/initialized' }), sid, undefined);
	if (n.status !== 202 && n.status !== 200)
		throw new Error(`notifications/initialized: HTTP ${n.status}: ${n.text.slice(0, 200)}`);
	return { sid, seq: 0 };
}

/* close_session - DELETE the session (the worker deletes its claim) */
async function close_session(pool, sess) {
	const r = await post(pool, 'DELETE', null, sess.sid, undefined);
	if (r.status !== 200 && r.status !== 204)
		throw new Error(`DELETE: HTTP ${r.status}: ${r.text.slice(0, 200)}`);
}

/* kg_metric - one sample of the shared server's /metrics (the first line that starts with name) */
function kg_metric(port, name) {
	return new Promise((resolve) => {
		const req = http.get({ host: '127.0.0.1', port, path: '/metrics', agent: false }, (res) => {
			let s = '';
			res.setEncoding('utf8');
			res.on('data', (d) => (s += d));
			res.on('end', () => {
				const m = s.split('\n').find((l) => l.startsWith(name + ' '));
				resolve(m ? Number(m.slice(name.length + 1)) : NaN);
			});
		});
		req.setTimeout(10000, () => req.destroy(new Error('timeout')));
		req.on('error', () => resolve(NaN));
	});
}

/* start_http - `serve --http 127.0.0.1:0 --backend kubernetes`, sized for o.concurrency sessions */
async function start_http(o, k, tmp) {
	const argv = ['serve', '--http', '127.0.0.1:0', ...KUBE_ARGS(o),
		'--max-sandboxes-per-user', String(o.concurrency), '--max-workers', String(o.concurrency + 8)];
	const proc = spawn(o.run_bin, argv, {
		env: { ...process.env, KUBECONFIG: k.kubeconfig, KODE_GOPHER_SANDBOX_ROOT: path.join(tmp, 'sandboxes') },
		stdio: ['ignore', 'ignore', 'pipe'],
	});
	const c = track('kode-gopher serve --http', proc);
	log_stderr(c, path.join(tmp, 'serve-http.log'));
	proc.on('error', (e) => progress(`cannot start ${o.run_bin}: ${e.message}`));
	const m = await wait_line(c, /serving MCP on http:\/\/127\.0\.0\.1:(\d+)\/mcp/, 'its "serving MCP on" line', 20000);
	c.port = Number(m[1]);
	c.pool = new Pool(`http://127.0.0.1:${m[1]}`, { connections: null, pipelining: 1 });
	progress(`kode-gopher pid ${proc.pid} on port ${m[1]}: ${argv.join(' ')}`);
	return c;
}

/* flavour - all sessions in closed loops of tools/call for warmup + duration seconds. A call
 * counts when its result arrives inside the window (whenever it was sent); after the window no
 * new call is sent and those in flight are awaited, uncounted. CPU is read at the window's edges. */
async function flavour(kg, sessions, code, o, k) {
	const tStart = performance.now() + o.warmup * 1000;
	const tEnd = tStart + o.duration * 1000;
	const lat = [], build = [], runMs = [];
	let cached = 0, errors = 0, firstError = null;
	let m0 = null, m1 = null;
	const t0 = setTimeout(() => (m0 = cpu_mark(kg.proc.pid, k)), o.warmup * 1000);
	const t1 = setTimeout(() => (m1 = cpu_mark(kg.proc.pid, k)), (tEnd - performance.now()));
	async function loop(sess, s) {
		for (let i = 0; performance.now() < tEnd && !interrupted && !kg.exited; i++) {
			const a = performance.now();
			let sc = null;
			try {
				sc = check_result(await rpc(kg.pool, sess, 'tools/call', call_params(code(s, i))));
			} catch (e) {
				firstError = firstError || e.message;
			}
			const b = performance.now();
			if (!sc) {
				if (b >= tStart && b <= tEnd) errors++;
				await sleep(100); /* no tight loop of failures */
				continue;
			}
			if (b < tStart || b > tEnd) continue;
			lat.push(b - a);
			build.push(sc.build_ms);
			runMs.push(sc.duration_ms);
			if (sc.cached_build) cached++;
		}
	}
	await Promise.all(sessions.map(loop));
	clearTimeout(t0);
	clearTimeout(t1);
	return { lat, build, runMs, cached, errors, firstError, cpu: m0 && m1 ? cpu_diff(m0, m1) : null };
}

/* part_throughput - figure 2: o.concurrency sessions on one shared server, two flavours of calls */
async function part_throughput(o, k, tmp, rows) {
	await wait_warm(o, k);
	const kg = await start_http(o, k, tmp);
	const crashes0 = await kg_metric(kg.port, 'kode_gopher_worker_crashes_total');
	const sessions = [];
	for (let i = 0; i < o.concurrency; i++) sessions.push(await open_session(kg.pool));
	/* not counted in the rates: each session's first call, all at once, is a snippet that fails
	 * to normalize, so the call is the claim alone (create, watch until Ready, handshake) with no
	 * build competing for the CPU; then the same stdlib snippet in each, all at once: 16 builds */
	progress(`throughput: ${o.concurrency} sessions open; their claims (a first call that does not build) all at once`);
	const n = String(o.concurrency);
	const cm0 = cpu_mark(kg.proc.pid, k);
	const claims = await Promise.all(sessions.map(async (s) => {
		const a = performance.now();
		const res = await rpc(kg.pool, s, 'tools/call', call_params(CLAIM_ONLY));
		const sc = res.structuredContent || {};
		if (sc.phase !== 'normalize' || sc.timings?.claim_ms === undefined)
			throw new Error(`the claiming call did not end in the agent's normalize step: ${JSON.stringify(res).slice(0, 500)}`);
		return { ms: performance.now() - a, sc };
	}));
	const cc = cpu_diff(cm0, cpu_mark(kg.proc.pid, k));
	const sandboxes = new Set(claims.map((f) => f.sc.sandbox));
	if (sandboxes.size !== o.concurrency)
		throw new Error(`${o.concurrency} sessions claimed ${sandboxes.size} sandboxes`);
	rows.push([`2. claims of ${n} sessions at once: first call → result (ms)`, median(claims.map((f) => f.ms)), p90(claims.map((f) => f.ms)), n,
		`not in the rates below: each session's first call, all sent together, from ${o.replicas} warm sandboxes; a snippet that fails ` +
		'to normalize (its result is a normalize_error), so no build runs meanwhile'],
	['  timings.claim_ms (ms)', median(claims.map((f) => f.sc.timings.claim_ms)), p90(claims.map((f) => f.sc.timings.claim_ms)), n,
		`${n} SandboxClaims created, watched until Ready and handshaken at once; meanwhile (${fmt(cc.wall)} s) the pool starts ${n} ` +
		`replacements: CPU in cores: test cluster (API server, etcd, controllers, kwok, agents fixture) ${fmt(cc.cluster)}, ` +
		`sandboxes ${fmt(cc.agents)}, kode-gopher ${fmt(cc.serve)}, whole machine ${fmt(cc.machine)} of ${os.cpus().length}`]);
	progress(`throughput: ${o.concurrency} first builds all at once`);
	const builds = await Promise.all(sessions.map(async (s) => {
		const a = performance.now();
		const sc = check_result(await rpc(kg.pool, s, 'tools/call', call_params(SNIPPET_FIRST)));
		return { ms: performance.now() - a, sc };
	}));
	rows.push([`  then ${n} first builds at once (ms)`, median(builds.map((f) => f.ms)), p90(builds.map((f) => f.ms)), n,
		`not in the rates below: the stdlib snippet of part 1 in every session, sent together; build_ms ` +
		`${fmt(median(builds.map((f) => f.sc.build_ms)))} median, ${fmt(p90(builds.map((f) => f.sc.build_ms)))} p90 ` +
		`(cached_build ${count(builds, (f) => f.sc.cached_build)}/${n})`]);

	const kinds = [
		['new source each call', (s, i) => code_stdlib('t', s * 100000 + i),
			'stdlib snippet tagged per call (mcpbench\'s a): every call builds'],
		['same source resubmitted', () => SNIPPET_FIRST,
			'the session\'s first snippet again: the sandbox\'s binary cache answers, no build'],
	];
	for (const [what, code, desc] of kinds) {
		check_interrupt();
		progress(`throughput: ${what}, ${n} sessions, ${o.warmup} + ${o.duration} s`);
		const f = await flavour(kg, sessions, code, o, k);
		const calls = f.lat.length;
		const notes = [`${desc}; ${o.duration} s after ${o.warmup} s unmeasured; cached_build ${f.cached}/${calls}`];
		if (f.errors) notes.push(`errors ${f.errors} (first: ${f.firstError})`);
		if (f.cpu) {
			const perCall = calls ? (f.cpu.agents * f.cpu.wall * 1000) / calls : NaN;
			notes.push(`CPU in cores: sandboxes ${fmt(f.cpu.agents)} (${fmt(perCall)} ms per call), kode-gopher serve + workers ${fmt(f.cpu.serve)}, ` +
				`test cluster ${fmt(f.cpu.cluster)}, client ${fmt(f.cpu.client)}, whole machine ${fmt(f.cpu.machine)} of ${os.cpus().length}`);
		}
		rows.push([`2. calls/s, ${n} sessions, ${what}`, calls / o.duration, '-', String(calls), notes.join('; ')]);
		rows.push([`  per call, end to end (ms)`, median(f.lat), p90(f.lat), String(calls),
			`build_ms ${fmt(median(f.build))} median, ${fmt(p90(f.build))} p90; duration_ms ${fmt(median(f.runMs))} median; max ${fmt(Math.max(...f.lat))} ms`]);
		if (!calls) throw new Error(`no call of "${what}" completed in its window${f.firstError ? `; first error: ${f.firstError}` : ''}`);
	}

	/* the end: every session closed, serve stopped, and no claim left behind */
	const alive = kg.exited ? `serve ${kg.status}` : 'ok';
	const crashes = (await kg_metric(kg.port, 'kode_gopher_worker_crashes_total')) - crashes0;
	let closeErr = null;
	for (const s of sessions) {
		try {
			await close_session(kg.pool, s);
		} catch (e) {
			closeErr = closeErr || e;
		}
	}
	await child_stop(kg);
	if (kg.status !== 'exit 0') {
		progress(`${kg.name} ended with ${kg.status} after SIGTERM; see ${kg.log}`);
		keepLogs = true;
	}
	const left = await claims_gone(o, k);
	const problems = kg.problems.length ? `; its log has ${kg.problems.length} warn/error lines, first: ${short(kg.problems[0])}` : '';
	rows.push(['kode-gopher during the runs', alive, '-', '-',
		`worker crashes ${crashes} (kode_gopher_worker_crashes_total); ${closeErr ? `a DELETE failed: ${closeErr.message}; ` : ''}serve ${kg.status} after SIGTERM; SandboxClaims left in ${o.namespace}: ${left}${problems}`]);
}

/* ------------------------------------------------------------------ table */

/* table - a markdown table, columns aligned; `right` marks the numeric columns */
function table(head, rows, right) {
	const cells = rows.map((r) => r.map((v) => (typeof v === 'number' ? fmt(v) : String(v))));
	const w = head.map((h, c) => Math.max(3, [...h].length, ...cells.map((r) => [...r[c]].length)));
	const line = (r) => '|' + r.map((v, c) => {
		const pad = ' '.repeat(w[c] - [...v].length);
		return ' ' + (right[c] ? pad + v : v + pad) + ' |';
	}).join('');
	const sep = '|' + w.map((n, c) => ' ' + (right[c] ? '-'.repeat(n - 1) + ':' : '-'.repeat(n)) + ' |').join('');
	return [line(head), sep, ...cells.map(line)].join('\n') + '\n';
}

/* version_of - a command's first line, or "?" */
function version_of(cmd, args) {
	try {
		return execFileSync(cmd, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).split('\n')[0].trim();
	} catch {
		return '?';
	}
}

/* cluster_versions - what the cluster runs, for the header */
async function cluster_versions(k) {
	let kube = '?';
	try {
		kube = JSON.parse(await kubectl(k, ['version', '-o', 'json'])).serverVersion.gitVersion;
	} catch { /* ? */ }
	const sh = fs.readFileSync(CLUSTER_SH, 'utf8');
	const v = (name, env) => process.env[env] || (sh.match(new RegExp(`${name}=\\$\\{${env}:-([^}]+)\\}`)) || [])[1] || '?';
	return `kube-apiserver ${kube}, agent-sandbox ${v('AGENT_SANDBOX_VERSION', 'KG_AGENT_SANDBOX_VERSION')}, kwok ${v('KWOK_VERSION', 'KG_KWOK_VERSION')}`;
}

/* ------------------------------------------------------------------ main */

/* main - cluster up, the parts asked for, cluster down; then the table */
async function main() {
	const o = parse_args(process.argv.slice(2));
	const want = (p) => !o.only || o.only === p;
	if (!fs.existsSync(o.bin)) die(`${o.bin} does not exist: build it first (make)`);
	if (!fs.existsSync(path.join(o.runtime, 'gomodcache')))
		die(`${o.runtime} has no prepared Go runtime (run \`make runtime\`): the agents need it`);
	const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'k8sbench-'));
	fs.chmodSync(tmp, 0o711); /* jailed agents run as other uids and walk through it to their dirs */
	/* a copy, so that a rebuild of the binary during the run changes nothing: serve and the
	 * agents fixture's jails bind their own binary */
	o.run_bin = path.join(tmp, 'kode-gopher');
	fs.copyFileSync(o.bin, o.run_bin);
	fs.chmodSync(o.run_bin, 0o755);
	const kgVersion = version_of(o.run_bin, ['--version']);
	const ownCluster = !o.cluster;
	const clusterDir = o.cluster || path.join(tmp, 'cluster');
	let clusterUp = false; /* ours, started (or starting), not yet down */

	/* cluster_down - our cluster down (its logs copied beside serve's first when asked) */
	const cluster_down = async (keepLogs) => {
		if (!ownCluster || !clusterUp) return;
		clusterUp = false;
		if (keepLogs) fs.cpSync(path.join(clusterDir, 'logs'), path.join(tmp, 'cluster-logs'), { recursive: true, force: true });
		progress('taking the cluster down');
		try {
			await run_cmd(CLUSTER_SH, ['down', clusterDir], cluster_env(o));
		} catch (e) {
			progress(`${e.message}: stop it with ${CLUSTER_SH} down ${clusterDir}`);
		}
	};
	/* a signal stops what runs (cluster.sh up, serve); the parts then fail at once and main's
	 * clean-up below takes the cluster down; a second signal exits at once (the exit hook
	 * below still takes the cluster down) */
	const onsig = (sig) => {
		if (interrupted) process.exit(130);
		interrupted = sig;
		progress(`${sig}: stopping kode-gopher and the cluster (again to exit at once)`);
		end_running().then(stop_all);
	};
	process.on('SIGINT', onsig);
	process.on('SIGTERM', onsig);
	process.on('exit', () => {
		/* last resort: nothing async runs now */
		for (const c of children) c.proc.kill('SIGTERM');
		if (ownCluster && clusterUp) {
			try {
				execFileSync(CLUSTER_SH, ['down', clusterDir], { env: cluster_env(o), stdio: ['ignore', 2, 2] });
			} catch { /* said on stderr */ }
		}
	});

	const load0 = os.loadavg()[0];
	const t0 = performance.now();
	const date = new Date().toISOString().slice(0, 16).replace('T', ' ');
	const rows = [];
	let failed = null, versions = '?', k = null;
	try {
		if (ownCluster) {
			progress(`starting the test cluster in ${clusterDir} (cluster.sh up; builds what its cache lacks first)`);
			clusterUp = true;
			await run_cmd(CLUSTER_SH, ['up', clusterDir], cluster_env(o));
		}
		k = cluster_info(clusterDir);
		versions = await cluster_versions(k);
		await cluster_objects(o, k);
		const s = await wait_warm(o, k);
		progress(`${o.replicas} warm sandboxes with answering agents after ${s.toFixed(1)} s`);
		if (want('latency')) await part_latency(o, k, tmp, rows);
		if (want('throughput')) await part_throughput(o, k, tmp, rows);
	} catch (e) {
		failed = e;
	} finally {
		await stop_all();
		if (!ownCluster && k) {
			/* a cluster we do not own: leave the pool as the packaged manifest has it */
			await kubectl(k, ['patch', 'sandboxwarmpool', POOL, '--type', 'merge', '-p', '{"spec":{"replicas":2}}'],
				{ namespace: o.namespace }).catch(() => {});
		}
		const keep = (Boolean(failed) || keepLogs) && !interrupted;
		await cluster_down(keep);
		if (!keep) fs.rmSync(tmp, { recursive: true, force: true });
		else if (!failed) progress(`the logs of serve and the cluster are kept in ${tmp} (see the notes of the table)`);
	}
	if (interrupted) {
		progress(`stopped by ${interrupted}; the cluster is down and ${tmp} removed`);
		process.exit(130);
	}
	const load1 = os.loadavg()[0];
	const out = `kode-gopher Kubernetes-backend benchmarks, ${date} UTC: ${os.cpus().length} CPUs, load average ` +
		`${load0.toFixed(2)} at start, ${load1.toFixed(2)} at end; node ${process.version}; ${path.relative(ROOT, o.bin) || o.bin}` +
		`${kgVersion !== '?' ? ` (${kgVersion}, run from a copy)` : ''}; test cluster: ${versions}, a jailed kode-gopher agent ` +
		`on each sandbox pod's loopback IP; ${POOL} at ${o.replicas} replicas in namespace ${o.namespace}; ` +
		`${((performance.now() - t0) / 1000).toFixed(0)} s in all\n\n` +
		(rows.length ? table(['figure', 'median', 'p90', 'n', 'note'], rows, [0, 1, 1, 1, 0]) : '');
	process.stdout.write(out);
	if (failed) {
		progress(`a figure could not be measured: ${failed.message}`);
		progress(`serve's logs${ownCluster ? ' and the cluster\'s (cluster-logs/)' : ''} are kept in ${tmp}`);
		process.exit(1);
	}
}

main().catch(async (e) => {
	progress(`failed: ${e.stack || e.message}`);
	await stop_all();
	process.exit(1);
});
