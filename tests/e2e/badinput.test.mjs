/*
 * badinput.test.mjs - what `kode-gopher serve` does with input a well-behaved client never sends:
 * bytes that are not JSON, JSON that is not JSON-RPC, requests before initialize, tool arguments
 * that break the input schema, and 10 MiB messages. After each, the session must go on.
 *
 * Raw tests write bytes with rawSession (the SDK refuses to send such things); schema tests go
 * through the SDK client. Run by tests/run.sh (node --test).
 */
import assert from 'node:assert/strict';
import test from 'node:test';

import { bigRequestLine, callTool, connect, McpError, memKiB, rawSession, text } from './lib.mjs';

const T = { timeout: 60_000 };
const MiB = 1024 * 1024;

/* pingWorks - a fresh ping on a raw session is answered */
async function pingWorks(r) {
	const p = await r.request('ping');
	assert.deepEqual(p.result, {}, JSON.stringify(p));
}

test('not JSON → -32700 with id null, and the session goes on', T, async () => {
	const r = rawSession();
	await r.initialize();
	for (const junk of ['this is not json', '{"jsonrpc":"2.0","id":1,', '\u00ff\u00fe garbage {]']) {
		await r.write(junk + '\n');
		const e = await r.next({ match: (m) => 'error' in m });
		assert.equal(e.error.code, -32700, JSON.stringify(e));
		assert.equal(e.id, null);
		assert.equal(e.jsonrpc, '2.0');
	}
	await r.write(Buffer.from([0xc3, 0x28, 0x0a])); // invalid UTF-8
	const e = await r.next({ match: (m) => 'error' in m });
	assert.ok([-32700, -32600].includes(e.error.code), JSON.stringify(e));
	await pingWorks(r);
});

test('JSON that is not JSON-RPC → -32600', T, async () => {
	const r = rawSession();
	await r.initialize();
	const cases = [
		{ x: 1 },
		{ jsonrpc: '1.0', id: 7, method: 'ping' },
		{ jsonrpc: '2.0', id: 8 },
		{ jsonrpc: '2.0', id: 9, method: 42 },
		{ jsonrpc: '2.0', id: { a: 1 }, method: 'ping' },
		{ jsonrpc: '2.0', id: 10, method: 'ping', params: 'nope' },
		[{ jsonrpc: '2.0', id: 11, method: 'ping' }],
		[],
		{ jsonrpc: '2.0', id: 12, method: 'ping', params: null },
	];
	for (const c of cases) {
		await r.send(c);
		const e = await r.next({ match: (m) => 'error' in m });
		assert.equal(e.error.code, -32600, `${JSON.stringify(c)} → ${JSON.stringify(e)}`);
		assert.equal(typeof e.error.message, 'string');
	}
	await pingWorks(r);
});

test('JSON that is a string, number, true or null (valid JSON, not a request) → -32600', T, async () => {
	// JSON-RPC 2.0: -32700 is for "Invalid JSON was received"; these parse, so they are
	// Invalid Requests (-32600), like any other valid JSON that is not a request object
	const r = rawSession();
	await r.initialize();
	for (const c of ['"just a string"', '42', 'true', 'null']) {
		await r.write(c + '\n');
		const e = await r.next({ match: (m) => 'error' in m });
		assert.equal(e.error.code, -32600, `${c} → ${JSON.stringify(e)}`);
		assert.equal(e.id, null);
	}
	await pingWorks(r);
});

test('unknown method (raw) → -32601 with the request id', T, async () => {
	const r = rawSession();
	await r.initialize();
	const e = await r.request('tools/frobnicate', {});
	assert.equal(e.error?.code, -32601, JSON.stringify(e));
	const d = await r.request('server/discover');
	assert.equal(d.error?.code, -32601, JSON.stringify(d));
	await pingWorks(r);
});

