/*
 * http.test.mjs - the shared server, `kode-gopher serve --http`, as the official SDK client's
 * StreamableHTTPClientTransport and raw HTTP requests see it: sessions (parallel, ordered calls,
 * DELETE, idle timeout), progress over text/event-stream, the per-user sandbox limit, a worker
 * SIGKILLed while another session goes on, the transport's checks (body size, Origin, Host,
 * Mcp-Session-Id, MCP-Protocol-Version, methods), /healthz, /metrics and the accounting log.
 *
 * Most tests share one server (lib.mjs httpServe, kept for the file); the limit and idle-timeout
 * tests start their own with other flags. Run by tests/run.sh (node --test); each test() is one
 * counted result.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import test, { after, before } from 'node:test';

import {
	bigRequestLine, callTool, children, cmdline, httpRequest, httpServe, isAlive, McpError, sc, sessionWorker, sleep, text,
	waitFor, workerState,
} from './lib.mjs';

const T = { timeout: 120_000 };
const Q = { timeout: 60_000 }; /* a call that should take a second or two */

const QUICK = (v) => `package snippet\n\nimport "context"\n\nfunc run(ctx context.Context) (any, error) { return ${v}, nil }\n`;
const SLEEPER = 'package snippet\n\nimport (\n\t"context"\n\t"time"\n)\n\n' +
	'func run(ctx context.Context) (any, error) {\n\ttime.Sleep(30 * time.Second)\n\treturn 1, nil\n}\n';
const SLOW3 = 'package snippet\n\nimport (\n\t"context"\n\t"time"\n)\n\n' +
	'func run(ctx context.Context) (any, error) {\n\ttime.Sleep(3 * time.Second)\n\treturn 3, nil\n}\n';
const WRITER = 'package snippet\n\nimport (\n\t"context"\n\t"os"\n\t"time"\n)\n\n' +
	'func run(ctx context.Context) (any, error) {\n\ttime.Sleep(2 * time.Second)\n' +
	'\treturn "wrote", os.WriteFile("/app/persist/a", []byte("from the first call"), 0o644)\n}\n';
const READER = 'package snippet\n\nimport (\n\t"context"\n\t"os"\n)\n\n' +
	'func run(ctx context.Context) (any, error) {\n\tb, err := os.ReadFile("/app/persist/a")\n' +
	'\treturn string(b), err\n}\n';

const INIT = {
	jsonrpc: '2.0', id: 1, method: 'initialize',
	params: { protocolVersion: '2025-11-25', capabilities: {}, clientInfo: { name: 'raw', version: '1' } },
};
const PING = { jsonrpc: '2.0', id: 2, method: 'ping' };
const LIMIT_MSG = 'too many open sandboxes for this user';

let srv;        /* the shared server */
let acctPath;   /* its accounting log */

before(async () => {
	acctPath = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'kg-e2e-acct-')), 'accounting.jsonl');
	srv = await httpServe(['--max-sandboxes-per-user', '8', '--accounting-log', acctPath], { keep: true });
});

after(() => {
	fs.rmSync(path.dirname(acctPath), { recursive: true, force: true });
});

/* quick - an execute_go_code call that returns v; asserts it came back ok */
async function quick(client, v, opts = {}) {
	const res = await callTool(client, 'execute_go_code', { code: QUICK(JSON.stringify(v)) }, { ...Q, ...opts });
	assert.equal(sc(res)?.result?.kind, 'ok', JSON.stringify(res));
	assert.deepEqual(sc(res).result.value, v);
	return res;
}

/* post - a raw POST to /mcp with the headers the SDK would send, plus extra */
function post(port, body, headers = {}) {
	return httpRequest(port, {
		method: 'POST', body,
		headers: { accept: 'application/json, text/event-stream', 'content-type': 'application/json', ...headers },
	});
}

