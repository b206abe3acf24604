/*
 * smoke.test.mjs - the test cluster itself: the warm pool's sandboxes become Ready with a real
 * agent behind each pod, a SandboxClaim on the pool gets one of them, a deleted pod comes back
 * with a new uid and a fresh (unclaimed) agent, and deleting the claim stops its agent.
 *
 * These check the fixture the kubernetes backend's tests stand on (cluster.sh, agents.mjs), so a
 * failure here explains failures there. Each test makes and deletes its own claim. Run by
 * tests/k8s/run.sh (node --test).
 */
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import test from 'node:test';

import {
	NAMESPACE, POOL, agentEvents, agentGone, agentHealth, agentRequest, agentRunning, claimReady, condition,
	createClaim, deleteObject, getJSON, kubectl, listJSON, paths, podPort, uniqueName, waitFor, waitHealth,
} from './lib.mjs';

const T = { timeout: 120_000 };

/* poolSandboxes - the Sandboxes the warm pool owns now (a claimed one is no longer its own) */
async function poolSandboxes() {
	return (await listJSON('sandboxes.agents.x-k8s.io')).filter((s) =>
		(s.metadata.ownerReferences ?? []).some((o) => o.kind === 'SandboxWarmPool' && o.name === POOL));
}

/* withClaim - run fn with a fresh Ready claim ({ name, claim, pod, ip, port }); delete it after */
async function withClaim(t, fn) {
	const name = uniqueName('smoke');
	t.after(() => deleteObject('sandboxclaim', name));
	await createClaim(name);
	const ready = await claimReady(name);
	return fn({ name, ...ready });
}

test('the warm pool fills with Ready sandboxes, each pod with an unclaimed agent on its IP', T, async () => {
	const pool = await getJSON('sandboxwarmpool', POOL);
	assert.ok(pool, `no SandboxWarmPool ${NAMESPACE}/${POOL}`);
	const want = pool.spec.replicas;
	assert.ok(want >= 1, `the pool asks for ${want} replicas`);
	const pods = await waitFor(async () => {
		const sandboxes = await poolSandboxes();
		if (sandboxes.length !== want || sandboxes.some((s) => condition(s, 'Ready') !== 'True'))
			return null;
		const ps = await Promise.all(sandboxes.map((s) => getJSON('pod', s.metadata.name)));
		return ps.every((p) => p?.status?.podIP && p.status.phase === 'Running') ? ps : null;
	}, `${want} Ready sandboxes in the pool ${POOL}, their pods Running with an IP`);
	for (const pod of pods) {
		const health = await waitHealth(pod.status.podIP, podPort(pod));
		assert.deepEqual(health, { ok: true, claimed: false, busy: false }, `${pod.metadata.name}: /health`);
		assert.ok(agentRunning(pod.metadata.uid), `no agent process for pod ${pod.metadata.name} (uid ${pod.metadata.uid})`);
		assert.ok(fs.existsSync(path.join(paths.agents, pod.metadata.uid, 'app')), 'the pod\'s sandbox directory');
	}
	assert.equal(new Set(pods.map((p) => p.status.podIP)).size, pods.length, 'each pod has an IP of its own');
});

test('a SandboxClaim on the pool goes Ready with its pod\'s IP, and the agent there answers', T, async (t) => {
	await withClaim(t, async ({ name, claim, pod, ip, port }) => {
		assert.equal(claim.spec.warmPoolRef.name, POOL);
		assert.deepEqual(claim.status.sandbox.podIPs, [pod.status.podIP], `claim ${name}: status.sandbox.podIPs`);
		assert.equal(port, 8888, 'the template\'s container port');
		const health = await waitHealth(ip, port);
		assert.deepEqual(health, { ok: true, claimed: false, busy: false });
		assert.ok(agentRunning(pod.metadata.uid), `no agent for the claimed pod ${pod.metadata.name}`);
	});
});

test('a deleted pod comes back under the same name with a new uid and a fresh agent', T, async (t) => {
	await withClaim(t, async ({ name, pod, ip, port }) => {
		await waitHealth(ip, port);
		/* claim the agent, as a worker would: the fresh one must not remember it */
		const secret = randomBytes(32).toString('hex');
		const r = await agentRequest(ip, port, 'POST', '/claim', { body: { secret } });
		assert.equal(r.status, 200, `POST /claim: ${JSON.stringify(r.body)}`);
		assert.equal((await agentHealth(ip, port)).claimed, true);

		const old = pod.metadata.uid;
		await kubectl(['delete', 'pod', pod.metadata.name, '--wait=false']);
		const fresh = await waitFor(async () => {
			const p = await getJSON('pod', pod.metadata.name);
			return p && p.metadata.uid !== old && p.status?.podIP && !p.metadata.deletionTimestamp ? p : null;
		}, `pod ${pod.metadata.name} to come back with a new uid and an IP`);
		await waitFor(() => agentGone(old), `the agent of the old pod (uid ${old}) to be stopped and its directory removed`);

		const newIP = fresh.status.podIP;
		const health = await waitFor(async () => {
			const h = await agentHealth(newIP, podPort(fresh));
			return h.claimed === false ? h : null;
		}, `an unclaimed agent on ${newIP} for the new pod`);
		assert.deepEqual(health, { ok: true, claimed: false, busy: false });
		assert.ok(agentRunning(fresh.metadata.uid), `no agent for the new pod (uid ${fresh.metadata.uid})`);

		/* the claim survives the pod's death and points at the new pod */
		const again = await claimReady(name);
		assert.equal(again.pod.metadata.uid, fresh.metadata.uid);
		assert.equal(condition(again.claim, 'Ready'), 'True');
	});
});

test('deleting the claim deletes its pod and stops its agent', T, async (t) => {
	await withClaim(t, async ({ name, pod, ip, port }) => {
		await waitHealth(ip, port);
		const uid = pod.metadata.uid;
		assert.ok(agentRunning(uid));
		await kubectl(['delete', 'sandboxclaim', name, '--wait=false']);
		await waitFor(async () => (await getJSON('pod', pod.metadata.name))?.metadata.uid !== uid,
			`pod ${pod.metadata.name} (uid ${uid}) to be deleted with its claim`);
		await waitFor(() => agentGone(uid), `the agent of pod ${pod.metadata.name} (uid ${uid}) to be stopped`);
		const stops = agentEvents().filter((e) => e.event === 'stop' && e.uid === uid);
		assert.equal(stops.length, 1, 'one stop line in agents.log');
		assert.equal(stops[0].ip, ip);
	});
});
