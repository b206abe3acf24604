/*
 * http-hostile.test.mjs - a hostile client against the shared server, `kode-gopher serve --http`:
 * what it can learn (session ids, the bearer secrets of sessions, never in full in the accounting
 * log, the server's log or process titles; the log 0600), what it can take (sessions per peer
 * address, workers at --max-workers, abandoned sessions, connections and threads through slow
 * headers, memory through a session's queue over HTTP and stdio), what it can forge (/metrics
 * labels from a program's result) and where it can call from (Origin parsed exactly).
 *
 * Each test starts its own server with the flags it needs (lib.mjs httpServe / rawSession).
 * Run by tests/run.sh (node --test); imports the shared helpers from ../e2e/lib.mjs.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import http from 'node:http';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import test from 'node:test';

import {
	cmdline, descendants, httpRequest, httpServe, memKiB, rawSession, sleep, waitFor, workerPid,
} from '../e2e/lib.mjs';

const T = { timeout: 240_000 };

const QUICK = (v) => `package snippet\n\nimport "context"\n\nfunc run(ctx context.Context) (any, error) { return ${v}, nil }\n`;
const SLEEP = (s) => 'package snippet\n\nimport (\n\t"context"\n\t"time"\n)\n\n' +
	`func run(ctx context.Context) (any, error) {\n\ttime.Sleep(${s} * time.Second)\n\treturn ${s}, nil\n}\n`;
const INIT = (id = 1) => ({
	jsonrpc: '2.0', id, method: 'initialize',
	params: { protocolVersion: '2025-11-25', capabilities: {}, clientInfo: { name: 'hostile', version: '1' } },
});
const MiB = 1 << 20;

/* req - one raw HTTP request, optionally from another loopback source address */
function req(port, { method = 'POST', body, headers = {}, localAddress, timeout = 60_000 } = {}) {
	const data = body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body);
	const h = { accept: 'application/json, text/event-stream', 'content-type': 'application/json', ...headers };
	return new Promise((resolve, reject) => {
		const r = http.request({ host: '127.0.0.1', port, method, path: '/mcp', headers: h, agent: false, localAddress }, (res) => {
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
		});
		r.on('error', reject);
		r.setTimeout(timeout, () => r.destroy(new Error('HTTP request timed out')));
		r.end(data);
	});
}

/* open - a raw session; returns its headers */
async function open(port, o = {}) {
	const r = await req(port, { body: INIT(), ...o });
	assert.equal(r.status, 200, r.body);
	return { 'mcp-session-id': r.headers['mcp-session-id'], 'mcp-protocol-version': '2025-11-25' };
}

const del = (port, h) => req(port, { method: 'DELETE', headers: { 'mcp-session-id': h['mcp-session-id'] } });
const ping = (port, h, id = 'ping') => req(port, { body: { jsonrpc: '2.0', id, method: 'ping' }, headers: h });
const callBody = (id, code) => ({ jsonrpc: '2.0', id, method: 'tools/call', params: { name: 'execute_go_code', arguments: { code } } });

/* metrics - /metrics as {"name{labels}": number} */
async function metrics(port) {
	const r = await httpRequest(port, { path: '/metrics' });
	const out = {};
	for (const line of r.body.split('\n'))
		if (line && !line.startsWith('#')) {
			const i = line.lastIndexOf(' ');
			out[line.slice(0, i)] = Number(line.slice(i + 1));
		}
	return { text: r.body, values: out };
}

const threads = (pid) => fs.readdirSync(`/proc/${pid}/task`).length;

/* sanitized - a binary built by make asan: its allocator keeps freed memory in quarantine, so
 * peak memory says nothing about what the process holds */
const sanitized = (pid) => /libasan|libubsan/.test(fs.readFileSync(`/proc/${pid}/maps`, 'utf8'));
const MEM_BOUND_KIB = 100 * 1024;

