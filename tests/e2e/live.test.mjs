/*
 * live.test.mjs - calls a client can watch and stop (issue 15), with the official TypeScript SDK
 * client against the real server, stdio and Streamable HTTP:
 *   - notifications/cancelled mid-run and mid-build kills what runs, sends no result, and the
 *     next call runs at once (the cancelled program never reaches its end; the cancelled build
 *     never lands in the binary cache); DELETE of the session mid-call; the accounting line
 *     says "cancelled";
 *   - live logs: the program's lines, the build's steps and the go tool's lines as
 *     notifications/message at the level the client set, on the call's own stream, capped;
 *   - progress with a total and heartbeats during a build that is slow for real (a large
 *     generated file, not a sleep);
 *   - SSE: a priming event with an id and retry, ids on every event, and resumption with
 *     Last-Event-ID after the connection of a call in flight was cut (a real TCP proxy in the
 *     test cuts it);
 *   - 100 sessions opened and abandoned, then a new session is served at once.
 * Nothing here asserts a duration: each check is a condition that fails on the old behaviour
 * (the program's end marker, the binary cache, the message ids).
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';

import {
	LoggingMessageNotificationSchema,
} from '@modelcontextprotocol/sdk/types.js';

import {
	Client, StreamableHTTPClientTransport, callTool, connect, cutProxy, httpRequest, httpServe, rawSession,
	sc, slowBuild, snippet, waitFor,
} from './lib.mjs';

/* a program that says it started, then would write a marker into /app/persist after a while */
const SLEEPER = (tag, secs = 20) => snippet(`
	fmt.Println("started ${tag}")
	time.Sleep(${secs} * time.Second)
	os.WriteFile("/app/persist/${tag}.done", []byte("finished"), 0o644)
	return "finished", nil`, ['fmt', 'os', 'time']);

const MARKER_CHECK = (tag) => snippet(`
	_, err := os.Stat("/app/persist/${tag}.done")
	return !os.IsNotExist(err), nil`, ['os']);

/* logs - collect notifications/message of a client */
function logs(client) {
	const got = [];
	client.setNotificationHandler(LoggingMessageNotificationSchema, (n) => got.push(n.params));
	return got;
}

describe('cancellation over stdio', () => {
	let s;
	before(async () => {
		s = await connect({ keep: true });
	});
	after(async () => s?.close());

	test('cancel mid-run: the program is killed, no result, the next call runs at once', async () => {
		const seen = logs(s.client);
		await s.client.setLoggingLevel('info');
		const ac = new AbortController();
		const first = callTool(s.client, 'execute_go_code', { code: SLEEPER('run1') }, { signal: ac.signal });
		await waitFor(() => seen.some((m) => m.data?.text === 'started run1'),
			{ timeout: 120_000, what: 'the program to say it started' });
		ac.abort('the test cancels it');
		await assert.rejects(first);
		const next = await callTool(s.client, 'execute_go_code', { code: MARKER_CHECK('run1') });
		assert.equal(sc(next).result.kind, 'ok', JSON.stringify(sc(next)));
		assert.equal(sc(next).result.value, false, 'the cancelled program ran to its end');
	});

	test('cancel mid-build: the build is killed and never cached, the next call runs at once', async () => {
		const nonce = Date.now();
		const prog = slowBuild(nonce);
		const phases = [];
		const ac = new AbortController();
		const first = callTool(s.client, 'execute_go_code', { code: prog }, {
			signal: ac.signal,
			onprogress: (p) => phases.push(p.message),
		});
		await waitFor(() => phases.some((m) => /^build:/.test(m)), { timeout: 60_000, what: 'the build to start' });
		ac.abort('cancel the build');
		await assert.rejects(first);
		const next = await callTool(s.client, 'execute_go_code', { code: snippet('return 42, nil') });
		assert.equal(sc(next).result.value, 42);
		/* a build that ran to its end would have put its binary in the cache */
		const again = await callTool(s.client, 'execute_go_code', { code: prog });
		assert.equal(sc(again).cached_build, false, 'the cancelled build completed in the background');
		assert.match(sc(again).stdout, /slow build ran/);
	});
});

