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
 * small; the two share lib.mjs.  Every process started here is ended here, and the cluster is
 * taken down, on success, failure and SIGINT/SIGTERM alike.  The exit status is non-zero only
 * when a figure could not be measured.  See bench/README.md.
 */
import { spawn, execFile, execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import readline from 'node:readline';
import { performance } from 'node:perf_hooks';
import {
	ROOT, PROTOCOL, SNIPPET_UPPER, bench_name, base_options, parse_options, die, progress,
	sleep, fmt, median, p90, table, CLK_TCK, proc_read, proc_table, subtree_cpu, child_stop,
	stop_all, term_all_now, spawn_logged, serving_port, http_target, rpc, open_session,
	close_session, kg_metric, version_of, work_dir, machine_line, run_main,
} from './lib.mjs';

bench_name('k8sbench');
const CLUSTER_SH = path.join(ROOT, 'tests/k8s/cluster.sh');
const PACKAGING = path.join(ROOT, 'packaging/k8s');
const CALL_TIMEOUT_MS = 300000; /* 16 builds at once on 2 cores take seconds each; a claim may wait */
const POOL = 'go-runtime-pool';
const AGENT_PORT = 8888;
/* what the bench runs on, from packaging/k8s: the objects a deployment applies (tests/k8s/run.sh
 * applies the same) */
const OBJECTS = ['runtimeclass-gvisor.yaml', 'sandbox-template.yaml', 'warm-pool.yaml'];

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
		...base_options(), sessions: 10, concurrency: 16, duration: 20, warmup: 2,
		namespace: 'kg-bench', cluster: null,
	};
	const set = {}; /* given explicitly: wins over --quick's */
	parse_options(argv, USAGE, o, (a, val) => {
		switch (a) {
		case '--sessions': set.sessions = Number(val()); break;
		case '--concurrency': set.concurrency = Number(val()); break;
		case '--duration': set.duration = Number(val()); break;
		case '--warmup': set.warmup = Number(val()); break;
		case '--namespace': o.namespace = val(); break;
		case '--cluster': o.cluster = path.resolve(val()); break;
		default: return false;
		}
		return true;
	});
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

let interrupted = null; /* the signal that asked us to stop, once one has */
let keepLogs = false;    /* something went wrong that the logs may explain: keep them */

/* check_interrupt - throw once a signal asked us to stop, so that main's clean-up runs */
function check_interrupt() {
	if (interrupted) throw new Error(`stopped by ${interrupted}`);
}

/* count - how many members of a f says yes to */
const count = (a, f) => a.filter(f).length;

/* ------------------------------------------------------------------ CPU accounting */

/* sandboxes_cpu - CPU seconds of the sandboxes the agents fixture runs: the trees of its
 * children that are `kode-gopher jail` (jail, agent, go build, the programs), not the fixture's
 * own node process nor its kubectl watch */
