/*
 * live-go.test.mjs - the checks of live.test.mjs (issue 15) with a second client
 * implementation: the official Go SDK (github.com/modelcontextprotocol/go-sdk), built from the
 * module proxy into tests/e2e/goclient's small client (kg-go-client), over stdio and Streamable
 * HTTP: cancel mid-run and mid-build then an immediate next call; logs at each level; progress
 * heartbeats during a build that is slow for real; resumption after a cut connection (the Go
 * SDK reconnects with Last-Event-ID); 100 abandoned sessions, then a Go SDK session is served.
 *
 * The client is built once per source version into /var/cache/kode-gopher/goclient-<hash>
 * (packaging/install-deps.sh builds it ahead; this file builds it when it is missing).
 */
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';

import { BIN, REPO, cutProxy, httpRequest, httpServe, slowBuild, snippet, waitFor } from './lib.mjs';

const SRC = path.join(REPO, 'tests', 'e2e', 'goclient');

/* goClient - the built client: /var/cache/kode-gopher/goclient-<hash of its sources>/kg-go-client */
function goClient() {
	const h = crypto.createHash('sha256');
	for (const f of ['go.mod', 'go.sum', 'main.go'])
		h.update(fs.readFileSync(path.join(SRC, f)));
	const base = fs.existsSync('/var/cache/kode-gopher') ? '/var/cache/kode-gopher' : os.tmpdir();
	const dir = path.join(base, `goclient-${h.digest('hex').slice(0, 16)}`);
	const bin = path.join(dir, 'kg-go-client');
	if (fs.existsSync(bin))
		return bin;
	fs.mkdirSync(dir, { recursive: true });
	const tmp = `${bin}.${process.pid}`;
	const r = spawnSync('go', ['build', '-o', tmp, '.'], { cwd: SRC, encoding: 'utf8', timeout: 600_000,
		env: { ...process.env, GOFLAGS: '-mod=readonly', CGO_ENABLED: '0' } });
	if (r.status !== 0)
		throw new Error(`cannot build the Go SDK client (go build in ${SRC}): ${r.stderr || r.error}`);
	fs.renameSync(tmp, bin);
	return bin;
}