test('session ids are bearer secrets: never whole in the accounting log, the server log or a process title; the log is 0600', T, async () => {
	const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kg-acct-'));
	try {
		const fresh = path.join(dir, 'fresh.jsonl');
		const srv = await httpServe(['--accounting-log', fresh]);
		let sid;
		try {
			assert.equal(fs.statSync(fresh).mode & 0o777, 0o600, 'a new accounting log is 0600');
			const h = await open(srv.port);
			sid = h['mcp-session-id'];
			const r = await req(srv.port, { body: callBody(1, QUICK(1)), headers: { ...h, accept: 'application/json' }, timeout: 90_000 });
			assert.equal(r.json?.result?.structuredContent?.result?.kind, 'ok', r.body);
			for (const p of descendants(srv.pid))
				assert.ok(!(cmdline(p) || '').includes(sid), `process ${p} shows the whole session id: ${cmdline(p)}`);
			assert.equal((await del(srv.port, h)).status, 200);
			await waitFor(() => fs.readFileSync(fresh, 'utf8').includes('session_end'), { what: 'a session_end line' });
		} finally {
			await srv.close();
		}
		const text = fs.readFileSync(fresh, 'utf8');
		assert.ok(!text.includes(sid), 'the accounting log holds the whole session id');
		const lines = text.split('\n').filter(Boolean).map((l) => JSON.parse(l));
		assert.deepEqual(lines.map((l) => l.event), ['call', 'session_end']);
		for (const l of lines)
			assert.equal(l.session, sid.slice(0, 8));
		assert.ok(!srv.stderr.includes(sid), 'the server log holds the whole session id');
		assert.ok(srv.stderr.includes(sid.slice(0, 8)), 'the server log names the session by a prefix');

		// a log left readable by others is made 0600 (and kept)
		const wide = path.join(dir, 'wide.jsonl');
		fs.writeFileSync(wide, '{"ts":1,"event":"earlier"}\n', { mode: 0o644 });
		fs.chmodSync(wide, 0o644);
		const again = await httpServe(['--accounting-log', wide]);
		try {
			assert.equal(fs.statSync(wide).mode & 0o777, 0o600, 'an existing 0644 log is made 0600');
			assert.match(again.stderr, /had mode 644; it is now 0600/);
		} finally {
			await again.close();
		}
		assert.match(fs.readFileSync(wide, 'utf8'), /"earlier"/);
	} finally {
		fs.rmSync(dir, { recursive: true, force: true });
	}
});

test('new sessions per peer address are limited: 429 with Retry-After at once; other addresses are served', T, async () => {
	const srv = await httpServe(['--max-sessions-per-peer', '2', '--workers-min-idle', '3']);
	try {
		const a = await open(srv.port);
		const b = await open(srv.port);
		for (let k = 0; k < 5; k++) {
			const r = await req(srv.port, { body: INIT(`over-${k}`) });
			assert.equal(r.status, 429, r.body);
			assert.match(r.headers['retry-after'] || '', /^\d+$/, 'Retry-After');
			assert.equal(r.json?.id, `over-${k}`, r.body);
			assert.match(r.json?.error?.message, /--max-sessions-per-peer/);
			assert.equal(r.headers['mcp-session-id'], undefined);
		}
		// refusals cost no worker: another address still gets one
		const other = await open(srv.port, { localAddress: '127.0.0.2' });
		assert.equal((await ping(srv.port, other)).status, 200);
		// the sessions it holds are untouched, and ending one makes room
		assert.equal((await ping(srv.port, a)).status, 200);
		assert.equal((await del(srv.port, b)).status, 200);
		const c = await open(srv.port);
		assert.equal((await ping(srv.port, c)).status, 200);
	} finally {
		await srv.close();
	}
});

const jsonCall = (port, h, id) => req(port, { body: callBody(id, QUICK(1)), headers: { ...h, accept: 'application/json' }, timeout: 90_000 });

test('at --max-workers, with every session in use, a new session gets 503 with Retry-After at once', T, async () => {
	const srv = await httpServe(['--max-workers', '2', '--workers-min-idle', '2']);
	try {
		const used = [await open(srv.port), await open(srv.port)];
		for (const [k, h] of used.entries())
			assert.equal((await jsonCall(srv.port, h, k)).json?.result?.structuredContent?.result?.kind, 'ok');
		// answered at once (the old server held each refused initialize for 30 s), with
		// Retry-After and the request's id; the request timeout here is only a bound far above
		// what an immediate answer takes
		for (let k = 0; k < 3; k++) {
			const full = await req(srv.port, { body: INIT(`full-${k}`), timeout: 20_000 });
			assert.equal(full.status, 503, full.body);
			assert.match(full.headers['retry-after'] || '', /^\d+$/);
			assert.ok(Number(full.headers['retry-after']) >= 1);
			assert.equal(full.json?.id, `full-${k}`);
			assert.match(full.json?.error?.message, /--max-workers/);
		}
		for (const h of used)
			assert.equal((await ping(srv.port, h)).status, 200, 'the sessions in use are untouched');
	} finally {
		await srv.close();
	}
});