/* rawSession - initialize over raw HTTP; returns the session id */
async function rawSession(port) {
	const r = await post(port, INIT);
	assert.equal(r.status, 200, r.body);
	const sid = r.headers['mcp-session-id'];
	assert.match(sid || '', /^[0-9a-f]{32}$/, `Mcp-Session-Id: ${sid}`);
	const n = await post(port, { jsonrpc: '2.0', method: 'notifications/initialized' },
		{ 'mcp-session-id': sid, 'mcp-protocol-version': '2025-11-25' });
	assert.equal(n.status, 202, n.body);
	return sid;
}

/* end - DELETE a session through the SDK and close its client */
async function end(s) {
	await s.transport.terminateSession();
	await s.client.close();
}

/* metrics - /metrics as {"name{labels}": number} */
async function metrics(port) {
	const r = await httpRequest(port, { path: '/metrics' });
	assert.equal(r.status, 200);
	const out = {};
	for (const line of r.body.split('\n'))
		if (line && !line.startsWith('#')) {
			const i = line.lastIndexOf(' ');
			out[line.slice(0, i)] = Number(line.slice(i + 1));
		}
	return out;
}

/* acct - the accounting log's lines, parsed */
function acct(file) {
	if (!fs.existsSync(file))
		return [];
	return fs.readFileSync(file, 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l));
}

test('http: connect, tools/list, ping, execute_go_code with progress over SSE', T, async () => {
	const s = await srv.connect({ listTools: false });
	assert.match(s.sessionId || '', /^[0-9a-f]{32}$/);
	assert.equal(s.client.getServerVersion().name, 'kode-gopher');
	const { tools } = await s.client.listTools();
	assert.deepEqual(tools.map((t) => t.name).sort(), ['execute_go_code', 'lookup_package_docs']);
	assert.deepEqual(await s.client.ping(), {});
	const seen = [];
	const res = await callTool(s.client, 'execute_go_code', {
		code: 'package snippet\n\nimport (\n\t"context"\n\t"strings"\n)\n\n' +
			'func run(ctx context.Context) (any, error) { return strings.Repeat("go", 3), nil }\n',
	}, { ...Q, onprogress: (p) => seen.push(p) });
	assert.equal(sc(res)?.result?.kind, 'ok', JSON.stringify(res));
	assert.equal(sc(res).result.value, 'gogogo');
	assert.equal(res.isError, false);
	assert.ok(seen.length >= 1, 'no notifications/progress arrived over the event stream');
	for (const p of seen)
		assert.equal(typeof p.progress, 'number');
	assert.deepEqual(s.errors, [], 'transport errors');
	await end(s);
});

test('http: raw tools/call: progress and result as text/event-stream, or JSON when only JSON is accepted', T, async () => {
	const sid = await rawSession(srv.port);
	const h = { 'mcp-session-id': sid, 'mcp-protocol-version': '2025-11-25' };
	const call = (id, progressToken) => ({
		jsonrpc: '2.0', id, method: 'tools/call',
		params: { name: 'execute_go_code', arguments: { code: QUICK(id) }, _meta: { progressToken } },
	});
	const r = await post(srv.port, call(7, 'tok-7'), h);
	assert.equal(r.status, 200, r.body);
	assert.match(r.headers['content-type'] || '', /^text\/event-stream/);
	/* the priming event (an id, retry, empty data) carries no message */
	const events = r.body.split('\n\n').filter((e) => e.trim()).map((e) =>
		e.split('\n').filter((l) => l.startsWith('data:')).map((l) => l.slice(5).trim()).join('\n'))
		.filter((data) => data).map((data) => JSON.parse(data));
	const progress = events.filter((m) => m.method === 'notifications/progress');
	assert.ok(progress.length >= 1, r.body.slice(0, 500));
	for (const p of progress)
		assert.equal(p.params.progressToken, 'tok-7');
	const last = events.at(-1);
	assert.equal(last.id, 7, 'the result ends the stream');
	assert.equal(last.result?.structuredContent?.result?.value, 7, JSON.stringify(last));
	const j = await post(srv.port, call(8, 'tok-8'), { ...h, accept: 'application/json' });
	assert.equal(j.status, 200, j.body);
	assert.match(j.headers['content-type'] || '', /^application\/json/);
	assert.equal(j.json?.id, 8, j.body);
	assert.equal(j.json.result?.structuredContent?.result?.value, 8, j.body);
	const del = await httpRequest(srv.port, { method: 'DELETE', headers: { 'mcp-session-id': sid } });
	assert.equal(del.status, 200, del.body);
});

