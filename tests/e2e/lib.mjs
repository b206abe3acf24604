/*
 * lib.mjs - shared helpers of the end-to-end and security tests: start the real
 * `kode-gopher serve` over stdio, talk to it with the official MCP TypeScript SDK client (or raw
 * bytes), find its processes in /proc, and make sure nothing is left running after a test.
 *
 * Imported by tests/e2e/*.test.mjs and tests/security/*.test.mjs (as '../e2e/lib.mjs': the SDK
 * lives in tests/e2e/node_modules, so other suites get it through the re-exports here).
 * Importing this module installs the leftover-process guard (afterEach/after hooks of node:test).
 *
 * Environment: KODE_GOPHER_BIN (the binary; default <repo>/build/kode-gopher),
 * KODE_GOPHER_RUNTIME_DIR (the Go caches; passed through to serve).
 */
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { after, afterEach, before, beforeEach } from 'node:test';
import { fileURLToPath } from 'node:url';

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import {
	CallToolResultSchema,
	ErrorCode,
	LATEST_PROTOCOL_VERSION,
	McpError,
} from '@modelcontextprotocol/sdk/types.js';

export {
	CallToolResultSchema, Client, ErrorCode, LATEST_PROTOCOL_VERSION, McpError, StdioClientTransport,
	StreamableHTTPClientTransport,
};

const here = path.dirname(fileURLToPath(import.meta.url));
export const REPO = path.resolve(here, '..', '..');

/* BIN - the binary under test: KODE_GOPHER_BIN, else <repo>/build/kode-gopher */
export const BIN = process.env.KODE_GOPHER_BIN || path.join(REPO, 'build', 'kode-gopher');

/* Builds of the Google Cloud libraries can take minutes on 2 cores when the cache is cold. */
export const CALL_TIMEOUT_MS = 180_000;

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/*
 * run - a command (the binary by default: cmd BIN) to its end with the test's environment plus
 * env, less the node:test variables and the names in drop; stdin is input (or empty); resolves
 * {code, stdout, stderr}; past timeout ms it is killed and the promise rejects with the tail of
 * its stderr.
 */
export function run(args, { cmd = BIN, input, cwd, env: extra = {}, drop = [], timeout = 180_000 } = {}) {
	return new Promise((resolve, reject) => {
		const env = { ...process.env, ...extra };
		for (const k of ['NODE_TEST_CONTEXT', 'NODE_OPTIONS', 'NODE_CHANNEL_FD', ...drop])
			delete env[k];
		const child = spawn(cmd, args, { env, cwd, stdio: ['pipe', 'pipe', 'pipe'] });
		let stdout = '';
		let stderr = '';
		child.stdout.on('data', (d) => (stdout += d));
		child.stderr.on('data', (d) => (stderr += d));
		const timer = setTimeout(() => {
			child.kill('SIGKILL');
			reject(new Error(`${path.basename(cmd)} ${args.join(' ')} ran past ${timeout} ms; stderr: ${stderr.slice(-2000)}`));
		}, timeout);
		child.on('error', reject);
		child.on('close', (code) => {
			clearTimeout(timer);
			resolve({ code, stdout, stderr });
		});
		child.stdin.on('error', () => { /* it may not read stdin */ });
		child.stdin.end(input ?? '');
	});
}

/* waitFor - poll fn until it returns something truthy; returns it, or throws after timeoutMs */
export async function waitFor(fn, { timeout = 10_000, interval = 50, what = 'condition' } = {}) {
	const until = Date.now() + timeout;
	for (;;) {
		const v = await fn();
		if (v)
			return v;
		if (Date.now() >= until)
			throw new Error(`timed out after ${timeout} ms waiting for ${what}`);
		await sleep(interval);
	}
}

/* ---- /proc ---- */

/* cmdline - a process's command line with NULs as spaces, trimmed; null if it is gone */
export function cmdline(pid) {
	try {
		return fs.readFileSync(`/proc/${pid}/cmdline`).toString('latin1').replace(/\0+/g, ' ').trim();
	} catch {
		return null;
	}
}

/* procStat - {pid, comm, state, ppid, start} from /proc/PID/stat; null if it is gone.
 * start (clock ticks after boot) tells a process from a later one that reused its pid. */