describe('cancellation on the wire (stdio)', () => {
	test('a cancelled call gets no response; the calls after it do', async () => {
		const r = rawSession();
		try {
			await r.initialize('2025-11-25');
			await r.request('logging/setLevel', { level: 'info' });
			r.send({ jsonrpc: '2.0', id: 50, method: 'tools/call', params: { name: 'execute_go_code',
				arguments: { code: SLEEPER('wire') } } });
			await r.next({ timeout: 120_000, match: (m) => m.method === 'notifications/message' &&
				m.params?.data?.text === 'started wire' });
			r.send({ jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: 50, reason: 'test' } });
			r.send({ jsonrpc: '2.0', id: 51, method: 'tools/call', params: { name: 'execute_go_code',
				arguments: { code: MARKER_CHECK('wire') } } });
			const a = await r.response(51, { timeout: 120_000 });
			assert.equal(a.result.structuredContent.result.value, false);
			/* calls are answered in order: a response to 50 would have come before 51's */
			assert.ok(!r.messages.some((m) => m.id === 50), 'the cancelled request was answered');
		} finally {
			await r.close();
		}
	});
});

describe('live logs and progress (stdio)', () => {
	let s;
	before(async () => {
		s = await connect({ keep: true });
	});
	after(async () => s?.close());

	const PRINTER = snippet(`
		fmt.Println("to stdout")
		fmt.Fprintln(os.Stderr, "to stderr")
		return 1, nil`, ['fmt', 'os']);

	for (const [level, want, not] of [
		['debug', ['step', 'stdout', 'stderr'], []],
		['info', ['step', 'stdout', 'stderr'], []],
		['warning', [], ['step', 'stdout', 'stderr']],
		['error', [], ['step', 'stdout', 'stderr']],
	]) {
		test(`logging/setLevel ${level}: what arrives`, async () => {
			const seen = logs(s.client);
			await s.client.setLoggingLevel(level);
			const res = await callTool(s.client, 'execute_go_code', { code: PRINTER });
			assert.equal(sc(res).result.kind, 'ok');
			for (const m of seen) {
				assert.equal(typeof m.data.text, 'string');
				assert.equal(typeof m.data.phase, 'string');
				assert.equal(typeof m.data.stream, 'string');
			}
			const streams = new Set(seen.map((m) => m.data.stream));
			for (const w of want)
				assert.ok(streams.has(w), `${w} missing at ${level}: ${JSON.stringify(seen)}`);
			for (const n of not)
				assert.ok(!streams.has(n), `${n} sent at ${level}`);
			if (want.length) {
				const out = seen.find((m) => m.data.stream === 'stdout' && m.data.phase === 'run');
				assert.deepEqual([out.data.text, out.data.phase, out.level], ['to stdout', 'run', 'info']);
			}
		});
	}

	test('go tool lines (go: downloading, build output) come at debug only', async () => {
		const seen = logs(s.client);
		await s.client.setLoggingLevel('debug');
		/* a build error: the compiler's lines are the go tool's output */
		const res = await callTool(s.client, 'execute_go_code', { code: 'package main\nfunc main() { x := 1 }\n' });
		assert.equal(sc(res).phase, 'build');
		const tool = seen.filter((m) => m.data.phase === 'build' && m.data.stream === 'stderr');
		assert.ok(tool.some((m) => /declared and not used/.test(m.data.text)), JSON.stringify(seen));
		assert.ok(tool.every((m) => m.level === 'debug'));
		const seen2 = logs(s.client);
		await s.client.setLoggingLevel('info');
		await callTool(s.client, 'execute_go_code', { code: 'package main\nfunc main() { y := 1 }\n' });
		assert.ok(!seen2.some((m) => m.data.phase === 'build' && m.data.stream === 'stderr'));
	});

	test('a flood of output is capped in logs; the result keeps head and tail', async () => {
		const seen = logs(s.client);
		await s.client.setLoggingLevel('info');
		const res = await callTool(s.client, 'execute_go_code', { code: snippet(`
			for i := 0; i < 200000; i++ { fmt.Println("line", i) }
			return 0, nil`, ['fmt']) });
		assert.equal(sc(res).result.kind, 'ok');
		assert.equal(sc(res).stdout_truncated, true);
		assert.match(sc(res).stdout, /line 199999/);
		const lines = seen.filter((m) => m.data.stream === 'stdout');
		assert.ok(lines.length > 0 && lines.length <= 2000, `${lines.length} lines streamed`);
		assert.ok(seen.some((m) => m.level === 'notice' && /not (streamed|sent)/.test(m.data.text)),
			'no word that the logs were capped');
	});

	test('progress has a total, increases, and beats during a slow build', async () => {
		const prog = [];
		const res = await callTool(s.client, 'execute_go_code', { code: slowBuild(Date.now() + 7) }, {
			onprogress: (p) => prog.push(p),
		});
		assert.match(sc(res).stdout, /slow build ran/);
		assert.ok(prog.length >= 3, JSON.stringify(prog));
		for (let i = 0; i < prog.length; i++) {
			assert.equal(prog[i].total, 3);
			assert.ok(prog[i].progress < 3);
			if (i)
				assert.ok(prog[i].progress > prog[i - 1].progress, 'progress went back');
		}
		/* a build that takes more than a heartbeat's interval shows "still running" with times */
		const tool = sc(res).build_path === 'direct' ? 'the direct compile and link' : 'go build';
		const beats = prog.filter((p) => p.message.startsWith(`build: ${tool} still running, `) &&
			/ still running, \d+ s in this step, \d+ s in all$/.test(p.message));
		if (sc(res).timings.build_ms > 4000)
			assert.ok(beats.length >= 1, `no heartbeat in a ${sc(res).timings.build_ms} ms build: ${JSON.stringify(prog)}`);
	});
});

