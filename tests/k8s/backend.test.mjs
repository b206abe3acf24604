/*
 * backend.test.mjs - `kode-gopher serve --backend kubernetes` against the real test cluster
 * (tests/k8s/run.sh): the official MCP SDK client drives kode-gopher, which claims sandboxes
 * from the agent-sandbox warm pool and runs snippets in the real agents the fixture starts
 * behind the pods.
 *
 * Covered: claim and execute (labels, lease), /app/persist across calls, the lease renewed
 * (shutdownTime moves), session end deleting the claim, the pod deleted mid-call (a new claim
 * and one retry), --persistent leaving a claim without lifecycle, --claim reattaching, the
 * per-user limit across claims on the shared server, a claim that never gets Ready, and an API
 * server that is unreachable or refuses (clear errors, nothing leaked). Credentials: client
 * certificates (kubeconfig), an exec credential plugin, and the in-cluster service account
 * with only the RBAC that packaging/k8s/rbac.yaml grants.
 */
import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import test, { after } from 'node:test';

import { BIN, callTool, connect, httpServe, sc, snippet, text, workerPid } from '../e2e/lib.mjs';
import {
	NAMESPACE, REPO, agentHealth, artifactRoundTrip, getJSON, kubectl, listJSON, paths, sleep, waitFor,
} from './lib.mjs';

const T = { timeout: 240_000 };
const KUBE = ['--backend', 'kubernetes', '--namespace', NAMESPACE, '--agent-access', 'pod-ip',
	'--credentials', 'none'];
const scratch = fs.mkdtempSync(path.join(os.tmpdir(), 'kg-k8s-backend-'));
after(() => fs.rmSync(scratch, { recursive: true, force: true }));

/* session - a stdio session on the Kubernetes backend */
const session = (args = [], env = {}) =>
	connect({ args: [...KUBE, ...args], env: { KUBECONFIG: paths.kubeconfig, ...env } });

const claimOf = (name) => getJSON('sandboxclaim', name);
const claimGone = (name) => waitFor(async () => (await claimOf(name)) === null,
	`SandboxClaim ${name} to be deleted`, 20_000);
const persistWrite = (content) => snippet(`
	if err := os.MkdirAll("/app/persist", 0o755); err != nil {
		return nil, err
	}
	old, _ := os.ReadFile("/app/persist/note")
	if err := os.WriteFile("/app/persist/note", []byte(${JSON.stringify(content)}), 0o644); err != nil {
		return nil, err
	}
	_ = os.WriteFile("/app/scratch", []byte("x"), 0o644)
	_, scratchErr := os.Stat("/app/scratch.old")
	_ = os.Rename("/app/scratch", "/app/scratch.old")
	return map[string]any{"old": string(old), "scratchWiped": scratchErr != nil}, nil`, ['os']);

/* run - execute_go_code, asserting it ran; returns structuredContent */
async function run(s, code, args = {}) {
	const res = await callTool(s.client, 'execute_go_code', { code, ...args });
	assert.equal(res.isError, false, `the call failed: ${text(res)}\n${s.stderr.slice(-2000)}`);
	return sc(res);
}

/* kubeconfigWith - a copy of the test kubeconfig with its user (and optionally server) swapped */
function kubeconfigWith(name, { user, server }) {
	const cfg = JSON.parse(execFileSync('kubectl', ['--kubeconfig', paths.kubeconfig, 'config', 'view',
		'--raw', '-o', 'json']));
	if (user)
		cfg.users[0].user = user;
	if (server)
		cfg.clusters[0].cluster.server = server;
	const file = path.join(scratch, name);
	fs.writeFileSync(file, JSON.stringify(cfg), { mode: 0o600 });
	return file;
}