export function procStat(pid) {
	let s;
	try {
		s = fs.readFileSync(`/proc/${pid}/stat`, 'latin1');
	} catch {
		return null;
	}
	const close = s.lastIndexOf(')');
	const rest = s.slice(close + 2).split(' ');
	return {
		pid: Number(pid), comm: s.slice(s.indexOf('(') + 1, close), state: rest[0], ppid: Number(rest[1]),
		start: rest[19],
	};
}

/* procStatus - /proc/PID/status as an object of strings (VmRSS: "1234 kB", ...); null if gone */
export function procStatus(pid) {
	try {
		const o = {};
		for (const line of fs.readFileSync(`/proc/${pid}/status`, 'latin1').split('\n')) {
			const i = line.indexOf(':');
			if (i > 0)
				o[line.slice(0, i)] = line.slice(i + 1).trim();
		}
		return o;
	} catch {
		return null;
	}
}

/* memKiB - a /proc/PID/status memory field (VmHWM, VmRSS, ...) in KiB; null if unknown */
export function memKiB(pid, field = 'VmHWM') {
	const st = procStatus(pid);
	const m = st && st[field] && /^(\d+)\s*kB/.exec(st[field]);
	return m ? Number(m[1]) : null;
}

/* isAlive - the process exists and is not a zombie */
export function isAlive(pid) {
	const st = procStat(pid);
	return !!st && st.state !== 'Z' && st.state !== 'X';
}

/* allProcs - every process on the machine as procStat entries */
export function allProcs() {
	const out = [];
	for (const name of fs.readdirSync('/proc')) {
		if (!/^\d+$/.test(name))
			continue;
		const st = procStat(name);
		if (st)
			out.push(st);
	}
	return out;
}

/* children - direct children of pid */
export function children(pid) {
	return allProcs().filter((p) => p.ppid === pid).map((p) => p.pid);
}

/* descendants - every process below pid (not pid itself) */
export function descendants(pid) {
	const procs = allProcs();
	const out = [];
	const todo = [pid];
	while (todo.length) {
		const p = todo.pop();
		for (const c of procs)
			if (c.ppid === p && !out.includes(c.pid)) {
				out.push(c.pid);
				todo.push(c.pid);
			}
	}
	return out;
}

/* isWorkerCmdline - the worker as started ("... worker ...") or after its title rewrite */
function isWorkerCmdline(cl) {
	return !!cl && (cl.startsWith('kode-gopher: worker') || ` ${cl} `.includes(' worker '));
}

/* workerPid - the worker child of a serve process, or null */
export function workerPid(servePid) {
	for (const c of children(servePid))
		if (isWorkerCmdline(cmdline(c)) && isAlive(c))
			return c;
	return null;
}

/* workerState - "idle", "busy", ... from the worker's process title; null if not rewritten yet */
export function workerState(pid) {
	const cl = cmdline(pid);
	const m = cl && /^kode-gopher: worker .*\b(idle|busy|closing|starting|\w+)$/.exec(cl);
	return m ? m[1] : null;
}

/* procsMatching - pids whose cmdline, cwd or environ mentions needle */
export function procsMatching(needle) {
	const out = [];
	for (const { pid } of allProcs()) {
		if (pid === process.pid)
			continue;
		let hit = (cmdline(pid) || '').includes(needle);
		if (!hit) {
			try {
				hit = fs.readlinkSync(`/proc/${pid}/cwd`).startsWith(needle);
			} catch { /* gone or not ours to read */ }
		}
		if (!hit) {
			try {
				hit = fs.readFileSync(`/proc/${pid}/environ`).includes(needle);
			} catch { /* idem */ }
		}
		if (hit && isAlive(pid))
			out.push(pid);
	}
	return out;
}

/* ---- process bookkeeping: nothing a test started outlives it ---- */

const live = new Set();  /* every handle (SDK or raw) not yet cleaned */
let fresh = [];          /* handles created since the last afterEach */

/* footprint - every process that belongs to a handle right now */
function footprint(h) {
	const pids = new Set();
	if (h.pid && isAlive(h.pid)) {
		pids.add(h.pid);
		for (const d of descendants(h.pid))
			pids.add(d);
	}
	for (const p of procsMatching(h.sandboxRoot))
		pids.add(p);
	for (const p of procsMatching(h.marker))
		pids.add(p);
	pids.delete(process.pid);
	return [...pids];
}

/* identify - pids as {pid, start}, so a pid reused later is never taken for ours */
function identify(pids) {
	return pids.map((pid) => ({ pid, start: procStat(pid)?.start })).filter((e) => e.start);
}

