/*
 * proxy.test.mjs - the Kubernetes backend reaching agents through the API server's pods/proxy,
 * as kode-gopher does from outside a cluster (--agent-access proxy, the default there).
 *
 * kube-apiserver proxies only to routable pod IPs, never to loopback ones, so this file runs
 * only against a cluster started in a network namespace of its own (KG_K8S_NETNS, pod IPs
 * 10.244.x on that namespace's lo; tests/k8s/run.sh does a second, short phase for it and runs
 * this file inside the namespace). Elsewhere every test here is skipped.
 */
import assert from 'node:assert/strict';
import test from 'node:test';

import { callTool, connect, sc, snippet, text } from '../e2e/lib.mjs';
import { NAMESPACE, agentHealth, artifactRoundTrip, getJSON, kubectl, paths, waitFor } from './lib.mjs';

const T = { timeout: 240_000, skip: process.env.KG_K8S_NETNS ? false : 'needs a cluster in its own network namespace (KG_K8S_NETNS)' };
const session = (args = []) => connect({
	args: ['--backend', 'kubernetes', '--namespace', NAMESPACE, '--credentials', 'none', ...args],
	env: { KUBECONFIG: paths.kubeconfig },
});

test('through pods/proxy (the default outside a cluster): claim, execute, docs, session end', T, async () => {
	const s = await session();
	let name;
	try {
		const res = await callTool(s.client, 'execute_go_code', { code: snippet('return "proxied", nil') });
		assert.equal(res.isError, false, `${text(res)}\n${s.stderr.slice(-2000)}`);
		name = sc(res).sandbox;
		assert.equal(sc(res).result.value, 'proxied');
		assert.match(s.stderr, /reached at the API server's pod proxy/);
		await artifactRoundTrip(s, callTool, sc);
		const doc = await callTool(s.client, 'lookup_package_docs', { package: 'strings', symbol: 'Fields' });
		assert.equal(doc.isError, false, text(doc));
	} finally {
		await s.close();
	}
	await waitFor(async () => (await getJSON('sandboxclaim', name)) === null, `claim ${name} deleted`, 20_000);
});

test('through pods/proxy: a pod deleted mid-call is noticed, and the call retried in a new claim', T, async () => {
	const s = await session();
	try {
		const first = sc(await callTool(s.client, 'execute_go_code', { code: snippet('return 1, nil') }));
		const claim = await getJSON('sandboxclaim', first.sandbox);
		const slow = callTool(s.client, 'execute_go_code', {
			code: snippet('time.Sleep(5 * time.Second)\n\treturn "done", nil', ['time']),
		});
		await waitFor(async () => (await agentHealth(claim.status.sandbox.podIPs[0])).busy, 'the call to run', 60_000);
		await kubectl(['delete', 'pod', claim.status.sandbox.name, '--wait=false']);
		const res = await slow;
		assert.equal(res.isError, false, text(res));
		assert.equal(sc(res).retried, true);
		assert.notEqual(sc(res).sandbox, first.sandbox);
	} finally {
		await s.close();
	}
});