test('sessions that never made a tool call end after --unused-session-timeout; one that made a call lives on', T, async () => {
	const srv = await httpServe(['--max-workers', '2', '--workers-min-idle', '2', '--unused-session-timeout', '3s']);
	try {
		const used = await open(srv.port);
		assert.equal((await jsonCall(srv.port, used, 1)).json?.result?.structuredContent?.result?.kind, 'ok');
		const unused = await open(srv.port);
		await waitFor(async () => (await metrics(srv.port)).values.kode_gopher_sessions_open === 1,
			{ timeout: 60_000, interval: 250, what: 'the unused session to end' });
		assert.equal((await ping(srv.port, unused)).status, 404);
		assert.equal((await ping(srv.port, used)).status, 200);
		// its worker's replacement serves a new session
		const next = await open(srv.port);
		assert.equal((await ping(srv.port, next)).status, 200);
	} finally {
		await srv.close();
	}
});

test('at --max-workers the session idle longest that never made a tool call gives its worker to a new one', T, async () => {
	// a quarter of the 20 s unused timeout: sessions idle 5 s may give way
	const srv = await httpServe(['--max-workers', '3', '--workers-min-idle', '3', '--unused-session-timeout', '20s']);
	try {
		const used = await open(srv.port);
		assert.equal((await jsonCall(srv.port, used, 1)).json?.result?.structuredContent?.result?.kind, 'ok');
		const oldest = await open(srv.port);
		await sleep(1000);
		const younger = await open(srv.port);
		await sleep(5500); // both idle past the 5 s; ends only the oldest, whatever the timing
		const next = await req(srv.port, { body: INIT('next'), timeout: 60_000 });
		assert.equal(next.status, 200, next.body);
		assert.equal((await ping(srv.port, oldest)).status, 404, 'the longest-idle unused session gave way');
		assert.equal((await ping(srv.port, used)).status, 200, 'a session that made a call is never evicted');
		const y = await ping(srv.port, younger);
		assert.ok(y.status === 200 || y.status === 404, y.body); // 404 only if its own timeout passed
	} finally {
		await srv.close();
	}
});

test('the Origin check parses the origin and compares scheme, host and port exactly', T, async () => {
	const srv = await httpServe(['--workers-min-idle', '1']);
	try {
		const p = srv.port;
		const bad = [
			`http://localhost:1@evil.example`, `http://localhost:${p}@evil.example`, `http://localhost@evil.example:${p}`,
			`http://127.0.0.1:${p}.evil.example`, `http://localhost:${p + 1}`, `http://localhost`, `https://127.0.0.1`,
			`http://[::1]:${p}/path`, `http://localhost:${p}/`, `http://localhost:${p}#x`, `http://localhost:${p}?q`,
			`ftp://localhost:${p}`, `file://localhost:${p}`, `http://localhost:0${p}0`, `http://localhost:${p}:${p}`,
			`http://localhost.:${p}`, `http://evil.example\\@localhost:${p}`, `//localhost:${p}`, `localhost:${p}`, 'null', '',
		];
		for (const origin of bad) {
			const r = await req(p, { body: INIT(), headers: { origin } });
			assert.equal(r.status, 403, `Origin ${JSON.stringify(origin)}: ${r.status} ${r.body}`);
			assert.equal(r.headers['mcp-session-id'], undefined);
		}
		for (const origin of [`http://localhost:${p}`, `http://127.0.0.1:${p}`, `http://[::1]:${p}`, `HTTP://LocalHost:${p}`, `https://localhost:${p}`]) {
			const r = await req(p, { body: INIT(), headers: { origin } });
			assert.equal(r.status, 200, `Origin ${origin}: ${r.body}`);
			assert.equal((await del(p, { 'mcp-session-id': r.headers['mcp-session-id'] })).status, 200);
		}
	} finally {
		await srv.close();
	}
});

test('slow-header connections: bounded per peer and closed; the master\'s threads stay bounded and others are served', T, async () => {
	const srv = await httpServe(['--workers-min-idle', '1']);
	const socks = [];
	try {
		await httpRequest(srv.port, { path: '/healthz' });
		const base = threads(srv.pid);
		let closed = 0;
		const N = 200;
		for (let k = 0; k < N; k++) {
			const s = net.connect({ host: '127.0.0.1', port: srv.port });
			s.on('error', () => {});
			s.on('close', () => closed++);
			s.on('connect', () => s.write(`POST /mcp HTTP/1.1\r\nHost: 127.0.0.1:${srv.port}\r\nX-Slow: `));
			socks.push(s);
		}
		// past the per-peer limit the server closes connections as it accepts them
		await waitFor(() => closed >= N - 64, { timeout: 60_000, what: `${N - 64} connections refused (${closed} so far)` });
		const t = threads(srv.pid);
		assert.ok(t <= base + 64 + 2, `the master has ${t} threads (${base} before ${N} slow connections)`);
		// another client (another address) is served meanwhile
		const other = await req(srv.port, { body: INIT(), localAddress: '127.0.0.2' });
		assert.equal(other.status, 200, other.body);
		// and the slow ones are closed by the server, never completing their headers
		await waitFor(() => closed === N, { timeout: 90_000, interval: 200, what: `every slow connection closed (${closed} of ${N})` });
		await waitFor(() => threads(srv.pid) <= base + 2, { timeout: 30_000, what: 'their threads to end' });
	} finally {
		for (const s of socks)
			s.destroy();
		await srv.close();
	}
});