test('a request before initialize gets an error, and initialize afterwards works', T, async () => {
	const r = rawSession();
	const e = await r.request('tools/list');
	assert.ok(e.error, JSON.stringify(e));
	assert.equal(typeof e.error.code, 'number');
	assert.match(e.error.message, /initiali[sz]e/i);
	const c = await r.request('tools/call', { name: 'execute_go_code', arguments: { code: 'package x' } });
	assert.ok(c.error, JSON.stringify(c));
	const init = await r.initialize();
	assert.equal(init.result?.serverInfo?.name, 'kode-gopher', JSON.stringify(init));
	const l = await r.request('tools/list');
	assert.equal(l.result?.tools?.length, 2, JSON.stringify(l).slice(0, 300));
});

test('a response or a blank line from the client is not answered', T, async () => {
	const r = rawSession();
	await r.initialize();
	await r.send({ jsonrpc: '2.0', id: 99, result: {} });
	await r.write('\n   \n\r\n');
	const p = await r.request('ping');
	assert.deepEqual(p.result, {});
	const stray = r.messages.filter((m) => m.id === 99 || m.id === null);
	assert.deepEqual(stray, []);
});

/* schemaError - call execute_go_code with bad arguments; expect a tool result with isError */
async function schemaError(client, args, pattern) {
	const res = await callTool(client, 'execute_go_code', args, { timeout: 30_000 });
	assert.equal(res.isError, true, `${JSON.stringify(args).slice(0, 100)} → ${JSON.stringify(res).slice(0, 300)}`);
	assert.match(text(res), pattern, `${JSON.stringify(args).slice(0, 100)}`);
}

test('execute_go_code arguments that break the input schema → isError naming the problem', T, async () => {
	const s = await connect();
	const c = s.client;
	const code = 'package snippet\nimport "context"\nfunc run(ctx context.Context) (any, error) { return 1, nil }\n';
	await schemaError(c, { code, files: [{ path: 'main.go', content: code }] }, /exactly one of "code".*"files"/);
	await schemaError(c, {}, /exactly one of "code".*"files"/);
	await schemaError(c, { code, timeout_seconds: 'x' }, /timeout_seconds/);
	await schemaError(c, { code, timeout_seconds: 0 }, /timeout_seconds/);
	await schemaError(c, { code, timeout_seconds: 2.5 }, /timeout_seconds/);
	await schemaError(c, { files: 'main.go' }, /"files" must be a non-empty array/);
	await schemaError(c, { files: [] }, /"files" must be a non-empty array/);
	await schemaError(c, { files: [{ path: 'main.go' }] }, /files\[0\]/);
	await schemaError(c, { files: [{ path: 'main.go', content: code, mode: 420 }] }, /files\[0\].*"mode"/);
	await schemaError(c, { code, language: 'go' }, /unknown argument "language"/);
	await schemaError(c, { code: 42 }, /"code" must be a string/);
	await schemaError(c, { code: '' }, /"code" is empty/);
	const doc = await callTool(c, 'lookup_package_docs', { pkg: 'fmt' }, { timeout: 30_000 });
	assert.equal(doc.isError, true);
	assert.match(text(doc), /unknown argument "pkg"/);
	const doc2 = await callTool(c, 'lookup_package_docs', {}, { timeout: 30_000 });
	assert.equal(doc2.isError, true);
	assert.match(text(doc2), /"package"/);
	assert.deepEqual(await c.ping(), {});
});

test('10 MiB of code through the SDK → an McpError about the size limit; the session goes on', { timeout: 120_000 }, async () => {
	const s = await connect();
	const code = 'package snippet\n// ' + 'y'.repeat(10 * MiB) + '\n';
	await assert.rejects(callTool(s.client, 'execute_go_code', { code }, { timeout: 60_000 }), (e) => {
		assert.ok(e instanceof McpError, String(e));
		assert.equal(e.code, -32600);
		assert.match(e.message, /limit/i);
		assert.match(e.message, /bytes/);
		return true;
	});
	assert.deepEqual(await s.client.ping(), {});
	const rss = memKiB(s.pid, 'VmHWM');
	assert.ok(rss !== null && rss < 64 * 1024, `serve peak RSS ${rss} KiB`);
});

