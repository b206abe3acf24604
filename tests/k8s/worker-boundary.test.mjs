/*
 * worker-boundary.test.mjs - what a compromised Kubernetes worker can reach (issue 11 item 3),
 * against the real test cluster (tests/k8s/run.sh) with the real worker serving a session.
 *
 * The master does every API call for its workers and hands each only a relay to its own
 * claim's agent (master/sandbox_kube.c). Checked here from the outside, as an attacker inside
 * the worker would see it:
 *   - the worker's memory holds none of the server's credential (the kubeconfig's client key
 *     and certificate), while the master's does (the control: the scan can find it);
 *   - the worker cannot open the kubeconfig, nor connect to the API server at all (probes of
 *     tests/security/shim_worker.c run inside the worker);
 *   - a worker that asks its relay for a raw API path (the shim rewrites its first request) is
 *     ended with a log line naming what it asked for, and nothing is relayed;
 *   - another process cannot use a worker's relay socket.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import test, { after } from 'node:test';

import { callTool, connect, isAlive, sc, snippet, text, workerPid } from '../e2e/lib.mjs';
import { NAMESPACE, REPO, paths, waitFor } from './lib.mjs';

const T = { timeout: 240_000 };
const KUBE = ['--backend', 'kubernetes', '--namespace', NAMESPACE, '--agent-access', 'pod-ip',
	'--credentials', 'none'];

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kg-k8s-boundary-'));
after(() => fs.rmSync(dir, { recursive: true, force: true }));
const SHIM = path.join(dir, 'shim_worker.so');
execFileSync(process.env.CC || 'cc', ['-shared', '-fPIC', '-o', SHIM,
	path.join(REPO, 'tests', 'security', 'shim_worker.c')]);
const ASAN_OPTIONS = [process.env.ASAN_OPTIONS, 'verify_asan_link_order=0'].filter(Boolean).join(':');

const session = (env = {}, args = []) =>
	connect({ args: [...KUBE, ...args], env: { KUBECONFIG: paths.kubeconfig, ASAN_OPTIONS, ...env } });

/* the kubeconfig's credential: its client key and certificate, as PEM bodies */
const kubeconfig = JSON.parse(execFileSync('kubectl', ['--kubeconfig', paths.kubeconfig, 'config',
	'view', '--raw', '-o', 'json']));
const pemLines = (b64) => Buffer.from(b64, 'base64').toString().split('\n')
	.filter((l) => l && !l.startsWith('-----'));
const user = kubeconfig.users[0].user;
/* two full base64 lines of each: long enough not to occur by chance */
const needles = [
	...pemLines(user['client-key-data']).slice(1, 3),
	...pemLines(user['client-certificate-data']).slice(1, 3),
].map((l) => Buffer.from(l));
const apiPort = Number(new URL(kubeconfig.clusters[0].cluster.server).port || 443);

/* memoryHits - how many of the needles occur in the readable memory of process pid */
function memoryHits(pid) {
	const maps = fs.readFileSync(`/proc/${pid}/maps`, 'utf8').trim().split('\n');
	const fd = fs.openSync(`/proc/${pid}/mem`, 'r');
	const found = new Set();
	try {
		for (const line of maps) {
			const [range, perms, , , , name = ''] = line.split(/\s+/);
			if (!perms.startsWith('r') || name.startsWith('[v')) /* [vvar], [vsyscall] */
				continue;
			const [lo, hi] = range.split('-').map((h) => parseInt(h, 16));
			for (let at = lo; at < hi; at += 8 << 20) {
				const len = Math.min(8 << 20, hi - at) + 256; /* a needle across two reads */
				const buf = Buffer.alloc(len);
				let n = 0;
				try {
					n = fs.readSync(fd, buf, 0, Math.min(len, hi - at), at);
				} catch {
					break; /* an unreadable region (a guard page) */
				}
				needles.forEach((nd, i) => {
					if (buf.subarray(0, n).indexOf(nd) >= 0)
						found.add(i);
				});
			}
		}
	} finally {
		fs.closeSync(fd);
	}
	return found.size;
}

const probeLine = (s, what) => s.stderr.split('\n').find((l) => l.startsWith(`kg-probe: ${what}: `));