/* heldConnection - a keep-alive connection that asks for /healthz: "served" (and stays open) or
 * "closed" (by the server, before any answer); .sock to end it */
function heldConnection(port, localAddress = '127.0.0.1') {
	const sock = net.connect({ host: '127.0.0.1', port, localAddress });
	const h = { sock, open: true };
	h.outcome = new Promise((resolve) => {
		let got = '';
		sock.on('error', () => {});
		sock.on('connect', () => sock.write(`GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\n\r\n`));
		sock.on('data', (d) => {
			got += d;
			if (/^HTTP\/1\.1 200 /.test(got))
				resolve('served');
		});
		sock.on('close', () => {
			h.open = false;
			resolve(got ? 'served' : 'closed');
		});
	});
	return h;
}

test('--max-connections-per-peer: past it one address\'s connections are closed as they come, another address is served; raised, more than 64 are served', T, async () => {
	const srv = await httpServe(['--workers-min-idle', '0', '--max-connections-per-peer', '3']);
	const held = [];
	try {
		for (let k = 0; k < 3; k++) {
			held.push(heldConnection(srv.port));
			assert.equal(await held.at(-1).outcome, 'served', `connection ${k + 1} of 3`);
		}
		const fourth = heldConnection(srv.port);
		held.push(fourth);
		assert.equal(await fourth.outcome, 'closed', 'a fourth connection from 127.0.0.1 is closed unanswered');
		const other = heldConnection(srv.port, '127.0.0.2');
		held.push(other);
		assert.equal(await other.outcome, 'served', 'another address has connections of its own');
		assert.ok(held.slice(0, 3).every((h) => h.open), 'the three admitted connections are still open');
		// one of them goes: the address may open one again
		held[0].sock.destroy();
		await waitFor(async () => (await heldConnection(srv.port).outcome) === 'served' || null,
			{ timeout: 30_000, interval: 100, what: 'a connection admitted once one of the three closed' });
	} finally {
		for (const h of held)
			h.sock.destroy();
		await srv.close();
	}
	// the default (64) closed the bench's connections at 64 sessions; raised, 80 are served
	const wide = await httpServe(['--workers-min-idle', '0', '--max-connections-per-peer', '100']);
	const many = [];
	try {
		for (let k = 0; k < 80; k++)
			many.push(heldConnection(wide.port));
		const outcomes = await Promise.all(many.map((h) => h.outcome));
		assert.equal(outcomes.filter((o) => o === 'served').length, 80, `served: ${outcomes.join(' ')}`);
	} finally {
		for (const h of many)
			h.sock.destroy();
		await wide.close();
	}
});

test('over HTTP a session\'s waiting calls are bounded: past the limit each gets a JSON-RPC error; memory stays bounded', T, async (t) => {
	const srv = await httpServe(['--workers-min-idle', '1']);
	try {
		const h = await open(srv.port);
		const jsonOnly = { ...h, accept: 'application/json' };
		const long = req(srv.port, { body: callBody('long', SLEEP(60)), headers: jsonOnly, timeout: 120_000 }).catch((e) => ({ error: e }));
		const N = 80, size = 2 * MiB;
		const code = (k) => `package snippet\n// ${String(k).padStart(4, '0')}${'y'.repeat(size)}\n`;
		const answers = [];
		for (let k = 0; k < N; k++) {
			// one body on the wire at a time: what the server keeps is what counts
			const body = JSON.stringify(callBody(`q${k}`, code(k)));
			answers.push(req(srv.port, { body, headers: jsonOnly, timeout: 120_000 }).catch((e) => ({ error: e })));
			await sleep(0);
			if (k % 8 === 7)
				await Promise.race([Promise.all(answers.slice(-4)), sleep(300)]);
		}
		const refused = [];
		await waitFor(async () => {
			const done = await Promise.all(answers.map((a) => Promise.race([a, sleep(10).then(() => null)])));
			refused.length = 0;
			for (const [k, r] of done.entries())
				if (r?.json?.error)
					refused.push([k, r]);
			return refused.length >= N - 16 - 1;
		}, { timeout: 120_000, interval: 500, what: 'the calls past the limit to be refused' });
		// refused by the worker (its queue of calls) or by the master (requests waiting for the
		// worker), each with the request's id and a sentence saying what to do
		for (const [k, r] of refused) {
			assert.ok([200, 429].includes(r.status), r.body);
			assert.equal(r.json.id, `q${k}`);
			assert.match(r.json.error.message, /Too many (tool calls|requests) waiting/);
		}
		const w = workerPid(srv.pid);
		const wk = memKiB(w), mk = memKiB(srv.pid);
		t.diagnostic(`peak memory: worker ${wk} KiB, master ${mk} KiB (${refused.length} of ${N} refused)`);
		if (!sanitized(srv.pid)) {
			assert.ok(wk < MEM_BOUND_KIB, `the worker peaked at ${wk} KiB after ${N} calls of ${size >> 20} MiB`);
			assert.ok(mk < MEM_BOUND_KIB, `the master peaked at ${mk} KiB after ${N} calls of ${size >> 20} MiB`);
		}
		assert.equal((await del(srv.port, h)).status, 200);
		await long;
		await Promise.all(answers);
	} finally {
		await srv.close();
	}
});

