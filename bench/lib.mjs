/*
 * lib.mjs - what httpbench.mjs and k8sbench.mjs share: their progress lines, the numbers and the
 * markdown table they print, CPU time read from /proc, the kode-gopher processes they start and
 * end, and the raw JSON-RPC client of `serve --http` (Streamable HTTP over undici).
 *
 * Imported by bench/httpbench.mjs and bench/k8sbench.mjs only; each calls bench_name() first so
 * that its lines on stderr say whose they are.  Every child started through track() is in
 * `children` until it exits, so that stop_all() and term_all_now() can end what is left.
 */
import { spawn, execFileSync } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { Pool } from 'undici';

import { browse } from '../tests/oidc/provider.mjs';

/* HERE - bench/; ROOT - the repository */
export const HERE = path.dirname(fileURLToPath(import.meta.url));
export const ROOT = path.resolve(HERE, '..');

/* PROTOCOL - the MCP protocol version both benches ask for */
export const PROTOCOL = '2025-11-25';

/* SNIPPET_UPPER - a stdlib snippet (strings.ToUpper), the same each time: the first tools/call
 * of a session, so that each new sandbox does the same build */
export const SNIPPET_UPPER = 'package snippet\n\nimport (\n\t"context"\n\t"strings"\n)\n\n' +
	'func run(ctx context.Context) (any, error) {\n\treturn strings.ToUpper("hello, gopher"), nil\n}\n';

/* ------------------------------------------------------------------ messages */

let me = 'bench'; /* the prefix of every line on stderr */

/* bench_name - the name that prefixes die()'s and progress()'s lines (httpbench, k8sbench) */
export function bench_name(name) {
	me = name;
}

/* die - a sentence on stderr, exit 1 (before anything was started) */
export function die(msg) {
	process.stderr.write(`${me}: ${msg}\n`);
	process.exit(1);
}

/* progress - a line on stderr */
export function progress(msg) {
	process.stderr.write(`${me}: ${msg}\n`);
}

/* sleep - a promise that resolves after ms */
export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/* ------------------------------------------------------------------ options */

/* base_options - the settings every bench has: --quick, --only, --bin and --runtime-dir */
export function base_options() {
	return {
		quick: false, only: null,
		bin: process.env.KODE_GOPHER_BIN || path.join(ROOT, process.env.BUILD || 'build', 'kode-gopher'),
		runtime: process.env.RUNTIME_DIR || process.env.KODE_GOPHER_RUNTIME_DIR || '/var/cache/kode-gopher/runtime',
	};
}

/* parse_options - argv into o: the options of base_options and --help here, any other through
 * own(option, val), which takes its value with val() and returns false for an option it does
 * not know; exits on --help or a bad option */
export function parse_options(argv, usage, o, own) {
	for (let i = 0; i < argv.length; i++) {
		const a = argv[i];
		const val = () => {
			if (i + 1 >= argv.length)
				die(`${a} needs a value\n${usage}`);
			return argv[++i];
		};
		if (a === '--quick') o.quick = true;
		else if (a === '--help' || a === '-h') { process.stdout.write(usage); process.exit(0); }
		else if (a === '--only') o.only = val();
		else if (a === '--bin') o.bin = val();
		else if (a === '--runtime-dir') o.runtime = val();
		else if (!own(a, val)) die(`unknown option ${a}\n${usage}`);
	}
}

/* ------------------------------------------------------------------ numbers */

/* fmt - three significant digits, no exponent (as mcpbench prints) */
export function fmt(v) {
	if (v === null || v === undefined || Number.isNaN(v)) return '-';
	if (Math.abs(v) >= 1000) return String(Math.round(v));
	if (v === 0) return '0';
	return v.toPrecision(3);
}

/* sorted - a sorted copy */
export const sorted = (a) => Float64Array.from(a).sort();

/* pct - nearest-rank percentile of a sorted array */
export function pct(s, p) {
	if (!s.length) return NaN;
	const rank = Math.ceil((p / 100) * s.length);
	return s[Math.max(rank, 1) - 1];
}

/* median - middle value (mean of the middle two for an even n) */
export function median(a) {
	const s = sorted(a);
	if (!s.length) return NaN;
	return s.length % 2 ? s[(s.length - 1) / 2] : (s[s.length / 2 - 1] + s[s.length / 2]) / 2;
}

/* p90 - nearest-rank 90th percentile of an unsorted array */
export const p90 = (a) => pct(sorted(a), 90);