test('the worker holds none of the server credential and cannot reach the API server', T, async (t) => {
	const s = await session({ LD_PRELOAD: SHIM, KG_SHIM_PROBE: paths.kubeconfig,
		KG_SHIM_PROBE_PORT: String(apiPort) });
	try {
		const res = await callTool(s.client, 'execute_go_code', { code: snippet('return 6 * 7, nil') });
		assert.equal(res.isError, false, `${text(res)}\n${s.stderr.slice(-2000)}`);
		assert.equal(sc(res).result.value, 42);
		const w = workerPid(s.pid);
		assert.ok(w, 'the worker is up');
		assert.equal(needles.length, 4);
		/* control: the master holds the credential, and the scan finds it there */
		assert.ok(memoryHits(s.pid) >= 2, 'the scan finds the credential in the master');
		assert.equal(memoryHits(w), 0, 'no part of the credential is in the worker');
		/* from inside: no kubeconfig, no TCP to the API server (Landlock, where the kernel has it) */
		if (/this kernel has no Landlock/.test(s.stderr)) {
			t.diagnostic('this kernel has no Landlock: the probes are not asserted');
			return;
		}
		assert.match(probeLine(s, `open ${paths.kubeconfig}`) || '', /Permission denied/);
		const abi = Number(/landlock ABI (\d+) enforced/.exec(s.stderr)?.[1]);
		if (abi >= 4)
			assert.match(probeLine(s, `connect ${apiPort}`) || '', /Permission denied/);
		else
			t.diagnostic(`Landlock ABI ${abi} has no network rules: ${probeLine(s, `connect ${apiPort}`)}`);
	} finally {
		await s.close();
	}
});

test('a worker that asks its relay for a raw API path is ended, and nothing is relayed', T, async () => {
	const evil = `/api/v1/namespaces/${NAMESPACE}/secrets`;
	const s = await session({ LD_PRELOAD: SHIM, KG_SHIM_RELAY_PATH: evil });
	try {
		/* the call ends with the worker: a JSON-RPC error naming its SIGKILL */
		const res = await callTool(s.client, 'execute_go_code', { code: snippet('return 1, nil') })
			.then((r) => r, (e) => e);
		assert.ok(res instanceof Error, `the call cannot succeed through an ended worker: ${JSON.stringify(res)}`);
		assert.match(res.message, /worker killed by signal 9 \(SIGKILL\)/);
		await waitFor(() => /asked its agent relay for GET \/api\/v1\/namespaces\/kg-test\/secrets/.test(s.stderr),
			'the relay\'s line about the worker', 30_000);
		assert.match(s.stderr, new RegExp(`worker pid \\d+ \\(claims kg-[0-9a-f]{8}-…\\) asked its agent relay for GET ${evil.replace(/\//g, '\\/')} HTTP\\/1\\.1, which is not one of the agent's endpoints \\(phase SESSION\\); ending it`));
	} finally {
		await s.close();
	}
});

/* relaySocket - the path of worker pid's relay socket, from the kernel's list of unix sockets */
function relaySocket(pid) {
	const name = `/kube-${pid}.sock`;
	const line = fs.readFileSync('/proc/net/unix', 'utf8').split('\n').find((l) => l.endsWith(name));
	return line ? line.split(/\s+/).pop() : null;
}

test('another process cannot use a worker\'s relay, and the worker keeps serving', T, async () => {
	const s = await session();
	try {
		const first = await callTool(s.client, 'execute_go_code', { code: snippet('return 1, nil') });
		assert.equal(first.isError, false, text(first));
		const w = workerPid(s.pid);
		const sock = relaySocket(w);
		assert.ok(sock, 'the worker has a relay socket');
		assert.equal(fs.statSync(sock).mode & 0o777, 0o600);
		const answer = await new Promise((resolve, reject) => {
			const c = net.createConnection({ path: sock });
			let got = '';
			c.on('connect', () => c.write('GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n'));
			c.on('data', (d) => { got += d; });
			c.on('error', () => resolve(got));
			c.on('close', () => resolve(got));
			c.setTimeout(30_000, () => reject(new Error('the relay neither answered nor closed')));
		});
		assert.equal(answer, '', 'nothing comes back to a process that is not the worker');
		await waitFor(() => /the agent relay of worker pid \d+ refused a connection from pid \d+/.test(s.stderr),
			'the refusal in the log', 10_000);
		assert.ok(isAlive(w));
		const again = await callTool(s.client, 'execute_go_code', { code: snippet('return 2, nil') });
		assert.equal(again.isError, false, text(again));
		assert.equal(workerPid(s.pid), w, 'the same worker served it');
	} finally {
		await s.close();
	}
});