test('over stdio a session\'s queue is bounded the same way: errors past it, bounded memory', T, async (t) => {
	const s = rawSession();
	try {
		await s.initialize();
		await s.send(callBody('long', SLEEP(60)));
		const N = 150, size = MiB;
		for (let k = 0; k < N; k++)
			await s.send(callBody(`q${k}`, `package snippet\n// ${'z'.repeat(size)}\n`));
		let refused = 0;
		while (refused < N - WORKER_QUEUE_MAX - 1) {
			const e = await s.next({ timeout: 60_000, match: (m) => m.error && String(m.id).startsWith('q') });
			assert.match(e.error.message, /Too many tool calls waiting/);
			refused++;
		}
		const w = workerPid(s.pid);
		const wk = memKiB(w), mk = memKiB(s.pid);
		t.diagnostic(`peak memory: worker ${wk} KiB, master ${mk} KiB (${refused} of ${N} refused)`);
		if (!sanitized(s.pid)) {
			assert.ok(wk < MEM_BOUND_KIB, `the worker peaked at ${wk} KiB after ${N} calls of 1 MiB`);
			assert.ok(mk < MEM_BOUND_KIB, `the master peaked at ${mk} KiB after ${N} calls of 1 MiB`);
		}
	} finally {
		await s.close();
	}
});
const WORKER_QUEUE_MAX = 16; /* worker/worker.h WORKER_MAX_QUEUED_CALLS */

test('a program that forges its result kind or writes label syntax creates no /metrics label', T, async () => {
	const srv = await httpServe(['--workers-min-idle', '1']);
	try {
		const h = await open(srv.port);
		const forged = ['forged_kind', 'ok"} 99\nkode_gopher_fake{a="', 'x'.repeat(100)];
		for (const [k, kind] of forged.entries()) {
			const code = 'package snippet\n\nimport (\n\t"context"\n\t"encoding/json"\n\t"os"\n)\n\n' +
				'func run(ctx context.Context) (any, error) {\n' +
				`\tb, _ := json.Marshal(map[string]any{"kind": ${JSON.stringify(kind)}, "value": 1})\n` +
				'\tos.WriteFile(os.Getenv("KODE_GOPHER_RESULT"), b, 0o644)\n\tos.Exit(0)\n\treturn nil, nil\n}\n';
			const r = await req(srv.port, { body: callBody(k, code), headers: { ...h, accept: 'application/json' }, timeout: 90_000 });
			assert.equal(r.status, 200, r.body);
		}
		const m = await metrics(srv.port);
		assert.ok(!/forged|fake|xxxxxxxxxx/.test(m.text), m.text);
		const fixed = /^kode_gopher_tool_calls_total\{tool="(execute_go_code|lookup_package_docs|other)",kind="(ok|error|panic|unencodable|exit|timeout|killed|build_error|normalize_error|internal_error|invalid_arguments|sandbox_limit|tool_error|cancelled|other)"\} \d+$/;
		for (const line of m.text.split('\n').filter((l) => l.startsWith('kode_gopher_tool_calls_total')))
			assert.match(line, fixed);
		assert.ok(Object.keys(m.values).some((k) => k.startsWith('kode_gopher_tool_calls_total')), 'the calls were counted');
	} finally {
		await srv.close();
	}
});