test('http: three sessions in parallel, two concurrent calls each, all succeed', T, async () => {
	const ss = await Promise.all([0, 1, 2].map(() => srv.connect()));
	assert.equal(new Set(ss.map((s) => s.sessionId)).size, 3, 'three distinct session ids');
	await Promise.all(ss.flatMap((s, i) => [quick(s.client, `s${i}-a`), quick(s.client, `s${i}-b`)]));
	await Promise.all(ss.map(end));
});

test('http: calls in one session run one at a time, in order', T, async () => {
	const s = await srv.connect();
	const first = callTool(s.client, 'execute_go_code', { code: WRITER }, Q);
	first.catch(() => {});
	// the second request is sent once the worker holds the first
	await waitFor(() => {
		const w = sessionWorker(srv.pid, s.sessionId);
		return w && workerState(w) === 'busy';
	}, { timeout: 20_000, what: 'the worker to be busy with the first call' });
	const second = callTool(s.client, 'execute_go_code', { code: READER }, Q);
	const [a, b] = await Promise.all([first, second]);
	assert.equal(sc(a)?.result?.value, 'wrote', JSON.stringify(a));
	assert.equal(sc(b)?.result?.kind, 'ok', `the second call ran before the first ended: ${JSON.stringify(b)}`);
	assert.equal(sc(b).result.value, 'from the first call');
	await end(s);
});

test('http: DELETE ends the session at once; its id then gets 404', T, async () => {
	const s = await srv.connect();
	const sid = s.sessionId;
	const w = await waitFor(() => sessionWorker(srv.pid, sid), { what: `the worker of s=${sid.slice(0, 8)}` });
	assert.match(cmdline(w), new RegExp(`^kode-gopher: worker local s=${sid.slice(0, 8)}\\S* (idle|busy)$`));
	await s.transport.terminateSession();
	const r = await post(srv.port, PING, { 'mcp-session-id': sid, 'mcp-protocol-version': '2025-11-25' });
	assert.equal(r.status, 404, r.body);
	assert.equal(r.json?.error?.code, -32001, r.body);
	const again = await httpRequest(srv.port, { method: 'DELETE', headers: { 'mcp-session-id': sid } });
	assert.equal(again.status, 404, again.body);
	const none = await httpRequest(srv.port, { method: 'DELETE' });
	assert.equal(none.status, 400, `DELETE without Mcp-Session-Id: ${none.body}`);
	await waitFor(() => !isAlive(w), { timeout: 5000, what: `worker ${w} to exit` });
	await s.client.close();
});

test('http: DELETE during a call: the call fails at once with a sentence saying the session ended', T, async () => {
	const s = await srv.connect();
	const call = callTool(s.client, 'execute_go_code', { code: SLEEPER }, Q);
	call.catch(() => {});
	await waitFor(() => {
		const w = sessionWorker(srv.pid, s.sessionId);
		return w && workerState(w) === 'busy';
	}, { timeout: 20_000, what: 'the worker to be busy' });
	const t0 = Date.now();
	const del = await httpRequest(srv.port, { method: 'DELETE', headers: { 'mcp-session-id': s.sessionId } });
	assert.equal(del.status, 200, del.body);
	await assert.rejects(call, (e) => {
		assert.ok(e instanceof McpError, String(e));
		assert.match(e.message, /session/i);
		assert.match(e.message, /ended|closed|deleted/i);
		// nothing crashed: the client ended the session
		assert.doesNotMatch(e.message, /crash/i);
		return true;
	});
	assert.ok(Date.now() - t0 < 5000, `the call took ${Date.now() - t0} ms to fail after DELETE`);
	await s.client.close();
});

