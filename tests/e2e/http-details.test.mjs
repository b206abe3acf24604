/*
 * http-details.test.mjs - the Streamable HTTP transport's finer points, with raw HTTP requests
 * against the real `serve --http`: the request id echoed on the transport's own errors (404,
 * 400, 415, 406), a malformed initialize answered with its real -32602, a cancelled request on an
 * application/json POST answered instead of 202, JSON-RPC batches on 2025-03-26 sessions (and
 * only there), an invalid tools/list cursor, error results of the tools carrying
 * structuredContent that matches their outputSchema, and the Accept and Content-Type rules.
 *
 * One shared server for the file (lib.mjs httpServe); the sandbox-limit test starts its own.
 * Run by tests/run.sh (node --test); each test() is one counted result.
 */
import assert from 'node:assert/strict';
import test, { after, before } from 'node:test';

import AjvModule from 'ajv';

import { httpRequest, httpServe, sleep } from './lib.mjs';

const Ajv = AjvModule.default ?? AjvModule;
const T = { timeout: 120_000 };

const QUICK = (v) => `package snippet\n\nimport "context"\n\nfunc run(ctx context.Context) (any, error) { return ${v}, nil }\n`;
const SLEEP = (s) => 'package snippet\n\nimport (\n\t"context"\n\t"time"\n)\n\n' +
	`func run(ctx context.Context) (any, error) {\n\ttime.Sleep(${s} * time.Second)\n\treturn ${s}, nil\n}\n`;
const init = (version, id = 1) => ({
	jsonrpc: '2.0', id, method: 'initialize',
	params: { protocolVersion: version, capabilities: {}, clientInfo: { name: 'raw-details', version: '1' } },
});
const BOTH = 'application/json, text/event-stream';

let srv;

before(async () => {
	srv = await httpServe(['--workers-min-idle', '2'], { keep: true });
});

after(async () => {
	await srv?.close();
});

/* post - a raw POST to /mcp; headers override the SDK-like defaults (undefined drops one) */
function post(body, headers = {}, o = {}) {
	const h = { accept: BOTH, 'content-type': 'application/json', ...headers };
	for (const k of Object.keys(h))
		if (h[k] === undefined)
			delete h[k];
	return httpRequest(srv.port, { method: 'POST', body: typeof body === 'string' ? body : JSON.stringify(body), headers: h, ...o });
}

/* open - initialize at protocol version; returns the headers to send with the session's requests */
async function open(version = '2025-11-25') {
	const r = await post(init(version));
	assert.equal(r.status, 200, r.body);
	const sid = r.headers['mcp-session-id'];
	assert.ok(sid, 'a session id');
	const h = { 'mcp-session-id': sid, 'mcp-protocol-version': version };
	assert.equal((await post({ jsonrpc: '2.0', method: 'notifications/initialized' }, h)).status, 202);
	return h;
}

async function close(h) {
	await httpRequest(srv.port, { method: 'DELETE', headers: { 'mcp-session-id': h['mcp-session-id'] } });
}

/* tools - the session's tools/list, by name */
async function tools(h) {
	const r = await post({ jsonrpc: '2.0', id: 'tl', method: 'tools/list' }, h);
	assert.equal(r.status, 200, r.body);
	return Object.fromEntries(r.json.result.tools.map((t) => [t.name, t]));
}

/* call - a tools/call answered as JSON */
async function call(h, name, args, id = 'c') {
	const r = await post({ jsonrpc: '2.0', id, method: 'tools/call', params: { name, arguments: args } },
		{ ...h, accept: 'application/json' }, { timeout: 90_000 });
	assert.equal(r.status, 200, r.body);
	return r.json;
}