test('the first call claims a sandbox from the warm pool and runs the snippet there', T, async () => {
	const s = await session(['--claim-lease', '30s']);
	try {
		const out = await run(s, snippet('return 6 * 7, nil'));
		assert.equal(out.result.value, 42);
		assert.match(out.sandbox, /^kg-[0-9a-f]{8}-/);
		const claim = await claimOf(out.sandbox);
		assert.ok(claim, `the claim ${out.sandbox} exists while the session lives`);
		assert.equal(claim.spec.warmPoolRef.name, 'go-runtime-pool');
		assert.equal(claim.spec.lifecycle.shutdownPolicy, 'Delete');
		const left = (Date.parse(claim.spec.lifecycle.shutdownTime) - Date.now()) / 1000;
		assert.ok(left > 5 && left <= 31, `shutdownTime is now + the 30 s lease (${left} s left)`);
		assert.equal(claim.metadata.labels['app.kubernetes.io/managed-by'], 'kode-gopher');
		assert.equal(claim.metadata.labels['kode-gopher.dev/user'], 'local');
		assert.ok(out.timings.claim_ms >= 0);

		/* later calls reuse it; /app is wiped but /app/persist stays */
		const a = await run(s, persistWrite('first'));
		const b = await run(s, persistWrite('second'));
		assert.equal(a.sandbox, out.sandbox);
		assert.equal(b.sandbox, out.sandbox);
		assert.equal(a.result.value.old, '');
		assert.equal(b.result.value.old, 'first');
		assert.equal(b.result.value.scratchWiped, true, '/app outside persist/ was wiped between calls');

		/* an artifact's bytes come back raw through the relay, as content and as a resource */
		await artifactRoundTrip(s, callTool, sc);

		/* lookup_package_docs runs in the same pod */
		const doc = await callTool(s.client, 'lookup_package_docs', { package: 'strings', symbol: 'Cut' });
		assert.equal(doc.isError, false, text(doc));
		assert.match(text(doc), /func Cut/);
		assert.equal(sc(doc).text.length > 0, true);
	} finally {
		await s.close();
	}
});

test('the lease is renewed while the session lives: shutdownTime moves forward', T, async () => {
	const s = await session(['--claim-lease', '15s']);
	try {
		const out = await run(s, snippet('return 1, nil'));
		const first = (await claimOf(out.sandbox)).spec.lifecycle.shutdownTime;
		/* renewed every third of the lease (5 s) */
		const later = await waitFor(async () => {
			const t = (await claimOf(out.sandbox))?.spec?.lifecycle?.shutdownTime;
			return t && Date.parse(t) > Date.parse(first) ? t : null;
		}, 'shutdownTime to move forward', 20_000);
		assert.ok(Date.parse(later) > Date.parse(first));
		/* the lease outlived its first expiry: the claim is still there, and still works */
		await sleep(Math.max(0, Date.parse(first) - Date.now()) + 1500);
		assert.ok(await claimOf(out.sandbox), 'the claim outlived its first shutdownTime');
		assert.equal((await run(s, snippet("return 2, nil"))).result.value, 2);
	} finally {
		await s.close();
	}
});

test('session end deletes the claim, and its sandbox goes with it', T, async () => {
	const s = await session();
	const out = await run(s, snippet('return "x", nil'));
	const claim = await claimOf(out.sandbox);
	const sandboxName = claim.status.sandbox.name;
	await s.close();
	await claimGone(out.sandbox);
	await waitFor(async () => (await getJSON('sandbox', sandboxName)) === null,
		`the claimed Sandbox ${sandboxName} to be deleted`, 30_000);
});

test('a pod deleted in the middle of a call: a new claim, and the call retried once', T, async () => {
	const s = await session();
	try {
		const first = await run(s, snippet('return "warm", nil'));
		const claim = await claimOf(first.sandbox);
		const pod = claim.status.sandbox.name;
		const slow = callTool(s.client, 'execute_go_code', {
			code: snippet('time.Sleep(6 * time.Second)\n\treturn "slept", nil', ['time']),
		});
		/* wait until the run is under way in the sandbox, then delete its pod */
		await waitFor(async () => (await agentHealth(claim.status.sandbox.podIPs[0])).busy,
			'the agent to be busy with the call', 60_000);
		await kubectl(['delete', 'pod', pod, '--wait=false']);
		const res = await slow;
		assert.equal(res.isError, false, text(res));
		const out = sc(res);
		assert.equal(out.result.value, 'slept');
		assert.equal(out.retried, true);
		assert.notEqual(out.sandbox, first.sandbox, 'the retry ran under a new claim');
		await claimGone(first.sandbox);
		assert.ok(await claimOf(out.sandbox));
	} finally {
		await s.close();
	}
});

test('a worker killed while it holds a claim: the master deletes the claim, and the session carries on', T, async () => {
	const s = await session();
	try {
		const first = await run(s, snippet('return 1, nil'));
		process.kill(workerPid(s.pid), 'SIGKILL');
		await claimGone(first.sandbox);
		const again = await run(s, snippet('return 2, nil'));
		assert.equal(again.result.value, 2);
		assert.notEqual(again.sandbox, first.sandbox, 'the new worker made a claim of its own');
		assert.match(s.stderr, /deleted SandboxClaim kg-test\/kg-[0-9a-z-]+, left behind by a worker that died/);
	} finally {
		await s.close();
	}
});

