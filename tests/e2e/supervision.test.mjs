/*
 * supervision.test.mjs - the master's supervision of its worker, seen from the client: a worker
 * killed in the middle of a call (the call fails with a sentence, the next one works on the same
 * client), a worker killed while idle, and shutdown on stdin EOF or SIGTERM leaving no process
 * behind.
 *
 * Processes are found in /proc (lib.mjs: workerPid, descendants, procsMatching). Run by
 * tests/run.sh (node --test).
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import test from 'node:test';

import {
	callTool, children, cmdline, connect, descendants, isAlive, McpError, procsMatching, sandboxEntries, sc,
	sleep, waitFor, workerPid, workerState,
} from './lib.mjs';

const T = { timeout: 240_000 };
const Q = { timeout: 60_000 }; /* a call that should take a second: fail fast if it hangs */

const SLEEPER = 'package snippet\n\nimport (\n\t"context"\n\t"time"\n)\n\n' +
	'func run(ctx context.Context) (any, error) {\n\ttime.Sleep(30 * time.Second)\n\treturn 1, nil\n}\n';
const QUICK = (v) => `package snippet\n\nimport "context"\n\nfunc run(ctx context.Context) (any, error) { return ${v}, nil }\n`;

/* agentPid - the sandbox agent a serve process started, or null */
function agentPid(servePid) {
	for (const c of children(servePid))
		if (` ${cmdline(c)} `.includes(' agent ') && isAlive(c))
			return c;
	return null;
}

/* startSleeper - start a 30 s snippet and wait until it is running in the sandbox */
async function startSleeper(s) {
	const phases = [];
	const call = callTool(s.client, 'execute_go_code', { code: SLEEPER }, {
		onprogress: (p) => phases.push(p.message || ''),
	});
	call.catch(() => { /* the test awaits it */ });
	const w = await waitFor(() => {
		const pid = workerPid(s.pid);
		return pid && workerState(pid) === 'busy' ? pid : null;
	}, { timeout: 30_000, what: 'the worker to be busy' });
	// the build is done once the run phase is reported; a build of this takes a second or two
	await waitFor(() => phases.some((m) => m.startsWith('run')), { timeout: 120_000, what: 'the run phase' })
		.catch(() => { /* no run progress: kill while busy anyway */ });
	await sleep(300);
	return { call, worker: w, phases };
}

test('worker SIGKILLed mid-call: the call errors, the next call works on the same client', T, async () => {
	const s = await connect();
	const { call, worker } = await startSleeper(s);
	const agent = agentPid(s.pid);
	process.kill(worker, 'SIGKILL');
	await assert.rejects(call, (e) => {
		assert.ok(e instanceof McpError, String(e));
		assert.equal(e.code, -32603);
		assert.match(e.message, /sandbox process crashed/);
		return true;
	});
	// a fresh worker, and the session goes on: initialize was replayed to it
	const w2 = await waitFor(() => workerPid(s.pid), { timeout: 15_000, what: 'a new worker' });
	assert.notEqual(w2, worker);
	const res = await callTool(s.client, 'execute_go_code', { code: QUICK('"after the crash"') }, Q);
	assert.equal(sc(res)?.result?.kind, 'ok', JSON.stringify(sc(res)));
	assert.equal(sc(res).result.value, 'after the crash');
	const { tools } = await s.client.listTools();
	assert.equal(tools.length, 2);
	// the dead worker's sandbox (and the 30 s program in it) went with it
	if (agent)
		await waitFor(() => !isAlive(agent), { timeout: 5000, what: `the old agent ${agent} to exit` });
	assert.match(s.stderr, /worker pid \d+ killed by signal 9/);
});

test('worker SIGKILLed while idle: the next call works', T, async () => {
	const s = await connect();
	const first = await callTool(s.client, 'execute_go_code', { code: QUICK(1) }, Q);
	assert.equal(sc(first)?.result?.kind, 'ok', JSON.stringify(sc(first)));
	const w = workerPid(s.pid);
	assert.ok(w, 'found the worker');
	assert.match(cmdline(w), /^kode-gopher: worker s=[0-9a-f]{8} idle/);
	process.kill(w, 'SIGKILL');
	await waitFor(() => {
		const n = workerPid(s.pid);
		return n && n !== w;
	}, { timeout: 15_000, what: 'a new worker' });
	assert.deepEqual(await s.client.ping(), {});
	const res = await callTool(s.client, 'execute_go_code', { code: QUICK(2) }, Q);
	assert.equal(sc(res)?.result?.value, 2, JSON.stringify(sc(res)));
});