/* ---- HTTP ---- */

/* sseEvents - parse a text/event-stream body into [{id, event, data, retry}] */
function sseEvents(body) {
	const out = [];
	for (const block of body.split(/\n\n/)) {
		if (!block.trim())
			continue;
		const e = { data: '' };
		for (const line of block.split('\n')) {
			const m = /^([a-z]+): ?(.*)$/i.exec(line);
			if (!m)
				continue;
			if (m[1] === 'data')
				e.data += m[2];
			else
				e[m[1]] = m[2];
		}
		out.push(e);
	}
	return out;
}

describe('over Streamable HTTP', () => {
	let srv, acct, proxy;
	before(async () => {
		acct = path.join(fs.mkdtempSync('/tmp/kg-live-'), 'acct.jsonl');
		proxy = await cutProxy(() => srv.port);
		srv = await httpServe(['--accounting-log', acct, '--max-sandboxes-per-user', '16',
			'--allowed-hosts', `127.0.0.1:${proxy.port}`], { keep: true });
	});
	after(async () => {
		await proxy?.close();
		await srv?.close();
	});

	test('cancel mid-run: killed, next call at once, accounting says cancelled', async () => {
		const { client } = await srv.connect();
		const seen = logs(client);
		await client.setLoggingLevel('info');
		const ac = new AbortController();
		const first = callTool(client, 'execute_go_code', { code: SLEEPER('http1') }, { signal: ac.signal });
		await waitFor(() => seen.some((m) => m.data?.text === 'started http1'),
			{ timeout: 120_000, what: 'the program to say it started (on the call\'s SSE stream)' });
		ac.abort('cancel');
		await assert.rejects(first);
		const next = await callTool(client, 'execute_go_code', { code: MARKER_CHECK('http1') });
		assert.equal(sc(next).result.value, false);
		const lines = await waitFor(() => {
			const l = fs.readFileSync(acct, 'utf8').trim().split('\n').map((x) => JSON.parse(x));
			return l.filter((x) => x.event === 'call').length >= 2 ? l : null;
		}, { what: 'two accounting lines' });
		assert.equal(lines.filter((x) => x.event === 'call')[0].kind, 'cancelled');
	});

	test('DELETE of the session mid-call ends the program', async () => {
		const a = await srv.connect();
		const seen = logs(a.client);
		await a.client.setLoggingLevel('info');
		const first = callTool(a.client, 'execute_go_code', { code: SLEEPER('del', 30) });
		first.catch(() => {});
		await waitFor(() => seen.some((m) => m.data?.text === 'started del'), { timeout: 120_000, what: 'start' });
		const r = await httpRequest(srv.port, { method: 'DELETE', headers: { 'mcp-session-id': a.sessionId } });
		assert.equal(r.status, 200);
		/* the program's processes are gone: nothing under the sandbox root runs "started del"'s binary */
		await waitFor(() => !fs.readdirSync('/proc').some((p) => {
			try {
				return /^\d+$/.test(p) && fs.readFileSync(`/proc/${p}/cmdline`, 'latin1').includes(srv.sandboxRoot) &&
					fs.readFileSync(`/proc/${p}/cmdline`, 'latin1').includes('/bin/');
			} catch {
				return false;
			}
		}), { timeout: 10_000, what: 'the program to be gone' });
	});

	test('SSE: priming event with id and retry, an id on every event', async () => {
		const { sessionId } = await srv.connect();
		const headers = { 'mcp-session-id': sessionId, accept: 'application/json, text/event-stream',
			'content-type': 'application/json', 'mcp-protocol-version': '2025-11-25' };
		await httpRequest(srv.port, { method: 'POST', headers, body: { jsonrpc: '2.0', id: 2,
			method: 'logging/setLevel', params: { level: 'info' } } });
		const r = await httpRequest(srv.port, { method: 'POST', headers, body: { jsonrpc: '2.0', id: 3,
			method: 'tools/call', params: { name: 'execute_go_code', arguments: { code: snippet('fmt.Println("hi"); return 1, nil', ['fmt']) } } } });
		assert.equal(r.headers['content-type'], 'text/event-stream');
		const ev = sseEvents(r.body);
		assert.ok(ev[0].id && ev[0].data === '' && /^\d+$/.test(ev[0].retry), JSON.stringify(ev[0]));
		assert.ok(ev.every((e) => e.id), 'an event without an id');
		assert.equal(new Set(ev.map((e) => e.id)).size, ev.length, 'ids repeat');
		assert.equal(JSON.parse(ev.at(-1).data).id, 3);
	});

	test('resumption: a cut connection mid-call gets the rest and the result', async () => {
		{
			const transport = new StreamableHTTPClientTransport(new URL(`http://127.0.0.1:${proxy.port}/mcp`), {
				reconnectionOptions: { initialReconnectionDelay: 50, maxReconnectionDelay: 500,
					reconnectionDelayGrowFactor: 1.5, maxRetries: 20 },
			});
			const client = new Client({ name: 'kg-resume', version: '1' }, { capabilities: {} });
			await client.connect(transport);
			const seen = logs(client);
			await client.setLoggingLevel('info');
			const code = snippet(`
				for i := 0; i < 6; i++ { fmt.Println("tick", i); time.Sleep(500 * time.Millisecond) }
				return "done", nil`, ['fmt', 'time']);
			const call = callTool(client, 'execute_go_code', { code }, { timeout: 120_000 });
			await waitFor(() => seen.some((m) => m.data?.text === 'tick 1'), { timeout: 120_000, what: 'tick 1' });
			proxy.cut();
			const res = await call; /* on a server without resumption it never comes */
			assert.equal(sc(res).result.value, 'done');
			const ticks = seen.filter((m) => /^tick \d$/.test(m.data?.text)).map((m) => m.data.text);
			assert.deepEqual(ticks, ['tick 0', 'tick 1', 'tick 2', 'tick 3', 'tick 4', 'tick 5'],
				'lines were lost or repeated across the cut');
			await transport.close();
		}
	});

});