/* stillOurs - the entries whose process is alive and still the same process */
function stillOurs(entries) {
	return entries.filter((e) => {
		const st = procStat(e.pid);
		return st && st.start === e.start && st.state !== 'Z' && st.state !== 'X';
	});
}

/* reap - close one handle, then SIGKILL whatever of it is still alive; returns the survivors */
async function reap(h, why) {
	if (h.reaped)
		return [];
	h.reaped = true;
	live.delete(h);
	const before = identify(footprint(h));
	try {
		await Promise.race([h.shutdown(), sleep(5000)]);
	} catch { /* closing is best effort here */ }
	const survivors = () => {
		const seen = new Map(before.map((e) => [e.pid, e]));
		for (const e of identify(footprint(h)))
			seen.set(e.pid, e);
		return stillOurs([...seen.values()]);
	};
	const left = await waitFor(() => (survivors().length === 0 ? [] : null), { timeout: 3000, what: 'exit' })
		.catch(() => survivors());
	for (const { pid } of left) {
		process.stderr.write(`# e2e guard (${why}): killing leftover pid ${pid}: ${cmdline(pid)}\n`);
		try {
			process.kill(pid, 'SIGKILL');
		} catch { /* already gone */ }
	}
	removeTree(h.sandboxRoot);
	return left.map((e) => e.pid);
}

/* removeTree - rm -rf, coping with the read-only directories of Go's module cache */
function removeTree(dir) {
	if (!dir || !dir.startsWith(os.tmpdir()))
		return;
	try {
		fs.rmSync(dir, { recursive: true, force: true });
	} catch {
		spawnSync('chmod', ['-R', 'u+w', dir]);
		try {
			fs.rmSync(dir, { recursive: true, force: true });
		} catch { /* leave it to the OS */ }
	}
}

/* logTail - a failed test shows what the server said while it ran (debug lines left out) */
function logTail(h, why) {
	const all = h.stderrText ? h.stderrText() : '';
	const mine = all.slice(h.mark && h.mark <= all.length ? h.mark : 0);
	const lines = mine.split('\n').filter((l) => l && !/\bdebug\b/.test(l.slice(0, 40)));
	const errs = (h.clientErrors || []).map((e) => `#   client error: ${e}`);
	if (lines.length === 0 && errs.length === 0)
		return;
	process.stderr.write(`# serve ${h.pid} stderr (${why}), last lines:\n` +
		[...lines.slice(-40).map((l) => `#   ${l.slice(0, 400)}`), ...errs].join('\n') + '\n');
}

beforeEach(() => {
	for (const h of live)
		h.mark = h.stderrText ? h.stderrText().length : 0;
});

afterEach(async (t) => {
	const mine = fresh;
	fresh = [];
	if (t && t.passed === false)
		for (const h of live)
			logTail(h, `test "${t.name}" failed`);
	for (const h of mine)
		if (!h.keep)
			await reap(h, 'after test');
});

after(async () => {
	for (const h of [...live])
		await reap(h, 'end of file');
});

process.on('exit', () => {
	for (const h of live)
		for (const p of footprint(h))
			try {
				process.kill(p, 'SIGKILL');
			} catch { /* gone */ }
});

/* serveEnv - the environment serve gets: ours minus the test runner's, plus the session's */
function serveEnv(sandboxRoot, marker, extra) {
	const env = { ...process.env };
	for (const k of ['NODE_TEST_CONTEXT', 'NODE_OPTIONS', 'NODE_CHANNEL_FD', 'NODE_CHANNEL_SERIALIZATION_MODE'])
		delete env[k];
	return { ...env, KODE_GOPHER_SANDBOX_ROOT: sandboxRoot, KG_E2E_MARKER: marker, ...extra };
}

function newHandle(keep) {
	const sandboxRoot = fs.mkdtempSync(path.join(os.tmpdir(), 'kg-e2e-'));
	const h = { sandboxRoot, marker: `kg-e2e-${randomUUID()}`, keep: !!keep, reaped: false, pid: null };
	live.add(h);
	fresh.push(h);
	return h;
}

/* ---- the SDK client ---- */