test('http: requests racing a DELETE in their session: each gets its answer, 404 or "the session ended", never a crash; the worker leaves as told', T, async (t) => {
	/* the master sends a client message without its pool lock: a DELETE can come between a
	 * request finding its session and sending, and its REQ_SHUTDOWN must still come after that
	 * message (the worker takes a REQ_MCP after REQ_SHUTDOWN for a breach of the contract) */
	const hdr = (sid) => ({ 'mcp-session-id': sid, 'mcp-protocol-version': '2025-11-25' });
	const other = await rawSession(srv.port);
	const from = srv.stderr.length;
	const seen = { answered: 0, notFound: 0, ended: 0 };
	/* big messages: packing and sending them takes a while, which is the window */
	const ping = (id) => ({ jsonrpc: '2.0', id, method: 'ping', params: { pad: 'x'.repeat(1 << 20) } });
	for (let round = 0; round < 8; round++) {
		const sid = await rawSession(srv.port);
		const w = await waitFor(() => sessionWorker(srv.pid, sid), { what: `the worker of s=${sid.slice(0, 8)}` });
		const pings = [];
		for (let k = 0; k < 24; k++)
			pings.push(post(srv.port, ping(100 + k), hdr(sid)));
		const del = httpRequest(srv.port, { method: 'DELETE', headers: { 'mcp-session-id': sid } });
		for (let k = 0; k < 8; k++)
			pings.push(post(srv.port, ping(200 + k), hdr(sid)));
		assert.equal((await del).status, 200);
		for (const r of await Promise.all(pings)) {
			assert.doesNotMatch(r.body, /crash/i, r.body);
			if (r.status === 404) {
				assert.equal(r.json?.error?.code, -32001, r.body);
				seen.notFound++;
			} else if (r.json?.error) {
				assert.match(r.json.error.message, /session ended/, r.body);
				seen.ended++;
			} else {
				assert.equal(r.status, 200, r.body);
				assert.deepEqual(r.json?.result, {}, r.body);
				seen.answered++;
			}
		}
		const late = await post(srv.port, PING, hdr(sid));
		assert.equal(late.status, 404, `after the DELETE: ${late.body}`);
		await waitFor(() => !isAlive(w), { timeout: 30_000, what: `worker ${w} to exit` });
		const r = await post(srv.port, PING, hdr(other));
		assert.equal(r.status, 200, `another session: ${r.body}`);
	}
	const log = srv.stderr.slice(from);
	assert.doesNotMatch(log, /not permitted in phase/, log);
	assert.doesNotMatch(log, /worker pid \d+ .*(killed|exited with)/, log);
	t.diagnostic(`outcomes: ${JSON.stringify(seen)}`);
	await httpRequest(srv.port, { method: 'DELETE', headers: { 'mcp-session-id': other } });
});

test('http: a worker SIGKILLed mid-call ends its session only; another session keeps working', T, async () => {
	const before = await metrics(srv.port);
	const victim = await srv.connect();
	const other = await srv.connect();
	await quick(other.client, 'before');
	const phases = [];
	const call = callTool(victim.client, 'execute_go_code', { code: SLEEPER },
		{ ...Q, onprogress: (p) => phases.push(p.message || '') });
	call.catch(() => {});
	const w = await waitFor(() => {
		const pid = sessionWorker(srv.pid, victim.sessionId);
		return pid && workerState(pid) === 'busy' ? pid : null;
	}, { timeout: 20_000, what: 'the victim worker to be busy' });
	await waitFor(() => phases.some((m) => m.startsWith('run')), { timeout: 60_000, what: 'the run phase' })
		.catch(() => { /* kill while busy anyway */ });
	assert.ok(sessionWorker(srv.pid, other.sessionId) !== w, 'each session has its own worker');
	process.kill(w, 'SIGKILL');
	await assert.rejects(call, (e) => {
		assert.ok(e instanceof McpError, String(e));
		assert.equal(e.code, -32603);
		assert.match(e.message, /crashed/);
		return true;
	});
	const r = await post(srv.port, PING, { 'mcp-session-id': victim.sessionId, 'mcp-protocol-version': '2025-11-25' });
	assert.equal(r.status, 404, `the killed worker's session: ${r.body}`);
	await quick(other.client, 'after');
	assert.deepEqual(await other.client.ping(), {});
	const m = await metrics(srv.port);
	assert.equal(m.kode_gopher_worker_crashes_total, (before.kode_gopher_worker_crashes_total || 0) + 1);
	await victim.client.close();
	await end(other);
});

