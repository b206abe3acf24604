/*
 * supervision.test.mjs - workers that cannot start must not make the master start workers in a
 * loop (issue 11 item 5). An LD_PRELOAD shim built here from tests/security/shim_worker.c makes
 * prctl(PR_SET_NO_NEW_PRIVS) fail or crash inside `kode-gopher worker` only, as on a machine
 * that refuses the lockdown, or makes the worker hang before its HELLO. Spawns are counted from
 * serve's own log lines ("started worker pid N"), never by timing a call.
 *
 * Before the fix, serve --http started 139 workers (and their jails) in 6 s in the failing case
 * on a quiet machine; the stdio path throttled, HTTP did not, and no HELLO deadline existed.
 */
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import test from 'node:test';

import { BIN, httpRequest, httpServe, REPO, sleep, waitFor } from '../e2e/lib.mjs';

const T = { timeout: 120_000 };

/* the shim, built once for this file */
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kg-shim-'));
const SHIM = path.join(dir, 'shim_worker.so');
execFileSync(process.env.CC || 'cc', ['-shared', '-fPIC', '-o', SHIM,
	path.join(REPO, 'tests', 'security', 'shim_worker.c')]);
test.after(() => fs.rmSync(dir, { recursive: true, force: true }));

/* an ASan build (make asan) refuses a preload ahead of its runtime unless told it is fine */
const ASAN_OPTIONS = [process.env.ASAN_OPTIONS, 'verify_asan_link_order=0'].filter(Boolean).join(':');

const starts = (log) => (log.match(/started worker pid \d+/g) || []).length;

test('a worker that cannot lock down (prctl fails): serve --http stops starting workers and says why', T, async () => {
	const s = await httpServe([], { env: { ASAN_OPTIONS, LD_PRELOAD: SHIM, KG_SHIM_NNP: 'fail' } });
	try {
		await waitFor(() => /a configuration error .*no more workers will be started/.test(s.stderr),
			{ timeout: 30_000, what: 'the configuration-error line' });
		/* a root serve's worker sets no_new_privs first as it takes its own identity */
		assert.match(s.stderr, /cannot lock the worker down \(no_new_privs|cannot run as the worker's own identity \d+ \(no_new_privs/);
		const n = starts(s.stderr);
		/* the workers started ahead (--workers-min-idle 2) before the first one failed, no more */
		assert.ok(n >= 1 && n <= 2, `started ${n} workers`);
		/* a client asking for a session now gets the reason, not a wait, and no worker starts */
		const r = await httpRequest(s.port, {
			method: 'POST', headers: { accept: 'application/json, text/event-stream' },
			body: { jsonrpc: '2.0', id: 1, method: 'initialize', params: {
				protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 't', version: '1' } } },
		});
		assert.equal(r.status, 503);
		assert.match(r.json?.error?.message || '', /configuration error/);
		assert.equal(starts(s.stderr), n);
		/* and /metrics says the same */
		const m = (await httpRequest(s.port, { path: '/metrics' })).body;
		assert.match(m, new RegExp(`^kode_gopher_workers_started_total ${n}$`, 'm'));
		assert.match(m, /^kode_gopher_workers_stopped 1$/m);
	} finally {
		await s.close();
	}
});

test('a worker that dies while locking down: serve --http throttles (a handful of starts in 6 s, one line per interval)', T, async (t) => {
	const s = await httpServe([], { env: { ASAN_OPTIONS, LD_PRELOAD: SHIM, KG_SHIM_NNP: 'crash' } });
	try {
		await waitFor(() => /before serving any request: a start-up failure/.test(s.stderr),
			{ timeout: 30_000, what: 'the start-up failure line' });
		await sleep(6000);
		const n = starts(s.stderr);
		assert.ok(n <= 6, `started ${n} workers in 6 s`);
		const m = (await httpRequest(s.port, { path: '/metrics' })).body;
		const failed = Number(/^kode_gopher_worker_start_failures_total (\d+)$/m.exec(m)?.[1]);
		assert.ok(failed >= 1 && failed <= n, `start failures ${failed} of ${n} starts`);
		/* the wait grows with each failure: exponential, never reset without a served request */
		const waits = [...s.stderr.matchAll(/the next worker starts in (\d+\.\d) s/g)].map((m) => Number(m[1]));
		/* the figure: 139 workers and jails in 6 s before the throttle */
		t.diagnostic(`started ${n} workers in 6 s, ${failed} start failures; waits logged: ${waits.join(', ')} s`);
		assert.ok(waits.length >= 1, s.stderr.slice(-2000));
		for (let i = 1; i < waits.length; i++)
			assert.ok(waits[i] > waits[i - 1], `waits ${waits.join(', ')} do not grow`);
	} finally {
		await s.close();
	}
});

test('a worker that never says HELLO is killed at the deadline, and that counts as a start-up failure', T, async () => {
	const s = await httpServe(['--workers-min-idle', '1'], { env: { ASAN_OPTIONS, LD_PRELOAD: SHIM, KG_SHIM_NNP: 'stall' } });
	try {
		await waitFor(() => /said no HELLO within \d+ ms/.test(s.stderr),
			{ timeout: 60_000, what: 'the HELLO deadline line' });
		await waitFor(() => /killed by signal 9 \(SIGKILL\) before serving any request/.test(s.stderr),
			{ timeout: 10_000, what: 'the start-up failure line' });
	} finally {
		await s.close();
	}
});

test('stdio: a worker that cannot lock down ends serve with status 1 and the reason, after one start', T, async () => {
	const root = fs.mkdtempSync(path.join(os.tmpdir(), 'kg-e2e-'));
	const child = spawn(BIN, ['serve', '--log-level', 'info'], {
		env: { ...process.env, KODE_GOPHER_SANDBOX_ROOT: root, ASAN_OPTIONS, LD_PRELOAD: SHIM, KG_SHIM_NNP: 'fail' },
		stdio: ['pipe', 'ignore', 'pipe'],
	});
	let stderr = '';
	child.stderr.on('data', (d) => { stderr += d; });
	const exited = new Promise((resolve) => child.on('exit', (code, signal) => resolve({ code, signal })));
	try {
		const { code } = await exited;
		assert.equal(code, 1, stderr.slice(-2000));
		assert.match(stderr, /a configuration error/);
		assert.equal(starts(stderr), 1);
	} finally {
		if (child.exitCode === null)
			child.kill('SIGKILL');
		fs.rmSync(root, { recursive: true, force: true });
	}
});