/*
 * connect - start `kode-gopher serve --log-level debug` and connect the SDK client to it.
 *   opts.args        extra serve arguments
 *   opts.env         extra environment
 *   opts.keep        true: the session outlives the test (closed by the end-of-file hook or by
 *                    close()); default false: closed after the test that opened it
 *   opts.listTools   true (default): call tools/list once, so the client validates
 *                    structuredContent against each tool's outputSchema
 *   opts.clientInfo  {name, version}
 * Returns {client, transport, pid, stderr (text so far), sandboxRoot, closed, close()}.
 */
export async function connect(opts = {}) {
	const h = newHandle(opts.keep);
	const transport = new StdioClientTransport({
		command: BIN,
		args: ['serve', '--log-level', 'debug', ...(opts.args || [])],
		env: serveEnv(h.sandboxRoot, h.marker, opts.env),
		stderr: 'pipe',
	});
	let stderr = '';
	transport.stderr.on('data', (d) => {
		stderr += d.toString();
		if (stderr.length > 8 << 20)
			stderr = stderr.slice(-(4 << 20));
	});
	const client = new Client(opts.clientInfo || { name: 'kode-gopher-e2e', version: '1.0.0' }, {
		capabilities: {},
	});
	h.shutdown = () => transport.close();
	h.stderrText = () => stderr;
	let closed = false;
	transport.onclose = () => {
		closed = true; /* the SDK chains its own handler after this one */
	};
	/* what the SDK could not make sense of (for instance a line of stdout that is not JSON) */
	h.clientErrors = [];
	transport.onerror = (e) => {
		if (h.clientErrors.length < 20)
			h.clientErrors.push(String(e?.message || e).replace(/\s+/g, " ").slice(0, 500));
	};
	try {
		await client.connect(transport);
	} catch (e) {
		await reap(h, 'connect failed');
		throw new Error(`cannot connect to ${BIN} serve: ${e.message}\n${stderr.slice(-3000)}`);
	}
	h.pid = transport.pid;
	if (opts.listTools !== false)
		await client.listTools();
	return {
		client,
		transport,
		pid: h.pid,
		sandboxRoot: h.sandboxRoot,
		get stderr() {
			return stderr;
		},
		/* true once the server's stdout closed (it exited or crashed) */
		get closed() {
			return closed;
		},
		close: () => reap(h, 'close'),
	};
}

/*
 * sharedSession - one session for a whole test file, as one model would use it: opened before the
 * first test, closed after the last. Returns live(), which gives that session, or a fresh one if
 * a test killed it (that test fails on its own; onFresh runs then). live.is(s): is s the shared
 * session?
 */
export function sharedSession({ onFresh } = {}) {
	let session;
	const live = async () => {
		if (!session || session.closed) {
			await session?.close();
			session = await connect({ keep: true });
			onFresh?.();
		}
		return session;
	};
	live.is = (s) => s !== undefined && s === session;
	before(live);
	after(async () => {
		await session?.close();
	});
	return live;
}

/*
 * callTool - tools/call through the SDK with a generous timeout.
 *   opts.timeout     ms (default CALL_TIMEOUT_MS); opts.onprogress as in the SDK
 */
export function callTool(client, name, args, opts = {}) {
	const { timeout = CALL_TIMEOUT_MS, ...rest } = opts;
	return client.callTool({ name, arguments: args }, CallToolResultSchema, { timeout, ...rest });
}

/* text - the text blocks of a tool result, joined */
export function text(result) {
	return (result?.content || []).filter((c) => c.type === 'text').map((c) => c.text).join('\n');
}

/* sc - a tool result's structuredContent */
export function sc(result) {
	return result?.structuredContent;
}

/* execGo - execute_go_code in session s (a connect() result); [result, structuredContent],
 * asserting there is a structuredContent */
export async function execGo(s, args, opts) {
	const res = await callTool(s.client, 'execute_go_code', args, opts);
	const st = sc(res);
	assert.ok(st, `no structuredContent: ${text(res).slice(0, 1000)}`);
	return [res, st];
}

/* show - a result for an assertion message, cut to max characters */
export const show = (s, max = 1500) => JSON.stringify(s).slice(0, max);

/* ---- raw stdio: arbitrary bytes in, newline-delimited JSON out ---- */

/*
 * rawSession - spawn serve with child_process; for input the SDK would never send.
 *   args: extra serve arguments; opts.env: extra environment; opts.keep as for connect.
 * Returns an object with:
 *   write(bytes)          raw bytes (string or Buffer) to stdin, resolved when written
 *   send(obj)             JSON.stringify(obj) + "\n"
 *   next({timeout, match})   the next unread message (optionally the first matching one)
 *   response(id, {timeout})  the response whose id equals id
 *   request(method, params, {timeout})  send with a fresh integer id, await its response
 *   initialize(version)   the initialize handshake (+ notifications/initialized)
 *   messages              everything parsed so far; lines: raw lines; stderr: text
 *   endStdin(), exited (promise of {code, signal}), close()
 */