/* runGo - one scenario; resolves {events, code, stderr}; onEvent(ev, child) sees each line */
function runGo(args, { env = {}, onEvent } = {}) {
	const files = fs.mkdtempSync(path.join(os.tmpdir(), 'kg-go-'));
	const argv = [];
	for (const [k, v] of Object.entries(args)) {
		if (k === 'code' || k === 'next') {
			const f = path.join(files, `${k}.go`);
			fs.writeFileSync(f, v);
			argv.push(`-${k}`, f);
		} else {
			argv.push(`-${k}`, String(v));
		}
	}
	const child = spawn(goClient(), argv, { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
	const events = [];
	let stderr = '', buf = '';
	child.stderr.on('data', (d) => { stderr = (stderr + d).slice(-200_000); });
	child.stdout.on('data', (d) => {
		buf += d;
		let nl;
		while ((nl = buf.indexOf('\n')) >= 0) {
			const ev = JSON.parse(buf.slice(0, nl));
			buf = buf.slice(nl + 1);
			events.push(ev);
			onEvent?.(ev, child);
		}
	});
	const killer = setTimeout(() => child.kill('SIGKILL'), 300_000);
	return new Promise((resolve) => child.on('exit', (code) => {
		clearTimeout(killer);
		fs.rmSync(files, { recursive: true, force: true });
		resolve({ events, code, stderr });
	}));
}

const results = (r) => r.events.filter((e) => e.event === 'result');
const stdioEnv = () => {
	const root = fs.mkdtempSync(path.join(os.tmpdir(), 'kg-e2e-go-'));
	return { env: { KODE_GOPHER_SANDBOX_ROOT: root }, root };
};

const SLEEPER = (tag) => snippet(`
	fmt.Println("started ${tag}")
	time.Sleep(20 * time.Second)
	os.WriteFile("/app/persist/${tag}.done", []byte("x"), 0o644)
	return "finished", nil`, ['fmt', 'os', 'time']);
const CHECK = (tag) => snippet(`
	_, err := os.Stat("/app/persist/${tag}.done")
	return !os.IsNotExist(err), nil`, ['os']);

describe('Go SDK client over stdio', () => {
	before(() => {
		goClient();
	});

	test('cancel mid-run, then the next call: the program never finished', async () => {
		const { env, root } = stdioEnv();
		try {
			const r = await runGo({ bin: BIN, scenario: 'cancel', tag: 'gorun', code: SLEEPER('gorun'),
				next: CHECK('gorun') }, { env });
			assert.equal(r.code, 0, r.stderr.slice(-3000));
			assert.ok(r.events.some((e) => e.event === 'error' && /cancel/.test(e.error)), JSON.stringify(r.events));
			const res = results(r);
			assert.equal(res.length, 1, 'the cancelled call got a result');
			assert.equal(res[0].structuredContent.result.value, false, 'the cancelled program ran to its end');
		} finally {
			fs.rmSync(root, { recursive: true, force: true });
		}
	});

	test('logs at debug, info and warning', async () => {
		// the go tool's own output is what comes at debug: a module outside the lockfile makes
		// go get say what it added (a standard-library build says nothing: it is built directly)
		const code = snippet('fmt.Println("go says hi"); return btree.NewOrderedG[int](2).Len() + 1, nil',
			['fmt', 'github.com/google/btree']);
		const seen = {};
		for (const level of ['debug', 'info', 'warning']) {
			const { env, root } = stdioEnv();
			try {
				const r = await runGo({ bin: BIN, scenario: 'call', level, code }, { env });
				assert.equal(r.code, 0, r.stderr.slice(-3000));
				seen[level] = r.events.filter((e) => e.event === 'log');
			} finally {
				fs.rmSync(root, { recursive: true, force: true });
			}
		}
		const hi = (l) => l.some((e) => e.data.text === 'go says hi' && e.data.stream === 'stdout' && e.level === 'info');
		assert.ok(hi(seen.debug) && hi(seen.info), JSON.stringify(seen));
		assert.ok(seen.debug.some((e) => e.level === 'debug'), 'no debug lines at debug');
		assert.ok(!seen.info.some((e) => e.level === 'debug'), 'debug lines at info');
		assert.deepEqual(seen.warning, [], 'lines below warning at warning');
	});

	test('progress: a total, growing, heartbeats during a slow build', async () => {
		const { env, root } = stdioEnv();
		try {
			const r = await runGo({ bin: BIN, scenario: 'progress', code: slowBuild(Date.now() + 11) }, { env });
			assert.equal(r.code, 0, r.stderr.slice(-3000));
			const res = results(r)[0].structuredContent;
			assert.match(res.stdout, /slow build ran/);
			const p = r.events.filter((e) => e.event === 'progress');
			for (let i = 0; i < p.length; i++) {
				assert.equal(p[i].total, 3);
				if (i)
					assert.ok(p[i].progress > p[i - 1].progress);
			}
			if (res.timings.build_ms > 4000)
				assert.ok(p.some((e) => e.message.startsWith(`build: ${res.build_path === 'direct' ? 'the direct compile and link' : 'go build'} still running`)), JSON.stringify(p));
		} finally {
			fs.rmSync(root, { recursive: true, force: true });
		}
	});
});

describe('Go SDK client over Streamable HTTP', () => {
	let srv, proxy;
	before(async () => {
		goClient();
		proxy = await cutProxy(() => srv.port);
		srv = await httpServe(['--max-sandboxes-per-user', '16', '--max-workers', '8',
			'--unused-session-timeout', '8s', '--allowed-hosts', `127.0.0.1:${proxy.port}`], { keep: true });
	});
	after(async () => {
		await proxy?.close();
		await srv?.close();
	});

	test('cancel mid-build, then the next call', async () => {
		const prog = slowBuild(Date.now() + 13);
		const r = await runGo({ url: srv.url, scenario: 'cancel', code: prog,
			next: snippet('return 5, nil') });
		assert.equal(r.code, 0, r.stderr.slice(-3000));
		assert.ok(r.events.some((e) => e.event === 'error'), 'the cancelled call was answered');
		assert.equal(results(r)[0].structuredContent.result.value, 5);
	});

	test('resumption: the Go SDK reconnects with Last-Event-ID and gets the rest', async () => {
		const code = snippet(`
			for i := 0; i < 6; i++ { fmt.Println("tick", i); time.Sleep(500 * time.Millisecond) }
			return "done", nil`, ['fmt', 'time']);
		let cut = false;
		const r = await runGo({ url: `http://127.0.0.1:${proxy.port}/mcp`, scenario: 'call', code }, {
			onEvent: (ev) => {
				if (!cut && ev.event === 'log' && ev.data?.text === 'tick 1') {
					cut = true;
					proxy.cut();
				}
			},
		});
		assert.ok(cut, 'the call never printed tick 1');
		assert.equal(r.code, 0, r.stderr.slice(-3000));
		assert.equal(results(r)[0]?.structuredContent?.result?.value, 'done', JSON.stringify(r.events.slice(-3)));
		const ticks = r.events.filter((e) => e.event === 'log' && /^tick \d$/.test(e.data?.text)).map((e) => e.data.text);
		assert.deepEqual(ticks, ['tick 0', 'tick 1', 'tick 2', 'tick 3', 'tick 4', 'tick 5']);
	});

	test('100 sessions opened and abandoned, then a Go SDK session is served', async () => {
		for (let i = 0; i < 100; i++)
			await httpRequest(srv.port, { method: 'POST', headers: {
				accept: 'application/json, text/event-stream', 'content-type': 'application/json' },
			body: { jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: '2025-11-25',
				capabilities: {}, clientInfo: { name: `abandoned-go-${i}`, version: '1' } } } });
		const r = await waitFor(async () => {
			const x = await runGo({ url: srv.url, scenario: 'call', code: snippet('return 9, nil') });
			return x.code === 0 ? x : null;
		}, { timeout: 90_000, interval: 500, what: 'a Go SDK session to be served' });
		assert.equal(results(r)[0].structuredContent.result.value, 9);
	});
});