test('transport errors echo the request id when it is readable: 404, 400 bad version, 415, 406', T, async () => {
	const h = await open();
	const unknown = await post({ jsonrpc: '2.0', id: 'ping-404', method: 'ping' },
		{ 'mcp-session-id': '0123456789abcdef0123456789abcdef', 'mcp-protocol-version': '2025-11-25' });
	assert.equal(unknown.status, 404, unknown.body);
	assert.equal(unknown.json?.id, 'ping-404', unknown.body);
	// the id last, after a large params: read from the end of the body
	const big = { jsonrpc: '2.0', method: 'ping', params: { pad: 'x'.repeat(200_000) }, id: 77 };
	const bigUnknown = await post(big, { 'mcp-session-id': '0123456789abcdef0123456789abcdef' });
	assert.equal(bigUnknown.status, 404);
	assert.equal(bigUnknown.json?.id, 77, bigUnknown.body.slice(0, 300));
	const version = await post({ jsonrpc: '2.0', id: 41, method: 'ping' }, { ...h, 'mcp-protocol-version': '1999-01-01' });
	assert.equal(version.status, 400, version.body);
	assert.equal(version.json?.id, 41, version.body);
	assert.equal(version.json?.error?.code, -32000);
	const type = await post({ jsonrpc: '2.0', id: 42, method: 'ping' }, { ...h, 'content-type': 'text/plain' });
	assert.equal(type.status, 415, type.body);
	assert.equal(type.json?.id, 42, type.body);
	const acc = await post({ jsonrpc: '2.0', id: 43, method: 'ping' }, { ...h, accept: 'text/html' });
	assert.equal(acc.status, 406, acc.body);
	assert.equal(acc.json?.id, 43, acc.body);
	// an id that is not there, or not readable, stays null
	const noId = await post('{"jsonrpc":"2.0","method":"ping","id":', { 'mcp-session-id': '0123456789abcdef0123456789abcdef' });
	assert.equal(noId.status, 404);
	assert.equal(noId.json?.id, null);
	await close(h);
});

test('a malformed initialize over HTTP gets its real -32602 (with its id), and no session', T, async () => {
	for (const params of [{}, { protocolVersion: 5, clientInfo: {} }, []]) {
		const r = await post({ jsonrpc: '2.0', id: 9, method: 'initialize', params });
		assert.equal(r.status, 400, r.body);
		assert.equal(r.json?.error?.code, -32602, `${JSON.stringify(params)}: ${r.body}`);
		assert.equal(r.json?.id, 9, r.body);
		assert.match(r.json.error.message, /protocolVersion/);
		assert.equal(r.headers['mcp-session-id'], undefined);
	}
	// a non-initialize request without a session is still 400 -32000, now with its id
	const ping = await post({ jsonrpc: '2.0', id: 'p', method: 'ping' });
	assert.equal(ping.status, 400, ping.body);
	assert.equal(ping.json?.error?.code, -32000, ping.body);
	assert.equal(ping.json?.id, 'p', ping.body);
	const list = await post({ jsonrpc: '2.0', id: 'l', method: 'tools/list' });
	assert.equal(list.status, 400, list.body);
	assert.equal(list.json?.error?.code, -32000, list.body);
	assert.match(list.json.error.message, /initialize/);
});

test('a cancelled request on an application/json POST gets a JSON-RPC error for its id, not 202', T, async () => {
	const h = await open();
	// the first call keeps the session busy, so the second one waits in the queue
	const first = post({ jsonrpc: '2.0', id: 'long', method: 'tools/call', params: { name: 'execute_go_code', arguments: { code: SLEEP(20) } } },
		{ ...h, accept: 'application/json' }, { timeout: 90_000 }).catch((e) => ({ error: e }));
	let answered = null;
	const second = post({ jsonrpc: '2.0', id: 'queued', method: 'tools/call', params: { name: 'execute_go_code', arguments: { code: QUICK(2) } } },
		{ ...h, accept: 'application/json' }, { timeout: 90_000 }).then((r) => (answered = r));
	// the cancellation can only drop the call once the worker has it: send it until it does
	for (let k = 0; k < 100 && !answered; k++) {
		const n = await post({ jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: 'queued', reason: 'test' } }, h);
		assert.equal(n.status, 202, n.body);
		await Promise.race([second, sleep(100)]);
	}
	const r = await second;
	assert.equal(r.status, 200, r.body);
	assert.equal(r.json?.id, 'queued', r.body);
	assert.equal(r.json?.error?.code, -32800, r.body);
	assert.match(r.json.error.message, /cancel/i);
	await close(h);
	await first;
});