export function rawSession(args = [], opts = {}) {
	const h = newHandle(opts.keep);
	const child = spawn(BIN, ['serve', '--log-level', 'debug', ...args], {
		env: serveEnv(h.sandboxRoot, h.marker, opts.env),
		stdio: ['pipe', 'pipe', 'pipe'],
	});
	h.pid = child.pid;
	h.stderrText = () => s.stderr;
	const s = {
		child,
		pid: child.pid,
		sandboxRoot: h.sandboxRoot,
		messages: [],
		lines: [],
		stderr: '',
		nextId: 1000,
		cursor: 0,
	};
	let buf = '';
	let waiters = [];
	child.stdout.on('data', (d) => {
		buf += d.toString();
		let i;
		while ((i = buf.indexOf('\n')) >= 0) {
			const line = buf.slice(0, i);
			buf = buf.slice(i + 1);
			s.lines.push(line);
			let msg;
			try {
				msg = JSON.parse(line);
			} catch {
				msg = { __unparsable: line };
			}
			s.messages.push(msg);
		}
		const w = waiters;
		waiters = [];
		w.forEach((f) => f());
	});
	child.stderr.on('data', (d) => {
		s.stderr += d.toString();
		if (s.stderr.length > 8 << 20)
			s.stderr = s.stderr.slice(-(4 << 20));
	});
	child.stdin.on('error', () => { /* the server may close first; tests look at responses */ });
	s.exited = new Promise((resolve) => child.on('exit', (code, signal) => resolve({ code, signal })));
	child.on('exit', () => {
		const w = waiters;
		waiters = [];
		w.forEach((f) => f());
	});

	s.write = (bytes) => new Promise((resolve, reject) => {
		if (!child.stdin.writable)
			return reject(new Error('serve stdin is closed'));
		child.stdin.write(bytes, (err) => (err ? reject(err) : resolve()));
	});
	s.send = (obj) => s.write(JSON.stringify(obj) + '\n');
	/* next - wait for an unread message (that matches); consumed messages are skipped later */
	s.next = async ({ timeout = 10_000, match = () => true } = {}) => {
		const until = Date.now() + timeout;
		for (;;) {
			for (let i = s.cursor; i < s.messages.length; i++) {
				const m = s.messages[i];
				if (!m.__consumed && match(m)) {
					Object.defineProperty(m, '__consumed', { value: true, enumerable: false });
					while (s.cursor < s.messages.length && s.messages[s.cursor].__consumed)
						s.cursor++;
					return m;
				}
			}
			const left = until - Date.now();
			if (left <= 0 || child.exitCode !== null || child.signalCode !== null) {
				if (left > 0)
					await sleep(20); /* let the last stdout chunk land */
				const got = s.messages.slice(-5).map((m) => JSON.stringify(m).slice(0, 300)).join('\n  ');
				throw new Error(`no matching message within ${timeout} ms` +
					(child.exitCode !== null ? ` (serve exited with ${child.exitCode})` : '') +
					`; last messages:\n  ${got}\nstderr tail:\n${s.stderr.slice(-2000)}`);
			}
			await new Promise((resolve) => {
				const t = setTimeout(resolve, left);
				waiters.push(() => {
					clearTimeout(t);
					resolve();
				});
			});
		}
	};
	s.response = (id, o = {}) =>
		s.next({ ...o, match: (m) => ('result' in m || 'error' in m) && m.id === id });
	s.request = async (method, params, o = {}) => {
		const id = s.nextId++;
		const msg = { jsonrpc: '2.0', id, method };
		if (params !== undefined)
			msg.params = params;
		await s.send(msg);
		return s.response(id, o);
	};
	s.initialize = async (version = LATEST_PROTOCOL_VERSION) => {
		const r = await s.request('initialize', {
			protocolVersion: version,
			capabilities: {},
			clientInfo: { name: 'kode-gopher-e2e-raw', version: '1.0.0' },
		});
		await s.send({ jsonrpc: '2.0', method: 'notifications/initialized' });
		return r;
	};
	s.endStdin = () => child.stdin.end();
	h.shutdown = async () => {
		if (child.exitCode !== null || child.signalCode !== null)
			return;
		child.stdin.end();
		const done = await Promise.race([s.exited.then(() => true), sleep(3000).then(() => false)]);
		if (!done) {
			child.kill('SIGKILL');
			await s.exited;
		}
	};
	s.close = () => reap(h, 'close');
	return s;
}

