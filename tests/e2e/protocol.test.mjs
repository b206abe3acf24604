/*
 * protocol.test.mjs - the MCP lifecycle of `kode-gopher serve` as the official SDK client sees it:
 * initialize and version negotiation, ping, tools/list, logging/setLevel, unknown methods and
 * tools, cancellation of an unknown request, progress notifications.
 *
 * Run by tests/run.sh (node --test); each test() is one counted result.
 */
import assert from 'node:assert/strict';
import test from 'node:test';

import { callTool, connect, ErrorCode, McpError, rawSession, sc } from './lib.mjs';

const T = { timeout: 60_000 };

test('initialize: serverInfo, capabilities, instructions', T, async () => {
	const s = await connect();
	const info = s.client.getServerVersion();
	assert.equal(info.name, 'kode-gopher');
	assert.equal(typeof info.version, 'string');
	const caps = s.client.getServerCapabilities();
	assert.ok(caps.tools, 'capabilities.tools');
	assert.ok(caps.logging, 'capabilities.logging');
	assert.match(s.client.getInstructions() || '', /execute_go_code/);
});

test('initialize: each supported protocol version is echoed back', T, async () => {
	for (const v of ['2025-11-25', '2025-06-18', '2025-03-26', '2024-11-05']) {
		const r = rawSession();
		const res = await r.initialize(v);
		assert.equal(res.result?.protocolVersion, v, `asked ${v}: ${JSON.stringify(res)}`);
		assert.equal(res.result.serverInfo.name, 'kode-gopher');
		await r.close();
	}
});

test('initialize: an unsupported version gets 2025-11-25', T, async () => {
	const r = rawSession();
	const res = await r.initialize('1999-01-01');
	assert.equal(res.result?.protocolVersion, '2025-11-25', JSON.stringify(res));
	const p = await r.request('ping');
	assert.deepEqual(p.result, {});
});

test('initialize twice is refused and the session goes on', T, async () => {
	const r = rawSession();
	await r.initialize();
	const again = await r.request('initialize', {
		protocolVersion: '2025-11-25', capabilities: {}, clientInfo: { name: 'x', version: '1' },
	});
	assert.ok(again.error, JSON.stringify(again));
	assert.deepEqual((await r.request('ping')).result, {});
});

test('ping', T, async () => {
	const s = await connect({ listTools: false });
	assert.deepEqual(await s.client.ping(), {});
});

test('tools/list: both tools with title, description, schemas and annotations', T, async () => {
	const s = await connect({ listTools: false });
	const { tools } = await s.client.listTools();
	const byName = Object.fromEntries(tools.map((t) => [t.name, t]));
	assert.deepEqual(Object.keys(byName).sort(), ['execute_go_code', 'lookup_package_docs']);
	for (const t of tools) {
		assert.equal(typeof t.title, 'string', `${t.name}.title`);
		assert.ok(t.description.length > 100, `${t.name}.description is a manual`);
		assert.equal(t.inputSchema.type, 'object');
		assert.equal(t.outputSchema?.type, 'object', `${t.name}.outputSchema`);
		assert.equal(typeof t.annotations, 'object', `${t.name}.annotations`);
	}
	const ex = byName.execute_go_code;
	assert.ok(ex.inputSchema.properties.code);
	assert.ok(ex.inputSchema.properties.files);
	assert.ok(ex.inputSchema.properties.timeout_seconds);
	assert.match(ex.description, /func run\(ctx context\.Context\) \(any, error\)/);
	assert.match(ex.description, /app\//, 'tells how helper packages are imported');
	assert.deepEqual(ex.outputSchema.required.sort(), ['phase', 'result']);
	assert.equal(ex.annotations.readOnlyHint, false);
	const doc = byName.lookup_package_docs;
	assert.deepEqual(doc.inputSchema.required, ['package']);
	assert.equal(doc.annotations.readOnlyHint, true);
});

test('logging/setLevel accepts "debug" and rejects "loud" with -32602', T, async () => {
	const s = await connect({ listTools: false });
	assert.deepEqual(await s.client.setLoggingLevel('debug'), {});
	await assert.rejects(s.client.setLoggingLevel('loud'), (e) => {
		assert.ok(e instanceof McpError, String(e));
		assert.equal(e.code, ErrorCode.InvalidParams);
		return true;
	});
	assert.deepEqual(await s.client.ping(), {});
});

test('unknown method → -32601 (server/discover and a made-up one)', T, async () => {
	const s = await connect({ listTools: false });
	const { EmptyResultSchema } = await import('@modelcontextprotocol/sdk/types.js');
	for (const method of ['server/discover', 'no/such/method']) {
		await assert.rejects(s.client.request({ method }, EmptyResultSchema), (e) => {
			assert.ok(e instanceof McpError, String(e));
			assert.equal(e.code, ErrorCode.MethodNotFound, `${method}: ${e.message}`);
			return true;
		});
	}
	assert.deepEqual(await s.client.ping(), {});
});

test('unknown tool → JSON-RPC error -32602', T, async () => {
	const s = await connect({ listTools: false });
	await assert.rejects(callTool(s.client, 'no_such_tool', {}), (e) => {
		assert.ok(e instanceof McpError, String(e));
		assert.equal(e.code, ErrorCode.InvalidParams);
		assert.match(e.message, /no_such_tool/);
		return true;
	});
});

test('notifications/cancelled for an unknown request id is ignored', T, async () => {
	const r = rawSession();
	await r.initialize();
	await r.send({ jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: 424242, reason: 'test' } });
	await r.send({ jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: 'nope' } });
	const p = await r.request('ping');
	assert.deepEqual(p.result, {});
	// nothing but the ping's answer came back after initialize
	const extra = r.messages.filter((m) => m.id !== p.id && m.id !== 1000);
	assert.deepEqual(extra.filter((m) => 'error' in m || 'result' in m), []);
});

test('progress notifications arrive during a build', { timeout: 240_000 }, async () => {
	const s = await connect();
	const seen = [];
	const res = await callTool(s.client, 'execute_go_code', {
		code: 'package snippet\nimport "context"\nfunc run(ctx context.Context) (any, error) { return "progress", nil }\n',
	}, { onprogress: (p) => seen.push(p) });
	assert.equal(sc(res)?.result?.kind, 'ok', JSON.stringify(sc(res)));
	assert.ok(seen.length >= 1, 'no notifications/progress arrived');
	for (const p of seen) {
		assert.equal(typeof p.progress, 'number');
		assert.equal(typeof p.message, 'string');
	}
	// progress only goes to calls that asked for it
	const before = seen.length;
	await callTool(s.client, 'execute_go_code', {
		code: 'package snippet\nimport "context"\nfunc run(ctx context.Context) (any, error) { return 2, nil }\n',
	});
	assert.equal(seen.length, before);
});