test('10 MiB lines (raw, id first and id last) → -32600 with the id; memory stays bounded', { timeout: 120_000 }, async () => {
	const r = rawSession();
	await r.initialize();
	await r.write(bigRequestLine(77, 10 * MiB, { idFirst: true }));
	const a = await r.next({ match: (m) => 'error' in m, timeout: 60_000 });
	assert.equal(a.error.code, -32600, JSON.stringify(a));
	assert.equal(a.id, 77, JSON.stringify(a));
	assert.match(a.error.message, /too large|limit/i);
	await r.write(bigRequestLine('last-id', 10 * MiB, { idFirst: false }));
	const b = await r.next({ match: (m) => 'error' in m, timeout: 60_000 });
	assert.equal(b.error.code, -32600, JSON.stringify(b));
	assert.equal(b.id, 'last-id', JSON.stringify(b));
	// a big line with no usable id still gets an answer (id null)
	await r.write('[' + '1,'.repeat(5 * MiB) + '1]\n');
	const c = await r.next({ match: (m) => 'error' in m, timeout: 60_000 });
	assert.equal(c.error.code, -32600, JSON.stringify(c));
	assert.equal(c.id, null);
	await pingWorks(r);
	const hwm = memKiB(r.pid, 'VmHWM');
	assert.ok(hwm !== null && hwm < 64 * 1024, `serve peak RSS ${hwm} KiB`);
});

test('a message just under the limit is accepted and reaches the tool', { timeout: 120_000 }, async () => {
	const r = rawSession();
	await r.initialize();
	// ~3 MiB of comment: under the 4 MiB message limit, over the 1 MiB per-file limit of the
	// sandbox, so the answer is a tool result (not a protocol error)
	const line = bigRequestLine(5, 3 * MiB);
	assert.ok(line.length < 4 * MiB);
	await r.write(line);
	const res = await r.response(5, { timeout: 60_000 });
	assert.ok(res.result, JSON.stringify(res).slice(0, 500));
	assert.equal(res.result.isError, true);
	assert.equal(res.result.structuredContent?.phase, 'normalize', JSON.stringify(res).slice(0, 500));
	assert.match(res.result.structuredContent.result.message, /main\.go is \d+ bytes; the limit is \d+ bytes/);
	await pingWorks(r);
});

/* FLOOD_BOTH: a MiB and more of output on each stream, half of it bytes JSON must escape (\u0001
 * becomes six bytes, then seven inside the text block): the answer would be many times 4 MiB */
const FLOOD_BOTH = `package snippet

import (
	"context"
	"fmt"
	"os"
	"strings"
)

func run(ctx context.Context) (any, error) {
	line := strings.Repeat("\\x01é\\"\\\\", 16) + "\\n"
	for i := 0; i < 20000; i++ {
		fmt.Print(line)
		fmt.Fprint(os.Stderr, line)
	}
	return "flooded", nil
}
`;

test('output that would pass the 4 MiB message limit is cut to fit, and the call is answered', { timeout: 180_000 }, async () => {
	const s = await connect();
	const r = await callTool(s.client, 'execute_go_code', { code: FLOOD_BOTH });
	const sc = r.structuredContent;
	assert.equal(sc.result?.value, 'flooded', JSON.stringify(sc).slice(0, 500));
	assert.match(sc.output_note, /fits the 4 MiB message limit/);
	for (const k of ['stdout', 'stderr']) {
		assert.match(sc[k], /bytes cut here: with them the answer would pass the 4 MiB message limit/);
		assert.ok(sc[k].startsWith('\u0001é"\\'), `${k} keeps its head`);
	}
	assert.ok(JSON.stringify(r).length <= 4 * MiB, 'the answer fits the limit');
	assert.deepEqual(await s.client.ping(), {});

});