test('http: /metrics after a call', T, async () => {
	const s = await srv.connect();
	await quick(s.client, 'metrics');
	const m = await metrics(srv.port);
	assert.ok(m['kode_gopher_tool_calls_total{tool="execute_go_code",kind="ok"}'] >= 1, JSON.stringify(m));
	assert.ok(m.kode_gopher_sessions_open >= 1, 'sessions_open');
	assert.ok(m['kode_gopher_sandboxes{user="local"}'] >= 1, 'sandboxes{user="local"}');
	for (const st of ['idle', 'starting', 'busy'])
		assert.equal(typeof m[`kode_gopher_workers{state="${st}"}`], 'number', `workers{state="${st}"}`);
	assert.ok(m.kode_gopher_build_seconds_count >= 1, 'build_seconds_count');
	assert.equal(m['kode_gopher_build_seconds_bucket{le="+Inf"}'], m.kode_gopher_build_seconds_count);
	assert.ok(m.kode_gopher_run_seconds_count >= 1, 'run_seconds_count');
	assert.equal(typeof m.kode_gopher_run_seconds_sum, 'number');
	assert.equal(typeof m.kode_gopher_worker_crashes_total, 'number');
	await end(s);
});

test('http: the accounting log has the call and, after DELETE, the session end', T, async () => {
	const s = await srv.connect();
	const sid = s.sessionId;
	await quick(s.client, 'accounted');
	// the log names a session by a prefix of its id: the whole id is the session's bearer secret
	const call = await waitFor(() => acct(acctPath).find((l) => l.event === 'call' && l.session === sid.slice(0, 8)),
		{ timeout: 5000, what: 'a call line' });
	assert.equal(call.user, 'local');
	assert.equal(call.tool, 'execute_go_code');
	assert.equal(call.kind, 'ok');
	assert.equal(typeof call.ts, 'number');
	assert.ok(!acct(acctPath).some((l) => l.event === 'session_end' && l.session === sid.slice(0, 8)), 'ended too soon');
	await end(s);
	const fin = await waitFor(() => acct(acctPath).find((l) => l.event === 'session_end' && l.session === sid.slice(0, 8)),
		{ timeout: 5000, what: 'a session_end line' });
	assert.equal(fin.user, 'local');
	assert.equal(fin.calls, 1);
});

test('http: a request body over 4 MiB gets 413', T, async () => {
	const r = await post(srv.port, bigRequestLine(1, 5 << 20));
	assert.equal(r.status, 413, r.body.slice(0, 300));
	// and the server goes on
	assert.equal((await httpRequest(srv.port, { path: '/healthz' })).status, 200);
});

test('http: an Origin that is not localhost gets 403', T, async () => {
	for (const origin of ['https://evil.example', 'http://localhost.evil.example', 'null']) {
		const r = await post(srv.port, INIT, { origin });
		assert.equal(r.status, 403, `Origin ${origin}: ${r.body}`);
		assert.equal(r.headers['mcp-session-id'], undefined);
	}
	// our own page may call
	const ok = await post(srv.port, INIT, { origin: `http://localhost:${srv.port}` });
	assert.equal(ok.status, 200, ok.body);
	const del = await httpRequest(srv.port, { method: 'DELETE', headers: { 'mcp-session-id': ok.headers['mcp-session-id'] } });
	assert.equal(del.status, 200, del.body);
});

