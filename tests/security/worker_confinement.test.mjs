/*
 * worker_confinement.test.mjs - a worker taken over by its client must not reach the server's
 * secrets or the network (issue 11 item 4): with Landlock (policy/landlock.c) it cannot open the
 * operator's kubeconfig, an ADC file or /etc/shadow, and cannot connect to a loopback TCP
 * listener, while it serves its session normally.
 *
 * The attempts are made from inside the real worker process, after it has confined itself, by
 * the LD_PRELOAD shim tests/security/shim_worker.c (built here): it prints one "kg-probe:" line
 * per attempt. A control run with --seccomp off (which skips the confinement, for debugging)
 * shows the attempts on a file anyone may read and on the listener succeed there, so the probe
 * itself is not what fails; on a root serve the operator's 0600 files stay shut even then, by
 * the worker's own identity (tests/security/privsep.test.mjs).
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import test from 'node:test';

import { callTool, httpServe, REPO, sc, snippet, waitFor } from '../e2e/lib.mjs';

const T = { timeout: 240_000 };

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kg-confine-'));
const SHIM = path.join(dir, 'shim_worker.so');
execFileSync(process.env.CC || 'cc', ['-shared', '-fPIC', '-o', SHIM,
	path.join(REPO, 'tests', 'security', 'shim_worker.c')]);
/* the server's secrets, as an operator has them: a kubeconfig and an ADC file, mode 0600 */
const KUBECONFIG = path.join(dir, 'kubeconfig');
const ADC = path.join(dir, 'application_default_credentials.json');
fs.writeFileSync(KUBECONFIG, 'apiVersion: v1\nkind: Config\nusers: [{name: admin, user: {token: secret}}]\n', { mode: 0o600 });
fs.writeFileSync(ADC, JSON.stringify({ type: 'authorized_user', refresh_token: 'secret' }), { mode: 0o600 });
const CA = ['/etc/ssl/certs/ca-certificates.crt'].find((p) => fs.existsSync(p));
/* a file anyone may read, outside what Landlock lets a worker read */
fs.chmodSync(dir, 0o755);
const READABLE = path.join(dir, 'notes.txt');
fs.writeFileSync(READABLE, 'not a secret, but not the worker\'s business\n', { mode: 0o644 });
const SECRETS = [KUBECONFIG, ADC, '/etc/shadow', READABLE];
const ROOT = process.getuid() === 0;

let listener, port, accepted = 0;
test.before(async () => {
	listener = net.createServer((c) => { accepted++; c.destroy(); });
	await new Promise((r) => listener.listen(0, '127.0.0.1', r));
	port = listener.address().port;
});
test.after(() => {
	listener?.close();
	fs.rmSync(dir, { recursive: true, force: true });
});

/* an ASan build (make asan) refuses a preload ahead of its runtime unless told it is fine */
const ASAN_OPTIONS = [process.env.ASAN_OPTIONS, 'verify_asan_link_order=0'].filter(Boolean).join(':');

const env = () => ({
	ASAN_OPTIONS, LD_PRELOAD: SHIM, KUBECONFIG, GOOGLE_APPLICATION_CREDENTIALS: ADC,
	KG_SHIM_PROBE: [...SECRETS, ...(CA ? [CA] : [])].join(':'), KG_SHIM_PROBE_PORT: String(port),
});

/* probes - the probe lines of the first worker, once all of them are there */
async function probes(s) {
	const n = SECRETS.length + (CA ? 1 : 0) + 1;
	return waitFor(() => {
		const lines = s.stderr.split('\n').filter((l) => l.startsWith('kg-probe: '));
		return lines.length >= n ? lines.slice(0, n) : null;
	}, { timeout: 30_000, what: 'the worker\'s probe lines' });
}

const result = (lines, what) => lines.find((l) => l.startsWith(`kg-probe: ${what}: `))?.split(': ').pop();

test('control: without the confinement (--seccomp off) the same probe opens what its identity may, and connects', T, async () => {
	const s = await httpServe(['--seccomp', 'off', '--workers-min-idle', '1'], { env: env() });
	try {
		const lines = await probes(s);
		assert.equal(result(lines, `open ${READABLE}`), 'opened', lines.join('\n'));
		/* a root serve's worker has an identity of its own: root's 0600 files stay shut */
		for (const p of [KUBECONFIG, ADC, '/etc/shadow'])
			assert.equal(result(lines, `open ${p}`), ROOT || p === '/etc/shadow' ? 'Permission denied' : 'opened', lines.join('\n'));
		assert.equal(result(lines, `connect ${port}`), 'connected', lines.join('\n'));
	} finally {
		await s.close();
	}
});

test('a confined worker cannot open the kubeconfig, the ADC file or /etc/shadow, nor connect to loopback TCP, and serves normally', T, async (t) => {
	const before = accepted;
	const s = await httpServe(['--workers-min-idle', '1', '--log-level', 'debug'], { env: env() });
	try {
		const lines = await probes(s);
		if (/this kernel has no Landlock/.test(s.stderr)) {
			t.skip('this kernel has no Landlock (the worker said so); the seccomp filter is all there is');
			return;
		}
		for (const p of SECRETS)
			assert.equal(result(lines, `open ${p}`), 'Permission denied', lines.join('\n'));
		if (CA)
			assert.equal(result(lines, `open ${CA}`), 'opened', 'CA certificates stay readable');
		const abi = Number(/landlock ABI (\d+) enforced/.exec(s.stderr)?.[1]);
		assert.ok(abi >= 1, 'the worker says which Landlock ABI it enforces');
		const c = result(lines, `connect ${port}`);
		if (abi < 4)
			t.diagnostic(`this kernel's Landlock (ABI ${abi}) has no network rules: connect ${c}`);
		else
			assert.equal(c, 'Permission denied', lines.join('\n'));
		const session = await s.connect();
		const res = await callTool(session.client, 'execute_go_code',
			{ code: snippet('return 6 * 7, nil') }, { timeout: 180_000 });
		assert.equal(sc(res)?.result?.value, 42, JSON.stringify(sc(res)));
		assert.equal(accepted, before, 'the listener saw no connection from the worker');
	} finally {
		await s.close();
	}
});