/* jsonrpcLine - a JSON-RPC request line of about `size` bytes, id first or last */
export function bigRequestLine(id, size, { idFirst = false } = {}) {
	const pad = 'x'.repeat(size);
	const params = { name: 'execute_go_code', arguments: { code: `package p\n// ${pad}\n` } };
	const body = idFirst
		? { id, jsonrpc: '2.0', method: 'tools/call', params }
		: { jsonrpc: '2.0', method: 'tools/call', params, id };
	return JSON.stringify(body) + '\n';
}

/* ---- the shared server: serve --http ---- */

/*
 * httpServe - start `kode-gopher serve --http 127.0.0.1:0 --log-level info` with a private
 * temporary KODE_GOPHER_SANDBOX_ROOT, and wait for the line that names its port.
 *   args: extra serve arguments (--session-timeout 2s, ...); opts.env, opts.keep as for connect.
 * Returns {pid, port, base ("http://127.0.0.1:PORT"), url (base + "/mcp"), sandboxRoot, stderr,
 * exited, connect(opts), close()}. connect opens an SDK client session over Streamable HTTP:
 * {client, transport, sessionId, errors}; the server's close() closes those clients first, then
 * SIGTERMs serve (SIGKILL after 5 s), and returns the pids the guard had to kill.
 */
export async function httpServe(args = [], opts = {}) {
	const h = newHandle(opts.keep);
	const child = spawn(BIN, ['serve', '--http', '127.0.0.1:0', '--log-level', 'info', ...args], {
		env: serveEnv(h.sandboxRoot, h.marker, opts.env),
		stdio: ['ignore', 'ignore', 'pipe'],
	});
	h.pid = child.pid;
	let stderr = '';
	child.stderr.on('data', (d) => {
		stderr += d.toString();
		if (stderr.length > 8 << 20)
			stderr = stderr.slice(-(4 << 20));
	});
	h.stderrText = () => stderr;
	const exited = new Promise((resolve) => child.on('exit', (code, signal) => resolve({ code, signal })));
	const clients = [];
	h.shutdown = async () => {
		for (const c of clients)
			await c.transport.close().catch(() => {});
		if (child.exitCode !== null || child.signalCode !== null)
			return;
		child.kill('SIGTERM');
		if (!await Promise.race([exited.then(() => true), sleep(5000).then(() => false)])) {
			child.kill('SIGKILL');
			await exited;
		}
	};
	let port;
	try {
		port = await waitFor(() => {
			if (child.exitCode !== null || child.signalCode !== null)
				throw new Error(`serve --http exited early (${child.exitCode ?? child.signalCode})`);
			const m = /serving MCP on https?:\/\/127\.0\.0\.1:(\d+)\/mcp/.exec(stderr);
			return m ? Number(m[1]) : null;
		}, { timeout: 20_000, what: 'serve --http to name its port' });
	} catch (e) {
		await reap(h, 'start failed');
		throw new Error(`${e.message}\n${stderr.slice(-3000)}`);
	}
	const base = `http://127.0.0.1:${port}`;
	return {
		pid: child.pid,
		port,
		base,
		url: `${base}/mcp`,
		sandboxRoot: h.sandboxRoot,
		exited,
		get stderr() {
			return stderr;
		},
		/* connect - an SDK client session; opts.listTools as for the stdio connect (default true) */
		async connect(o = {}) {
			const transport = new StreamableHTTPClientTransport(new URL(`${base}/mcp`));
			const client = new Client(o.clientInfo || { name: 'kode-gopher-e2e-http', version: '1.0.0' },
				{ capabilities: {} });
			const errors = [];
			transport.onerror = (e) => errors.push(String(e?.message || e));
			clients.push({ transport });
			await client.connect(transport);
			if (o.listTools !== false)
				await client.listTools();
			return {
				client, transport, errors,
				get sessionId() {
					return transport.sessionId;
				},
			};
		},
		close: () => reap(h, 'close'),
	};
}