test('JSON-RPC batches: accepted on 2025-03-26 sessions, with tool calls; refused on later ones', T, async () => {
	const old = await open('2025-03-26');
	const b = await post([
		{ jsonrpc: '2.0', id: 1, method: 'ping' },
		{ jsonrpc: '2.0', method: 'notifications/initialized' },
		{ jsonrpc: '2.0', id: 2, method: 'tools/list' },
		{ jsonrpc: '2.0', id: 3, method: 'no/such/method' },
	], old);
	assert.equal(b.status, 200, b.body);
	assert.ok(Array.isArray(b.json), b.body);
	const byId = Object.fromEntries(b.json.map((m) => [m.id, m]));
	assert.deepEqual(Object.keys(byId).sort(), ['1', '2', '3']);
	assert.deepEqual(byId[1].result, {});
	assert.ok(byId[2].result.tools.length === 2);
	assert.equal(byId[3].error.code, -32601);
	// tool calls in a batch run in order and the answer waits for the last of them
	const calls = await post([
		{ jsonrpc: '2.0', id: 'a', method: 'tools/call', params: { name: 'execute_go_code', arguments: { code: QUICK('"a"') } } },
		{ jsonrpc: '2.0', id: 'p', method: 'ping' },
		{ jsonrpc: '2.0', id: 'b', method: 'tools/call', params: { name: 'execute_go_code', arguments: { code: QUICK('"b"') } } },
	], { ...old, accept: 'application/json' }, { timeout: 90_000 });
	assert.equal(calls.status, 200, calls.body);
	const got = Object.fromEntries(calls.json.map((m) => [m.id, m]));
	assert.equal(got.a.result.structuredContent.result.value, 'a', calls.body);
	assert.equal(got.b.result.structuredContent.result.value, 'b', calls.body);
	assert.deepEqual(got.p.result, {});
	// only notifications: nothing to answer
	const notes = await post([{ jsonrpc: '2.0', method: 'notifications/initialized' }], old);
	assert.equal(notes.status, 202, notes.body);
	const empty = await post([], old);
	assert.equal(empty.status, 400, empty.body);
	assert.equal(empty.json?.error?.code, -32600);
	await close(old);
	const cur = await open('2025-11-25');
	const refused = await post([{ jsonrpc: '2.0', id: 1, method: 'ping' }], cur);
	assert.equal(refused.status, 400, refused.body);
	assert.equal(refused.json?.error?.code, -32600);
	assert.match(refused.json.error.message, /2025-03-26/);
	await close(cur);
});

test('tools/list with a cursor this server never handed out gets -32602', T, async () => {
	const h = await open();
	for (const cursor of ['bogus', '', 5]) {
		const r = await post({ jsonrpc: '2.0', id: 'cur', method: 'tools/list', params: { cursor } }, h);
		assert.equal(r.status, 200, r.body);
		assert.equal(r.json?.error?.code, -32602, `cursor ${JSON.stringify(cursor)}: ${r.body}`);
	}
	const plain = await post({ jsonrpc: '2.0', id: 'cur', method: 'tools/list', params: {} }, h);
	assert.equal(plain.json?.result?.tools?.length, 2, plain.body);
	await close(h);
});

test('error results of both tools carry structuredContent matching their outputSchema', T, async () => {
	const h = await open();
	const t = await tools(h);
	const ajv = new Ajv({ strict: false });
	const checkExec = ajv.compile(t.execute_go_code.outputSchema);
	const checkDoc = ajv.compile(t.lookup_package_docs.outputSchema);
	for (const args of [{}, { code: 'package x', files: [] }, { code: 5 }, { code: 'package x', timeout_seconds: 0 }, { nope: 1 }]) {
		const r = await call(h, 'execute_go_code', args);
		const res = r.result;
		assert.equal(res?.isError, true, JSON.stringify(r));
		assert.ok(res.structuredContent, `no structuredContent for ${JSON.stringify(args)}`);
		assert.ok(checkExec(res.structuredContent), JSON.stringify(checkExec.errors));
		assert.equal(res.structuredContent.result.kind, 'invalid_arguments');
		assert.equal(res.structuredContent.result.message, res.content[0].text);
	}
	for (const args of [{}, { package: 7 }, { package: 'fmt', extra: 1 }]) {
		const res = (await call(h, 'lookup_package_docs', args)).result;
		assert.equal(res?.isError, true);
		assert.ok(res.structuredContent, `no structuredContent for ${JSON.stringify(args)}`);
		assert.ok(checkDoc(res.structuredContent), JSON.stringify(checkDoc.errors));
	}
	await close(h);
});