describe('abandoned sessions (HTTP)', () => {
	let srv;
	before(async () => {
		srv = await httpServe(['--max-workers', '8', '--unused-session-timeout', '8s'], { keep: true });
	});
	after(async () => srv?.close());

	test('100 sessions opened and abandoned, then a new one is served', async () => {
		const init = (i) => httpRequest(srv.port, { method: 'POST', headers: {
			accept: 'application/json, text/event-stream', 'content-type': 'application/json' },
		body: { jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: '2025-11-25',
			capabilities: {}, clientInfo: { name: `abandoned-${i}`, version: '1' } } } });
		const codes = [];
		for (let i = 0; i < 100; i++)
			codes.push((await init(i)).status);
		assert.ok(codes.every((c) => c === 200 || c === 503 || c === 429), codes.join(','));
		assert.ok(codes.includes(503) || codes.includes(429), 'the limits never applied');
		/* abandoned sessions that never made a call give their worker to a new session */
		const { client } = await waitFor(async () => {
			try {
				return await srv.connect();
			} catch {
				return null;
			}
		}, { timeout: 60_000, interval: 200, what: 'a new session' });
		const res = await callTool(client, 'execute_go_code', { code: snippet('return 7, nil') });
		assert.equal(sc(res).result.value, 7);
	});
});