test('http: a Host header naming another host or port gets 403', T, async () => {
	for (const host of ['evil.example', `evil.example:${srv.port}`, '127.0.0.1:1', `localhost.evil.example:${srv.port}`]) {
		const r = await post(srv.port, INIT, { host });
		assert.equal(r.status, 403, `Host ${host}: ${r.body}`);
		const h = await httpRequest(srv.port, { path: '/healthz', headers: { host } });
		assert.equal(h.status, 403, `Host ${host} on /healthz`);
	}
	for (const host of [`localhost:${srv.port}`, `127.0.0.1:${srv.port}`, `[::1]:${srv.port}`]) {
		const h = await httpRequest(srv.port, { path: '/healthz', headers: { host } });
		assert.equal(h.status, 200, `Host ${host}`);
	}
});

test('http: a non-initialize POST without Mcp-Session-Id gets 400 and a JSON-RPC error -32000', T, async () => {
	const r = await post(srv.port, PING);
	assert.equal(r.status, 400, r.body);
	assert.equal(r.json?.jsonrpc, '2.0', r.body);
	assert.equal(r.json?.error?.code, -32000, r.body);
	assert.equal(r.headers['mcp-session-id'], undefined);
});

test('http: an unknown session id gets 404', T, async () => {
	const r = await post(srv.port, PING, { 'mcp-session-id': '0123456789abcdef0123456789abcdef', 'mcp-protocol-version': '2025-11-25' });
	assert.equal(r.status, 404, r.body);
	const junk = await post(srv.port, PING, { 'mcp-session-id': 'not-a-session' });
	assert.equal(junk.status, 404, junk.body);
});

test('http: an unsupported MCP-Protocol-Version gets 400; supported ones pass', T, async () => {
	const sid = await rawSession(srv.port);
	const bad = await post(srv.port, PING, { 'mcp-session-id': sid, 'mcp-protocol-version': '1999-01-01' });
	assert.equal(bad.status, 400, bad.body);
	assert.equal(bad.json?.error?.code, -32000, bad.body);
	for (const v of ['2025-11-25', '2025-06-18', '2025-03-26']) {
		const ok = await post(srv.port, PING, { 'mcp-session-id': sid, 'mcp-protocol-version': v });
		assert.equal(ok.status, 200, `${v}: ${ok.body}`);
		assert.deepEqual(ok.json?.result, {}, ok.body);
	}
	const del = await httpRequest(srv.port, { method: 'DELETE', headers: { 'mcp-session-id': sid } });
	assert.equal(del.status, 200, del.body);
});

test('http: a body that is not JSON or not JSON-RPC gets 400 with the error; a request error stays 200', T, async () => {
	const sid = await rawSession(srv.port);
	const h = { 'mcp-session-id': sid, 'mcp-protocol-version': '2025-11-25' };
	const garbage = await post(srv.port, 'garbage', h);
	assert.equal(garbage.status, 400, garbage.body);
	assert.equal(garbage.json?.error?.code, -32700, garbage.body);
	const notRpc = await post(srv.port, '{"x":1}', h);
	assert.equal(notRpc.status, 400, notRpc.body);
	assert.equal(notRpc.json?.error?.code, -32600, notRpc.body);
	const unknown = await post(srv.port, '{"jsonrpc":"2.0","id":9,"method":"nope"}', h);
	assert.equal(unknown.status, 200, unknown.body);
	assert.equal(unknown.json?.error?.code, -32601, unknown.body);
	const del = await httpRequest(srv.port, { method: 'DELETE', headers: { 'mcp-session-id': sid } });
	assert.equal(del.status, 200, del.body);
});