/* table - a markdown table, columns aligned; `right` marks the numeric columns */
export function table(head, rows, right) {
	const cells = rows.map((r) => r.map((v) => (typeof v === 'number' ? fmt(v) : String(v))));
	const w = head.map((h, c) => Math.max(3, [...h].length, ...cells.map((r) => [...r[c]].length)));
	const line = (r) => '|' + r.map((v, c) => {
		const pad = ' '.repeat(w[c] - [...v].length);
		return ' ' + (right[c] ? pad + v : v + pad) + ' |';
	}).join('');
	const sep = '|' + w.map((n, c) => ' ' + (right[c] ? '-'.repeat(n - 1) + ':' : '-'.repeat(n)) + ' |').join('');
	return [line(head), sep, ...cells.map(line)].join('\n') + '\n';
}

/* ------------------------------------------------------------------ /proc */

/* CLK_TCK - the unit of /proc/PID/stat's CPU times */
export const CLK_TCK = (() => {
	try {
		return Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || 100;
	} catch {
		return 100;
	}
})();

/* proc_read - a /proc file, or null when the process is gone */
export function proc_read(pid, file) {
	try {
		return fs.readFileSync(`/proc/${pid}/${file}`, 'utf8');
	} catch {
		return null;
	}
}

/* proc_stat - ppid and CPU seconds from /proc/PID/stat (null when gone): the process's own
 * (utime+stime), plus with `reaped` what its children that it has reaped used (cutime+cstime),
 * so that a `go build` that came and went inside a window still counts, in whoever waited for it */
export function proc_stat(pid, reaped = false) {
	const s = proc_read(pid, 'stat');
	if (!s) return null;
	/* the command name is in parentheses and may hold spaces: fields count from its end */
	const f = s.slice(s.lastIndexOf(')') + 2).split(' ');
	const cpu = Number(f[11]) + Number(f[12]) + (reaped ? Number(f[13]) + Number(f[14]) : 0);
	return { ppid: Number(f[1]), cpu: cpu / CLK_TCK };
}

/* proc_table - every process now: st (pid -> proc_stat) and kids (ppid -> child pids) */
export function proc_table(reaped = false) {
	const kids = new Map();
	const st = new Map();
	for (const d of fs.readdirSync('/proc')) {
		if (!/^\d+$/.test(d)) continue;
		const x = proc_stat(d, reaped);
		if (!x) continue;
		st.set(Number(d), x);
		if (!kids.has(x.ppid)) kids.set(x.ppid, []);
		kids.get(x.ppid).push(Number(d));
	}
	return { st, kids };
}

/* proc_tree - root and all its descendants in a proc_table, root first */
export function proc_tree({ kids }, root) {
	const out = [root];
	for (let i = 0; i < out.length; i++)
		for (const k of kids.get(out[i]) || []) out.push(k);
	return out;
}

/* subtree_cpu - CPU seconds of the living processes below and including root */
export function subtree_cpu(t, root) {
	let sum = 0;
	for (const p of proc_tree(t, root)) sum += t.st.get(p)?.cpu || 0;
	return sum;
}

/* ------------------------------------------------------------------ children */

export const children = new Set(); /* every process started through track(), until it has exited */