function sandboxes_cpu(t, fixturePid) {
	if (!fixturePid || !t.st.has(fixturePid)) return NaN;
	let sum = 0;
	for (const p of t.kids.get(fixturePid) || [])
		if ((proc_read(p, 'cmdline') || '').includes('\0jail\0')) sum += subtree_cpu(t, p);
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
	/* with what processes reaped: a `go build` that came and went inside a window still
	 * counts, in the agent that waited for it */
	const t = proc_table(true);
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

/* cluster_objects - namespace, then packaging/k8s's RuntimeClass gvisor, SandboxTemplate and
 * SandboxWarmPool (main has checked that they exist), the pool scaled to o.replicas */
async function cluster_objects(o, k) {
	const ns = o.namespace;
	const [rc, tpl, wp] = OBJECTS.map((f) => path.join(PACKAGING, f));
	await kubectl(k, ['apply', '-f', '-'], { input: { apiVersion: 'v1', kind: 'Namespace', metadata: { name: ns } } });
	await kubectl(k, ['apply', '-f', rc]);
	await kubectl(k, ['apply', '-f', tpl, '-f', wp], { namespace: ns });
	await kubectl(k, ['patch', 'sandboxwarmpool', POOL, '--type', 'merge', '-p', JSON.stringify({ spec: { replicas: o.replicas } })],
		{ namespace: ns });
	progress(`namespace ${ns}: RuntimeClass gvisor, packaging/k8s/sandbox-template.yaml and warm-pool.yaml; ${POOL} scaled to ${o.replicas} replicas`);
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
const SNIPPET_FIRST = SNIPPET_UPPER;

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

/* serve_env - serve's environment: the cluster's kubeconfig, and a sandbox root of our own */
const serve_env = (k, tmp) => ({ ...process.env, KUBECONFIG: k.kubeconfig, KODE_GOPHER_SANDBOX_ROOT: path.join(tmp, 'sandboxes') });

/* KUBE_ARGS - serve's options for the Kubernetes backend on this cluster */
const KUBE_ARGS = (o) => ['--backend', 'kubernetes', '--namespace', o.namespace, '--agent-access', 'pod-ip',
	'--credentials', 'none', '--runtime-dir', o.runtime];

/* stdio_start - `kode-gopher serve` on pipes: requests are lines on its stdin, answers lines on
 * its stdout; request() resolves with the answer and the time its line arrived */
function stdio_start(o, k, tmp, tag) {
	const c = spawn_logged(`kode-gopher serve (${tag})`, o.run_bin, ['serve', ...KUBE_ARGS(o)], serve_env(k, tmp),
		path.join(tmp, `serve-${tag}.log`), ['pipe', 'pipe', 'pipe']);
	const proc = c.proc;
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

/* metric - one sample of the shared server's /metrics, NaN when it cannot be read (a note in
 * the table, not a reason to stop) */
const metric = (port, name) => kg_metric(port, name).catch(() => NaN);

/* start_http - `serve --http 127.0.0.1:0 --backend kubernetes`, sized for o.concurrency sessions */
async function start_http(o, k, tmp) {
	const argv = ['serve', '--http', '127.0.0.1:0', ...KUBE_ARGS(o),
		'--max-sandboxes-per-user', String(o.concurrency), '--max-workers', String(o.concurrency + 8)];
	const c = spawn_logged('kode-gopher serve --http', o.run_bin, argv, serve_env(k, tmp), path.join(tmp, 'serve-http.log'));
	const port = await serving_port(c);
	c.target = http_target(port, CALL_TIMEOUT_MS, 'kode-gopher-k8sbench');
	progress(`kode-gopher pid ${c.proc.pid} on port ${port}: ${argv.join(' ')}`);
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
				sc = check_result(await rpc(kg.target, sess, 'tools/call', call_params(code(s, i))));
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
	const crashes0 = await metric(kg.target.port, 'kode_gopher_worker_crashes_total');
	const sessions = [];
	for (let i = 0; i < o.concurrency; i++) sessions.push(await open_session(kg.target));
	/* not counted in the rates: each session's first call, all at once, is a snippet that fails
	 * to normalize, so the call is the claim alone (create, watch until Ready, handshake) with no
	 * build competing for the CPU; then the same stdlib snippet in each, all at once: 16 builds */
	progress(`throughput: ${o.concurrency} sessions open; their claims (a first call that does not build) all at once`);
	const n = String(o.concurrency);
	const cm0 = cpu_mark(kg.proc.pid, k);
	const claims = await Promise.all(sessions.map(async (s) => {
		const a = performance.now();
		const res = await rpc(kg.target, s, 'tools/call', call_params(CLAIM_ONLY));
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
		const sc = check_result(await rpc(kg.target, s, 'tools/call', call_params(SNIPPET_FIRST)));
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
	const crashes = (await metric(kg.target.port, 'kode_gopher_worker_crashes_total')) - crashes0;
	let closeErr = null;
	for (const s of sessions) {
		try {
			await close_session(kg.target, s);
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
	const missing = OBJECTS.filter((f) => !fs.existsSync(path.join(PACKAGING, f)));
	if (missing.length)
		die(`packaging/k8s lacks ${missing.join(', ')}: k8sbench runs on the packaged objects (restore them from git)`);
	/* serve and the agents fixture's jails run from a copy of the binary */
	const { tmp, run_bin } = work_dir('k8sbench-', o.bin);
	o.run_bin = run_bin;
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
		term_all_now();
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
	const out = `kode-gopher Kubernetes-backend benchmarks, ${date} UTC: ${machine_line(load0, load1, o.bin, kgVersion)}; ` +
		`test cluster: ${versions}, a jailed kode-gopher agent ` +
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

run_main(main);