test('two crashes in a row: the session still goes on', T, async () => {
	const s = await connect();
	let w = await waitFor(() => workerPid(s.pid), { timeout: 15_000, what: 'a worker' });
	for (let i = 0; i < 2; i++) {
		await s.client.ping();
		process.kill(w, 'SIGKILL');
		const old = w;
		w = await waitFor(() => {
			const n = workerPid(s.pid);
			return n && n !== old ? n : null;
		}, { timeout: 15_000, what: 'a new worker' });
	}
	const res = await callTool(s.client, 'execute_go_code', { code: QUICK(3) }, Q);
	assert.equal(sc(res)?.result?.value, 3, JSON.stringify(sc(res)));
});

test('requests sent to a worker that dies before reading them are still answered', T, async () => {
	// SIGSTOP makes the race deterministic: the master hands both requests to a worker that
	// never reads them, then the worker dies. Each must get a response (a result from the next
	// worker, or an error), never silence.
	const s = await connect();
	const w = await waitFor(() => workerPid(s.pid), { timeout: 15_000, what: 'a worker' });
	await s.client.ping();
	process.kill(w, 'SIGSTOP');
	const settle = (p) => p.then((v) => ({ ok: v }), (e) => ({ err: e }));
	const ping = settle(s.client.ping({ timeout: 20_000 }));
	const call = settle(callTool(s.client, 'execute_go_code', { code: QUICK(6) }, { timeout: 20_000 }));
	await sleep(500);
	process.kill(w, 'SIGKILL');
	for (const [what, p] of [['ping', ping], ['tools/call', call]]) {
		const r = await p;
		if (r.err) {
			assert.ok(r.err instanceof McpError, `${what}: ${r.err}`);
			assert.notEqual(r.err.code, -32001, `${what} was never answered (the client timed out)`);
		}
	}
	const res = await callTool(s.client, 'execute_go_code', { code: QUICK(7) }, Q);
	assert.equal(sc(res)?.result?.value, 7, JSON.stringify(sc(res)));
});

/* everything of a session that is alive now: serve, its tree, anything in its sandbox root */
function footprint(s) {
	return [...new Set([s.pid, ...descendants(s.pid), ...procsMatching(s.sandboxRoot)])];
}

/* closeAndWait - end the client's stdin, as a client does, and wait for serve to exit by itself
 * (not the SDK's close(), which would SIGTERM it 2 s on); how long it took, for the diagnostic.
 * How fast is bench/'s business: removing a sandbox's directory is bound by the disk. */
async function closeAndWait(s) {
	const t0 = Date.now();
	s.transport._process.stdin.end();
	await waitFor(() => !isAlive(s.pid), { timeout: 60_000, interval: 20, what: 'serve to exit after stdin EOF' });
	return Date.now() - t0;
}


test('stdin EOF while idle: serve and all its children exit, leaving nothing', T, async (t) => {
	const s = await connect();
	const res = await callTool(s.client, 'execute_go_code', { code: QUICK(4) }, Q);
	assert.equal(sc(res)?.result?.value, 4, JSON.stringify(sc(res)));
	const procs = footprint(s);
	assert.ok(procs.length >= 3, `serve, worker and agent: ${procs.map((p) => `${p}:${cmdline(p)}`).join(', ')}`);
	t.diagnostic(`serve exited ${await closeAndWait(s)} ms after stdin EOF`);
	assert.deepEqual(procs.filter(isAlive).map((p) => `${p}:${cmdline(p)}`), [], 'left running');
	assert.deepEqual(procsMatching(s.sandboxRoot), []);
	assert.deepEqual(sandboxEntries(s.sandboxRoot), [], 'the sandbox was removed');
});

test('stdin EOF during a running call: everything exits, leaving nothing', T, async (t) => {
	const s = await connect();
	const { call } = await startSleeper(s);
	const procs = footprint(s);
	t.diagnostic(`serve exited ${await closeAndWait(s)} ms after stdin EOF`);
	await call.catch(() => {});
	assert.deepEqual(procs.filter(isAlive).map((p) => `${p}:${cmdline(p)}`), [], 'left running');
	assert.deepEqual(procsMatching(s.sandboxRoot), [], 'nothing runs in the sandbox root');
	assert.deepEqual(sandboxEntries(s.sandboxRoot), [], 'the sandbox was removed');
});

test('SIGTERM: serve exits and takes its children with it', T, async () => {
	const s = await connect();
	await callTool(s.client, 'execute_go_code', { code: QUICK(5) }, Q);
	const procs = footprint(s);
	process.kill(s.pid, 'SIGTERM');
	await waitFor(() => procs.every((p) => !isAlive(p)), { timeout: 3000, what: 'every process to exit' })
		.catch(() => assert.fail(`left running: ${procs.filter(isAlive).map((p) => `${p}:${cmdline(p)}`).join(', ')}`));
	await waitFor(() => s.closed, { timeout: 2000, what: 'the client to see the end' });
});