/*
 * httpRequest - one raw HTTP request with node:http (unlike fetch, it may set Host).
 *   opts: {method (GET), path (/mcp), headers, body (string, Buffer or object sent as JSON)}
 * Resolves {status, headers (lower-case names), body (text), json (parsed body or undefined)}.
 */
export function httpRequest(port, opts = {}) {
	let body = opts.body;
	const headers = { ...(opts.headers || {}) };
	if (body !== undefined && typeof body !== 'string' && !Buffer.isBuffer(body)) {
		body = JSON.stringify(body);
		headers['content-type'] ??= 'application/json';
	}
	return new Promise((resolve, reject) => {
		const req = http.request({
			host: '127.0.0.1', port, method: opts.method || 'GET', path: opts.path || '/mcp', headers,
			agent: false,
		}, (res) => {
			const chunks = [];
			res.on('data', (c) => chunks.push(c));
			res.on('end', () => {
				const text = Buffer.concat(chunks).toString();
				let json;
				try {
					json = JSON.parse(text);
				} catch { /* not JSON */ }
				resolve({ status: res.statusCode, headers: res.headers, body: text, json });
			});
			res.on('error', reject);
		});
		req.on('error', reject);
		req.setTimeout(opts.timeout || 60_000, () => req.destroy(new Error('HTTP request timed out')));
		req.end(body);
	});
}


/* DISK_TEMPLATE - the disk image every sandbox of a root is copied from (policy/volume.c): made
 * once per sandbox root and kept on purpose, so it is not a sandbox left behind */
export const DISK_TEMPLATE = /^\.disk-v\d+-\d+\.img$/;

/* sandboxEntries - what a sandbox root holds besides its disk template */
export const sandboxEntries = (root) => fs.readdirSync(root).filter((d) => !DISK_TEMPLATE.test(d));
/* sessionWorker - the worker child of an HTTP serve whose title names session sid, or null */
export function sessionWorker(servePid, sid) {
	const tag = `s=${sid.slice(0, 8)}`;
	for (const c of children(servePid)) {
		const cl = cmdline(c);
		if (cl && cl.startsWith('kode-gopher: worker') && ` ${cl} `.includes(` ${tag}`) && isAlive(c))
			return c;
	}
	return null;
}

/* snippet - a snippet file: package snippet, the given imports, run's body */
export function snippet(body, imports = []) {
	const imp = ['context', ...new Set(imports)].map((p) => `\t"${p}"`).join('\n');
	return `package snippet\n\nimport (\n${imp}\n)\n\nfunc run(ctx context.Context) (any, error) {\n${body}\n}\n`;
}

/* goStr - a Go string literal (JSON's escapes are Go's for the strings the tests use) */
export const goStr = (s) => JSON.stringify(s);

/* slowBuild - a package main whose compile takes seconds for real (n generated functions; the
 * nonce keeps the build cache from knowing it), for tests of a long build */
export function slowBuild(nonce, n = 3000) {
	const l = ['package main', '', 'import "fmt"', ''];
	for (let i = 0; i < n; i++)
		l.push(`func f${i}(x int) int { s := ${nonce % 1000}; for j := 0; j < x; j++ { s += j*${i} ^ (s >> 3) }; if s%7 == ${i % 7} { return s + ${i} }; return s - ${i} }`);
	l.push('func main() { t := 0');
	for (let i = 0; i < n; i++)
		l.push(`t += f${i}(${i % 13})`);
	l.push(`fmt.Println("slow build ran", t, ${nonce}) }`);
	return l.join('\n');
}

/* cutProxy - a TCP proxy on loopback in front of port() (a function: the server may start
 * after the proxy, which must be named in its --allowed-hosts); cut() drops every connection
 * open now, as a network would */
export async function cutProxy(port) {
	const pairs = new Set();
	const srv = net.createServer((c) => {
		const u = net.connect(port(), '127.0.0.1');
		const pair = [c, u];
		pairs.add(pair);
		c.pipe(u);
		u.pipe(c);
		const end = () => {
			c.destroy();
			u.destroy();
			pairs.delete(pair);
		};
		for (const x of pair)
			x.on('error', end).on('close', end);
	});
	await new Promise((r) => srv.listen(0, '127.0.0.1', r));
	const cut = () => {
		for (const [c, u] of pairs) {
			c.destroy();
			u.destroy();
		}
		pairs.clear();
	};
	return { port: srv.address().port, cut, close: () => new Promise((r) => { cut(); srv.close(r); }) };
}