/* track - remember a started child until it exits; c.done resolves then, c.status says how */
export function track(name, proc) {
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

/* child_stop - SIGTERM (kode-gopher then ends its sessions, their sandboxes or claims), SIGKILL
 * after 60 s; then its HTTP client's connections go */
export async function child_stop(c) {
	if (c.exited) return;
	c.proc.kill('SIGTERM');
	const killer = setTimeout(() => {
		progress(`${c.name} (pid ${c.proc.pid}) did not end within 60 s of SIGTERM: killing it`);
		c.proc.kill('SIGKILL');
	}, 60000);
	await c.done;
	clearTimeout(killer);
	if (c.target) c.target.pool.destroy().catch(() => {});
}

/* stop_all - end every child still running */
export const stop_all = () => Promise.all([...children].map(child_stop));

/* term_all_now - SIGTERM every child still running, for an exit hook (nothing async runs there) */
export function term_all_now() {
	for (const c of children) c.proc.kill('SIGTERM');
}

/* log_stderr - a child's stderr to a file; its warn and error lines also kept on c.problems */
export function log_stderr(c, file) {
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

/* spawn_logged - start bin (kode-gopher) with argv and env, tracked, its stderr logged to log */
export function spawn_logged(name, bin, argv, env, log, stdio = ['ignore', 'ignore', 'pipe']) {
	const proc = spawn(bin, argv, { env, stdio });
	const c = track(name, proc);
	log_stderr(c, log);
	proc.on('error', (e) => progress(`cannot start ${bin}: ${e.message}`));
	return c;
}

/* wait_line - resolve with the first match of re in a child's stderr, reject on exit/timeout */
export function wait_line(c, re, what, ms) {
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

/* serving_port - the port of a `serve --http 127.0.0.1:0`, once its log says it */
export async function serving_port(c) {
	const m = await wait_line(c, /serving MCP on http:\/\/127\.0\.0\.1:(\d+)\/mcp/, 'its "serving MCP on" line', 20000);
	return Number(m[1]);
}

/* ------------------------------------------------------------------ MCP over HTTP */

/* http_target - where requests go: a loopback port with its own pool of keep-alive connections
 * (one per session in flight: each session is a closed loop, so it never has two requests out),
 * the time a request may take, and the clientInfo name initialize sends */
export function http_target(port, timeout, client) {
	return { port, timeout, client, pool: new Pool(`http://127.0.0.1:${port}`, { connections: null, pipelining: 1 }) };
}

/* sse_answer - the JSON-RPC response with this id among the events of a text/event-stream body */
export function sse_answer(text, id) {
	for (const ev of text.split(/\r?\n\r?\n/)) {
		const data = ev.split(/\r?\n/).filter((l) => l.startsWith('data:')).map((l) => l.slice(5).replace(/^ /, '')).join('\n');
		if (!data) continue;
		const msg = JSON.parse(data);
		if (msg.id === id) return msg;
	}
	return null;
}

/* post - one HTTP request to /mcp; resolves with status, headers, the parsed answer and its size */
export async function post(t, method, body, sid, id) {
	const headers = { 'content-type': 'application/json', accept: 'application/json, text/event-stream' };
	if (t.token)
		headers.authorization = `Bearer ${t.token}`;
	if (sid) {
		headers['mcp-session-id'] = sid;
		headers['mcp-protocol-version'] = PROTOCOL;
	}
	const res = await t.pool.request({
		path: '/mcp', method, headers, body: body === null ? undefined : body,
		headersTimeout: t.timeout, bodyTimeout: t.timeout,
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
	return { status: res.statusCode, headers: res.headers, msg, bytes: text.length, text };
}

/* rpc - a JSON-RPC request in a session; resolves with the result (its size in sess.bytes),
 * rejects with a sentence */
export async function rpc(t, sess, method, params) {
	const id = ++sess.seq;
	const r = await post(t, 'POST', JSON.stringify({ jsonrpc: '2.0', id, method, params }), sess.sid, id);
	if (r.status !== 200 || !r.msg) throw new Error(`${method}: HTTP ${r.status}: ${r.text.slice(0, 200)}`);
	if (r.msg.error) throw new Error(`${method}: JSON-RPC error ${r.msg.error.code}: ${r.msg.error.message}`);
	if (r.msg.id !== id || r.msg.result === undefined) throw new Error(`${method}: an answer that is not the result of request ${id}`);
	sess.bytes = r.bytes;
	return r.msg.result;
}

/* open_session - initialize (no session id: the server hands one out), then notifications/initialized */
export async function open_session(t) {
	const body = JSON.stringify({
		jsonrpc: '2.0', id: 0, method: 'initialize',
		params: { protocolVersion: PROTOCOL, capabilities: {}, clientInfo: { name: t.client, version: '1' } },
	});
	const r = await post(t, 'POST', body, null, 0);
	const sid = r.headers['mcp-session-id'];
	if (r.status !== 200 || !r.msg || !r.msg.result || !sid)
		throw new Error(`initialize: HTTP ${r.status}${sid ? '' : ', no Mcp-Session-Id'}: ${r.text.slice(0, 300)}`);
	const n = await post(t, 'POST', JSON.stringify({ jsonrpc: '2.0', method: 'notifications/initialized' }), sid, undefined);
	if (n.status !== 202 && n.status !== 200)
		throw new Error(`notifications/initialized: HTTP ${n.status}: ${n.text.slice(0, 200)}`);
	return { sid, seq: 0 };
}

/* close_session - DELETE the session (kode-gopher's worker then ends its sandbox or claim) */
export async function close_session(t, sess) {
	const r = await post(t, 'DELETE', null, sess.sid, undefined);
	if (r.status !== 200 && r.status !== 204)
		throw new Error(`DELETE: HTTP ${r.status}: ${r.text.slice(0, 200)}`);
}

/* ------------------------------------------------------------------ sign-in */

/* sign_in - one whole sign-in to a `serve --http --auth google` at base (http://127.0.0.1:PORT),
 * as an MCP client does it against the tests' OpenID provider idp (tests/oidc/provider.mjs):
 * client registration, /authorize with PKCE, the provider's login form, the callback, the token
 * request.  Resolves {total, token, access}: the whole round trip and the token request alone in
 * ms, and the access token; rejects with a sentence */
export async function sign_in(base, idp, user, password) {
	const redirect = 'http://127.0.0.1:41999/cb';
	const verifier = randomBytes(32).toString('base64url');
	const challenge = createHash('sha256').update(verifier).digest('base64url');
	const t0 = performance.now();
	const reg = await (await fetch(`${base}/register`, { method: 'POST', headers: { 'content-type': 'application/json' },
		body: JSON.stringify({ client_name: `${me}`, redirect_uris: [redirect], token_endpoint_auth_method: 'none' }) })).json();
	const u = new URL(`${base}/authorize`);
	for (const [k, v] of Object.entries({ response_type: 'code', client_id: reg.client_id, redirect_uri: redirect,
		code_challenge: challenge, code_challenge_method: 'S256', state: 's', resource: `${base}/mcp` }))
		u.searchParams.set(k, v);
	const back = await browse(u, { username: user, password }, { server: base, issuer: idp.issuer });
	if (!back.location)
		throw new Error(`sign-in did not come back: ${back.status} ${back.body?.slice(0, 300)}`);
	const t1 = performance.now();
	const tok = await (await fetch(`${base}/token`, { method: 'POST', body: new URLSearchParams({ grant_type: 'authorization_code',
		code: back.location.searchParams.get('code'), redirect_uri: redirect, client_id: reg.client_id, code_verifier: verifier }) })).json();
	const t2 = performance.now();
	if (!tok.access_token)
		throw new Error(`no token: ${JSON.stringify(tok)}`);
	return { total: t2 - t0, token: t2 - t1, access: tok.access_token };
}

/* kg_metrics - a kode-gopher serve's /metrics as text */
export function kg_metrics(port) {
	return new Promise((resolve, reject) => {
		const req = http.get({ host: '127.0.0.1', port, path: '/metrics', agent: false }, (res) => {
			let s = '';
			res.setEncoding('utf8');
			res.on('data', (d) => (s += d));
			res.on('end', () => resolve(s));
		});
		req.setTimeout(10000, () => req.destroy(new Error('/metrics did not answer within 10 s')));
		req.on('error', reject);
	});
}

/* kg_metric - one sample of /metrics (the first line that starts with name), NaN if none */
export async function kg_metric(port, name) {
	const m = (await kg_metrics(port)).split('\n').find((l) => l.startsWith(name + ' '));
	return m ? Number(m.slice(name.length + 1)) : NaN;
}

/* ------------------------------------------------------------------ the run */

/* version_of - a command's first line, or "?" */
export function version_of(cmd, args) {
	try {
		return execFileSync(cmd, args, { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] }).split('\n')[0].trim();
	} catch {
		return '?';
	}
}

/* work_dir - a new temporary directory (prefix-XXXXXX) that jailed sandboxes and agents, which
 * run as other uids, can walk through, holding a copy of bin: a rebuild of the binary during
 * the run (a shared machine) then changes nothing, as serve and the jails bind their own
 * binary.  Returns { tmp, run_bin } */
export function work_dir(prefix, bin) {
	const tmp = fs.mkdtempSync(path.join(os.tmpdir(), prefix));
	fs.chmodSync(tmp, 0o711);
	const run_bin = path.join(tmp, 'kode-gopher');
	fs.copyFileSync(bin, run_bin);
	fs.chmodSync(run_bin, 0o755);
	return { tmp, run_bin };
}

/* machine_line - the header's account of the machine and the binary: CPUs, load averages at
 * start and end, node, bin and its version (version_of, "?" when unknown) */
export function machine_line(load0, load1, bin, version) {
	return `${os.cpus().length} CPUs, load average ${load0.toFixed(2)} at start, ${load1.toFixed(2)} at end; ` +
		`node ${process.version}; ${path.relative(ROOT, bin) || bin}${version !== '?' ? ` (${version}, run from a copy)` : ''}`;
}

/* run_main - run a bench's main; an exception it lets through is said, the children ended, exit 1 */
export function run_main(main) {
	main().catch(async (e) => {
		progress(`failed: ${e.stack || e.message}`);
		await stop_all();
		process.exit(1);
	});
}