test('--persistent leaves a claim without lifecycle, and --claim reattaches to it', T, async () => {
	const s = await session(['--persistent']);
	let name;
	try {
		const out = await run(s, persistWrite('kept'));
		name = out.sandbox;
		assert.equal((await claimOf(name)).spec.lifecycle, undefined, 'a persistent claim has no lease');
	} finally {
		await s.close();
	}
	try {
		await sleep(1000);
		const claim = await claimOf(name);
		assert.ok(claim, 'the claim stays after the session');
		assert.equal(claim.spec.lifecycle, undefined);
		const health = await agentHealth(claim.status.sandbox.podIPs[0]);
		assert.equal(health.claimed, false, 'its agent was released for a later session');

		/* reattach: the same sandbox, its /app/persist intact; without --persistent the
		 * reattached claim takes the lease and is deleted at the end */
		const r = await session(['--claim', name, '--claim-lease', '60s']);
		try {
			const out = await run(r, persistWrite('again'));
			assert.equal(out.sandbox, name);
			assert.equal(out.result.value.old, 'kept');
			const c = await claimOf(name);
			assert.equal(c.spec.lifecycle.shutdownPolicy, 'Delete', 'the reattached claim took the lease');
		} finally {
			await r.close();
		}
		await claimGone(name);
	} finally {
		await kubectl(['delete', 'sandboxclaim', name, '--ignore-not-found', '--wait=false']);
	}
});

test('--claim naming a claim that does not exist: a clear error, nothing created', T, async () => {
	const s = await session(['--claim', 'kg-no-such-claim']);
	try {
		const before = (await listJSON('sandboxclaims')).length;
		const res = await callTool(s.client, 'execute_go_code', { code: snippet('return 1, nil') });
		assert.equal(res.isError, true);
		assert.match(text(res), /no SandboxClaim named kg-no-such-claim in namespace kg-test/);
		/* it carries on in a new sandbox only after the claim's sandbox died, not when the claim is missing */
		assert.equal((await listJSON('sandboxclaims')).length, before);
	} finally {
		await s.close();
	}
});

test('a cold pool: the claim becomes Ready later, and the watch sees it', T, async () => {
	const pool = await getJSON('sandboxwarmpool', 'go-runtime-pool');
	const replicas = pool.spec.replicas;
	await kubectl(['patch', 'sandboxwarmpool', 'go-runtime-pool', '--type=merge', '-p', '{"spec":{"replicas":0}}']);
	const s = await session();
	try {
		await waitFor(async () => (await listJSON('sandboxes')).every((x) => x.metadata.ownerReferences?.some(
			(o) => o.kind === 'SandboxClaim')), 'the warm pool to be empty', 30_000);
		const out = await run(s, snippet('return "cold", nil'));
		assert.equal(out.result.value, 'cold');
		assert.match(s.stderr, /watching SandboxClaim kg-[0-9a-z-]+ from resourceVersion \d+/);
	} finally {
		await s.close();
		await kubectl(['patch', 'sandboxwarmpool', 'go-runtime-pool', '--type=merge', '-p',
			JSON.stringify({ spec: { replicas } })]);
	}
});