test('http: GET /mcp gets 405; /healthz says ok', T, async () => {
	const sid = await rawSession(srv.port);
	for (const headers of [{ accept: 'text/event-stream' }, { accept: 'text/event-stream', 'mcp-session-id': sid }]) {
		const r = await httpRequest(srv.port, { path: '/mcp', headers });
		assert.equal(r.status, 405, JSON.stringify(headers));
	}
	const h = await httpRequest(srv.port, { path: '/healthz' });
	assert.equal(h.status, 200);
	assert.equal(h.body.trim(), 'ok');
	await httpRequest(srv.port, { method: 'DELETE', headers: { 'mcp-session-id': sid } });
});

test('http: the per-user sandbox limit refuses a third session until one ends', T, async () => {
	const lim = await httpServe(['--max-sandboxes-per-user', '2', '--workers-min-idle', '3']);
	const [a, b, c] = await Promise.all([0, 1, 2].map(() => lim.connect()));
	await quick(a.client, 'a');
	await quick(b.client, 'b');
	const refused = await callTool(c.client, 'execute_go_code', { code: QUICK('"c"') }, Q);
	assert.equal(refused.isError, true, JSON.stringify(refused));
	// the refusal says the limit and how to get a sandbox back
	assert.equal(text(refused), `${LIMIT_MSG}: the limit is 2; end one of your sessions (close its client, ` +
		'or DELETE /mcp) or wait for an idle one to end after 15m');
	assert.equal((await metrics(lim.port))['kode_gopher_sandboxes{user="local"}'], 2);
	// the sessions that hold sandboxes are untouched
	await quick(a.client, 'a2');
	await end(a);
	await quick(c.client, 'c');
	await quick(b.client, 'b2');
	await end(b);
	await end(c);
	assert.deepEqual(await lim.close(), [], 'processes left behind');
});

test('http: an idle session ends after --session-timeout; its id then gets 404', T, async () => {
	const acctFile = path.join(path.dirname(acctPath), 'idle.jsonl');
	const idle = await httpServe(['--session-timeout', '2s', '--accounting-log', acctFile]);
	const s = await idle.connect();
	const sid = s.sessionId;
	// a call that lasts longer than the timeout is not idleness
	const long = await callTool(s.client, 'execute_go_code', { code: SLOW3 }, Q);
	assert.equal(sc(long)?.result?.kind, 'ok', JSON.stringify(long));
	assert.deepEqual(await s.client.ping(), {});
	const w = await waitFor(() => sessionWorker(idle.pid, sid), { what: `the worker of s=${sid.slice(0, 8)}` });
	await sleep(4000);
	const r = await post(idle.port, PING, { 'mcp-session-id': sid, 'mcp-protocol-version': '2025-11-25' });
	assert.equal(r.status, 404, r.body);
	await assert.rejects(s.client.ping(), (e) => {
		assert.match(String(e?.message), /404|not found/i, String(e));
		return true;
	});
	await waitFor(() => !isAlive(w), { timeout: 5000, what: `worker ${w} to exit` });
	const fin = acct(acctFile).find((l) => l.event === 'session_end' && l.session === sid.slice(0, 8));
	assert.ok(fin, 'a session_end line');
	assert.equal(fin.user, 'local');
	assert.match(fin.reason, /idle/);
	await s.client.close();
	assert.deepEqual(await idle.close(), [], 'processes left behind');
});

test('http: the shared server stops on SIGTERM and leaves no process behind', T, async () => {
	const s = await srv.connect();
	await quick(s.client, 'last');
	const left = await srv.close();
	assert.deepEqual(left, [], 'processes left behind');
	const { code, signal } = await srv.exited;
	assert.equal(signal, null);
	assert.equal(code, 0);
});

test('http: with --workers-min-idle 0 no worker waits, and a new session starts one on demand', T, async () => {
	const own = await httpServe(['--workers-min-idle', '0']);
	try {
		const workers = () => children(own.pid).filter((p) => /\bworker\b/.test(cmdline(p))).length;
		await sleep(300);
		assert.equal(workers(), 0, 'no worker started ahead of need');
		const s = await own.connect();
		assert.deepEqual(await s.client.ping(), {});
		assert.equal(workers(), 1);
	} finally {
		await own.close();
	}
});