test('the sandbox limit refusal carries structuredContent (kind sandbox_limit) matching the schema', T, async () => {
	const lim = await httpServe(['--max-sandboxes-per-user', '1', '--workers-min-idle', '2']);
	try {
		const post2 = (body, headers) => httpRequest(lim.port, { method: 'POST', body, headers: { accept: 'application/json', 'content-type': 'application/json', ...headers }, timeout: 90_000 });
		const opened = [];
		for (let k = 0; k < 2; k++) {
			const r = await post2(init('2025-11-25'));
			assert.equal(r.status, 200, r.body);
			opened.push({ 'mcp-session-id': r.headers['mcp-session-id'], 'mcp-protocol-version': '2025-11-25' });
		}
		const schema = (await post2({ jsonrpc: '2.0', id: 1, method: 'tools/list' }, opened[0])).json.result.tools
			.find((x) => x.name === 'execute_go_code').outputSchema;
		const ok = await post2({ jsonrpc: '2.0', id: 2, method: 'tools/call', params: { name: 'execute_go_code', arguments: { code: QUICK(1) } } }, opened[0]);
		assert.equal(ok.json?.result?.structuredContent?.result?.kind, 'ok', ok.body);
		const refused = await post2({ jsonrpc: '2.0', id: 3, method: 'tools/call', params: { name: 'execute_go_code', arguments: { code: QUICK(1) } } }, opened[1]);
		const res = refused.json?.result;
		assert.equal(res?.isError, true, refused.body);
		assert.match(res.content[0].text, /^too many open sandboxes for this user/);
		assert.equal(res.structuredContent?.result?.kind, 'sandbox_limit', refused.body);
		const check = new Ajv({ strict: false }).compile(schema);
		assert.ok(check(res.structuredContent), JSON.stringify(check.errors));
	} finally {
		await lim.close();
	}
});

test('Accept and Content-Type: a POST must send application/json and accept it', T, async () => {
	const h = await open();
	const ping = { jsonrpc: '2.0', id: 'a', method: 'ping' };
	for (const accept of [undefined, 'text/html', 'text/event-stream', 'application/json;q=0, text/event-stream', 'image/*']) {
		const r = await post(ping, { ...h, accept });
		assert.equal(r.status, 406, `Accept ${accept}: ${r.body}`);
	}
	for (const accept of [BOTH, 'application/json', '*/*', 'application/*', 'text/event-stream; q=0.5, application/json; q=0.9', 'APPLICATION/JSON']) {
		const r = await post(ping, { ...h, accept });
		assert.equal(r.status, 200, `Accept ${accept}: ${r.body}`);
		assert.deepEqual(r.json?.result, {});
	}
	for (const type of [undefined, 'text/plain', 'application/jsonx', 'application/x-www-form-urlencoded', 'multipart/form-data']) {
		const r = await post(ping, { ...h, 'content-type': type });
		assert.equal(r.status, 415, `Content-Type ${type}: ${r.body}`);
	}
	for (const type of ['application/json; charset=utf-8', 'Application/JSON']) {
		const r = await post(ping, { ...h, 'content-type': type });
		assert.equal(r.status, 200, `Content-Type ${type}: ${r.body}`);
	}
	// an initialize is checked the same way, before any worker is spent on it
	const initPlain = await post(init('2025-11-25', 5), { 'content-type': 'text/plain' });
	assert.equal(initPlain.status, 415, initPlain.body);
	assert.equal(initPlain.json?.id, 5);
	assert.equal(initPlain.headers['mcp-session-id'], undefined);
	await close(h);
});