test('a claim that never becomes Ready: the error names the claim and its condition; the claim is deleted', T, async () => {
	const s = await session(['--warm-pool', 'no-such-pool', '--claim-ready-timeout', '3s']);
	const notReady = /SandboxClaim kg-test\/(kg-[0-9a-z-]+) was not Ready after 3 s: ([^.]+)\./;
	let m, m2;
	try {
		const res = await callTool(s.client, 'execute_go_code', { code: snippet('return 1, nil') });
		assert.equal(res.isError, true);
		m = notReady.exec(text(res));
		assert.ok(m, text(res));
		assert.match(m[2], /condition Ready is False \(reason|no Ready condition/);
		assert.match(text(res), /warm pool no-such-pool/);
		/* the next call gives up that claim and makes a new one */
		const again = await callTool(s.client, 'execute_go_code', { code: snippet('return 1, nil') });
		m2 = notReady.exec(text(again));
		assert.ok(m2, text(again));
		assert.notEqual(m2[1], m[1]);
		await claimGone(m[1]);
	} finally {
		await s.close();
	}
	await claimGone(m2[1]);
});

test('the shared server keeps the per-user limit across claims', T, async () => {
	const srv = await httpServe([...KUBE, '--max-sandboxes-per-user', '1'],
		{ env: { KUBECONFIG: paths.kubeconfig } });
	try {
		const a = await srv.connect();
		const b = await srv.connect();
		const ra = await callTool(a.client, 'execute_go_code', { code: snippet('return "a", nil') });
		assert.equal(ra.isError, false, text(ra));
		const rb = await callTool(b.client, 'execute_go_code', { code: snippet('return "b", nil') });
		assert.equal(rb.isError, true);
		assert.match(text(rb), /too many open sandboxes for this user/);
		const mine = await listJSON('sandboxclaims', { selector: 'kode-gopher.dev/user=local' });
		assert.deepEqual(mine.map((c) => c.metadata.name), [sc(ra).sandbox],
			'only the allowed session holds a claim');
		/* a session's end frees its slot for the other */
		await a.transport.terminateSession();
		await claimGone(sc(ra).sandbox);
		const again = await waitFor(async () => {
			const r = await callTool(b.client, 'execute_go_code', { code: snippet('return "b", nil') });
			return r.isError ? null : r;
		}, 'the second session to get a sandbox', 20_000);
		assert.equal(sc(again).result.value, 'b');
	} finally {
		await srv.close();
	}
	/* the server's shutdown deleted the claims of its sessions */
	await waitFor(async () => (await listJSON('sandboxclaims',
		{ selector: 'kode-gopher.dev/user=local' })).length === 0, 'no claims left', 20_000);
});

test('an unreachable API server: a clear error, and the session keeps serving', T, async () => {
	const cfg = kubeconfigWith('unreachable', { server: 'https://127.0.0.1:9' });
	const before = (await listJSON('sandboxclaims')).length;
	const s = await session([], { KUBECONFIG: cfg });
	try {
		const res = await callTool(s.client, 'execute_go_code', { code: snippet('return 1, nil') });
		assert.equal(res.isError, true);
		assert.match(text(res), /Kubernetes API server at https:\/\/127\.0\.0\.1:9 is unreachable/);
		await s.client.ping();
		const tools = await s.client.listTools();
		assert.equal(tools.tools.length, 2);
	} finally {
		await s.close();
	}
	assert.equal((await listJSON('sandboxclaims')).length, before);
});

test('an API server that refuses (a user without RBAC): the error carries its reason', T, async () => {
	/* a client certificate for a user no role binds, signed by the cluster's CA */
	const key = path.join(scratch, 'nobody.key'), csr = path.join(scratch, 'nobody.csr');
	const crt = path.join(scratch, 'nobody.crt');
	execFileSync('openssl', ['req', '-new', '-newkey', 'rsa:2048', '-nodes', '-keyout', key, '-out', csr,
		'-subj', '/CN=kg-nobody'], { stdio: 'ignore' });
	execFileSync('openssl', ['x509', '-req', '-in', csr, '-CA', path.join(paths.pki, 'ca.crt'), '-CAkey',
		path.join(paths.pki, 'ca.key'), '-CAcreateserial', '-out', crt, '-days', '1'], { stdio: 'ignore' });
	const cfg = kubeconfigWith('nobody', { user: { 'client-certificate': crt, 'client-key': key } });
	const before = (await listJSON('sandboxclaims')).length;
	const s = await session([], { KUBECONFIG: cfg });
	try {
		const res = await callTool(s.client, 'execute_go_code', { code: snippet('return 1, nil') });
		assert.equal(res.isError, true);
		assert.match(text(res), /refused POST .*sandboxclaims \(HTTP 403 Forbidden\).*kg-nobody/);
	} finally {
		await s.close();
	}
	assert.equal((await listJSON('sandboxclaims')).length, before);
});

test('a bad kubeconfig stops serve at start-up with a sentence', T, () => {
	const r = spawnSync(BIN, ['serve', ...KUBE, '--context', 'no-such-context'], {
		env: { ...process.env, KUBECONFIG: paths.kubeconfig }, input: '', encoding: 'utf8', timeout: 20_000,
	});
	assert.equal(r.status, 2);
	assert.match(r.stderr, /--backend kubernetes: kubeconfig has no context named "no-such-context" \(contexts: /);
	const none = spawnSync(BIN, ['serve', ...KUBE, '--kubeconfig', path.join(scratch, 'missing')], {
		env: { ...process.env, KUBERNETES_SERVICE_HOST: '' }, input: '', encoding: 'utf8', timeout: 20_000,
	});
	assert.equal(none.status, 2);
	assert.match(none.stderr, /kubeconfig: cannot read .*missing: No such file or directory/);
});

test('an exec credential plugin run by the master supplies the credential', T, async () => {
	/* the plugin hands out the test admin's client certificate, as gke-gcloud-auth-plugin hands out tokens */
	const raw = JSON.parse(execFileSync('kubectl', ['--kubeconfig', paths.kubeconfig, 'config', 'view', '--raw',
		'-o', 'json']));
	const u = raw.users[0].user;
	const pem = (field, file) => (u[`${field}-data`] ? Buffer.from(u[`${field}-data`], 'base64').toString()
		: fs.readFileSync(path.resolve(path.dirname(paths.kubeconfig), u[field]), 'utf8'));
	const cred = {
		apiVersion: 'client.authentication.k8s.io/v1', kind: 'ExecCredential',
		status: { clientCertificateData: pem('client-certificate'), clientKeyData: pem('client-key'),
			expirationTimestamp: new Date(Date.now() + 3600_000).toISOString() },
	};
	const plugin = path.join(scratch, 'kg-test-auth-plugin');
	const log = path.join(scratch, 'plugin.log');
	fs.writeFileSync(path.join(scratch, 'cred.json'), JSON.stringify(cred), { mode: 0o600 });
	fs.writeFileSync(plugin, `#!/bin/sh\necho "$KUBERNETES_EXEC_INFO" >> ${log}\ncat ${path.join(scratch, 'cred.json')}\n`,
		{ mode: 0o700 });
	const cfg = kubeconfigWith('exec', { user: { exec: {
		apiVersion: 'client.authentication.k8s.io/v1', command: plugin, args: [], interactiveMode: 'Never',
		installHint: 'install kg-test-auth-plugin',
	} } });
	const s = await session([], { KUBECONFIG: cfg });
	try {
		const out = await run(s, snippet('return "via plugin", nil'));
		assert.equal(out.result.value, 'via plugin');
		assert.match(fs.readFileSync(log, 'utf8'), /"kind":"ExecCredential"/);
		assert.match(s.stderr, /credentials from an exec plugin/);
	} finally {
		await s.close();
	}
	/* a failing plugin: serve refuses to start, with the plugin's install hint */
	fs.writeFileSync(plugin, '#!/bin/sh\necho "no credentials here" >&2\nexit 1\n', { mode: 0o700 });
	const r = spawnSync(BIN, ['serve', ...KUBE], { env: { ...process.env, KUBECONFIG: cfg }, input: '',
		encoding: 'utf8', timeout: 20_000 });
	assert.equal(r.status, 2);
	assert.match(r.stderr, /credential plugin .*exited with status 1\. install kg-test-auth-plugin/);
	assert.match(r.stderr, /no credentials here/);
});

test('in a cluster: the pod service account with only the RBAC of packaging/k8s/rbac.yaml is enough', T, async () => {
	const rbac = path.join(REPO, 'packaging', 'k8s', 'rbac.yaml');
	await kubectl(['apply', '-f', rbac]);
	await kubectl(['create', 'serviceaccount', 'kode-gopher']).catch((e) => {
		if (!/AlreadyExists|already exists/.test(e.stderr ?? ''))
			throw e;
	});
	const token = (await kubectl(['create', 'token', 'kode-gopher', '--duration', '1h'])).trim();
	const sa = fs.mkdtempSync(path.join(scratch, 'sa-'));
	const raw = JSON.parse(execFileSync('kubectl', ['--kubeconfig', paths.kubeconfig, 'config', 'view', '--raw',
		'-o', 'json']));
	const cl = raw.clusters[0].cluster;
	fs.writeFileSync(path.join(sa, 'ca.crt'), cl['certificate-authority-data']
		? Buffer.from(cl['certificate-authority-data'], 'base64')
		: fs.readFileSync(path.resolve(path.dirname(paths.kubeconfig), cl['certificate-authority'])));
	fs.writeFileSync(path.join(sa, 'token'), token, { mode: 0o600 });
	fs.writeFileSync(path.join(sa, 'namespace'), NAMESPACE);
	const url = new URL(cl.server);
	/* no kubeconfig at all: in-cluster configuration, agent on the pod IP (auto) */
	const s = await connect({
		args: ['--backend', 'kubernetes', '--credentials', 'none'],
		env: { KUBECONFIG: '', HOME: sa, KUBERNETES_SERVICE_HOST: url.hostname,
			KUBERNETES_SERVICE_PORT: url.port, KODE_GOPHER_SERVICEACCOUNT_DIR: sa },
	});
	let name;
	try {
		const out = await run(s, snippet('return "in-cluster", nil'));
		name = out.sandbox;
		assert.equal(out.result.value, 'in-cluster');
		assert.match(s.stderr, /context in-cluster, server https:\/\/127\.0\.0\.1:\d+, namespace kg-test/);
	} finally {
		await s.close();
	}
	await claimGone(name);
});
