/*
 * manifests.test.mjs - packaging/k8s/*.yaml against the real API server of the test cluster:
 * every file passes `kubectl apply --dry-run=server` (admission, CRD schemas, strict field
 * validation) and names no namespace; the kode-gopher ServiceAccount gets exactly the rights of
 * rbac.yaml, in its own namespace only; the sandbox template and warm pool give Ready sandboxes
 * that pass the "restricted" Pod Security Standard, that a claim made as the ServiceAccount gets,
 * and that agent-sandbox puts under the network policy network-policy.yaml repeats; the server
 * signs users in with Google, its OAuth client mounted from a Secret, not given in a flag.
 *
 * Run by tests/k8s/run.sh (node --test), which sets KUBECONFIG, KG_K8S_NAMESPACE and KG_KUBECTL.
 * By hand, against a cluster of `tests/k8s/cluster.sh up DIR`:
 *   . DIR/env && kubectl create ns kg-test
 *   KG_K8S_NAMESPACE=kg-test node --test tests/k8s/manifests.test.mjs
 * The dry runs use KG_K8S_NAMESPACE; the tests that create objects make a namespace of their own
 * (kg-manifests-<random>) and delete it at the end, so they never touch the shared warm pool.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import test, { after } from 'node:test';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
const PKG = path.resolve(here, '..', '..', 'packaging', 'k8s');
const NAMESPACE = process.env.KG_K8S_NAMESPACE || 'kg-test';
const KUBECTL = process.env.KG_KUBECTL || 'kubectl';
const T = { timeout: 180_000 };
const SKIP = process.env.KUBECONFIG ? undefined
	: 'KUBECONFIG is not set: run tests/k8s/run.sh, or `. DIR/env` of `tests/k8s/cluster.sh up DIR` first';

/* Every manifest packaging/k8s ships; the first test fails if the folder holds another. */
const MANIFESTS = ['sandbox-template.yaml', 'warm-pool.yaml', 'server.yaml', 'rbac.yaml',
	'network-policy.yaml', 'runtimeclass-gvisor.yaml'];

/* kubectl - run kubectl; resolves to { code, stdout, stderr } whatever the exit status */
function kubectl(args, { input, namespace } = {}) {
	const ns = namespace ? ['-n', namespace] : [];
	return new Promise((resolve) => {
		const child = execFile(KUBECTL, [...ns, ...args],
			{ maxBuffer: 64 << 20, timeout: 150_000 }, (err, stdout, stderr) => {
				const code = err ? (typeof err.code === 'number' ? err.code : -1) : 0;
				resolve({ code, stdout, stderr: err && code === -1 ? `${stderr}${err.message}` : stderr });
			});
		child.stdin.end(input === undefined ? '' : typeof input === 'string' ? input : JSON.stringify(input));
	});
}

/* ok - kubectl that must succeed; returns its stdout */
async function ok(args, opts) {
	const r = await kubectl(args, opts);
	assert.equal(r.code, 0, `kubectl ${args.join(' ')} failed (exit ${r.code}): ${r.stderr.trim()}`);
	return r.stdout;
}

const file = (name) => path.join(PKG, name);

/* jsonStream - the JSON values of text written one after the other (kubectl -o json prints a
 * file of several objects so) */
function jsonStream(text) {
	const out = [];
	let depth = 0, start = -1, inString = false, escaped = false;
	for (let i = 0; i < text.length; i++) {
		const ch = text[i];
		if (inString) {
			if (escaped) escaped = false;
			else if (ch === '\\') escaped = true;
			else if (ch === '"') inString = false;
		} else if (ch === '"') {
			inString = true;
		} else if (ch === '{' || ch === '[') {
			if (depth++ === 0) start = i;
		} else if (ch === '}' || ch === ']') {
			if (--depth === 0) out.push(JSON.parse(text.slice(start, i + 1)));
		}
	}
	assert.equal(depth, 0, `kubectl printed incomplete JSON: ${text.slice(0, 200)}`);
	return out;
}

/* objects - a manifest's objects as the API would get them, parsed by kubectl itself */
async function objects(name, namespace) {
	const out = jsonStream(await ok(['create', '--dry-run=client', '-o', 'json', '-f', file(name)], { namespace }));
	return out.flatMap((o) => (o.kind === 'List' ? o.items : [o]));
}

const find = (objs, kind, name) => {
	const o = objs.find((x) => x.kind === kind && x.metadata.name === name);
	assert.ok(o, `no ${kind} ${name} among ${objs.map((x) => `${x.kind}/${x.metadata.name}`).join(', ')}`);
	return o;
};

/* The namespace the tests that create objects use, made on first use, deleted after all. */
let ownNs = null;
async function ownNamespace() {
	if (ownNs)
		return ownNs;
	const name = `kg-manifests-${randomBytes(4).toString('hex')}`;
	await ok(['create', 'namespace', name]);
	ownNs = name;
	// the strictest Pod Security Standard: a pod the manifests make that breaks it is refused
	await ok(['label', 'namespace', name, 'pod-security.kubernetes.io/enforce=restricted']);
	return name;
}
after(async () => {
	if (ownNs)
		await kubectl(['delete', 'namespace', ownNs, '--wait=false']);
});

test('packaging/k8s holds exactly the manifests these tests check', { skip: SKIP }, () => {
	const present = fs.readdirSync(PKG).filter((f) => /\.ya?ml$/.test(f)).sort();
	assert.deepEqual(present, [...MANIFESTS].sort(),
		'a manifest was added or removed: list it in MANIFESTS so that it is checked');
});

for (const name of MANIFESTS) {
	test(`kubectl apply --dry-run=server accepts packaging/k8s/${name}`, { ...T, skip: SKIP }, async () => {
		const r = await kubectl(['apply', '--dry-run=server', '--validate=strict', '-f', file(name)],
			{ namespace: NAMESPACE });
		assert.equal(r.code, 0, `the API server refused ${name}: ${r.stderr.trim()}`);
		// strict validation turns unknown fields into errors; any other warning (a deprecated
		// API, say) is a defect of the manifest too. Not so the one about a live object that
		// another test made with `kubectl create` (it lacks apply's annotation).
		const warnings = r.stderr.split('\n').filter((l) => /warning/i.test(l) &&
			!/missing the kubectl\.kubernetes\.io\/last-applied-configuration annotation/.test(l));
		assert.deepEqual(warnings, [], `kubectl warned about ${name}`);
		const objs = await objects(name);
		for (const o of objs)
			assert.match(r.stdout, new RegExp(`${o.metadata.name} (created|configured|unchanged) \\(server dry run\\)`),
				`${o.kind} ${o.metadata.name} of ${name} is missing from kubectl's answer:\n${r.stdout}`);
	});
}

test('no manifest names a namespace: -n decides where they go', { skip: SKIP }, async () => {
	const elsewhere = `kg-nowhere-${randomBytes(4).toString('hex')}`;
	for (const name of MANIFESTS) {
		// kubectl refuses an object whose namespace differs from -n; one that names none gets -n
		for (const o of await objects(name, elsewhere)) {
			if (o.kind === 'RuntimeClass')
				assert.equal(o.metadata.namespace, undefined, `${name}: RuntimeClass is cluster-wide`);
			else
				assert.equal(o.metadata.namespace, elsewhere, `${name}: ${o.kind} ${o.metadata.name}`);
		}
	}
});

test('the template runs the agent under gVisor, without a token or privileges, ready on /health:8888', { skip: SKIP }, async () => {
	const tmpl = find(await objects('sandbox-template.yaml'), 'SandboxTemplate', 'go-runtime');
	const spec = tmpl.spec.podTemplate.spec;
	assert.equal(spec.runtimeClassName, 'gvisor');
	assert.equal(spec.automountServiceAccountToken, false);
	assert.equal(spec.securityContext.runAsNonRoot, true);
	assert.equal(spec.containers.length, 1);
	const c = spec.containers[0];
	assert.equal(c.securityContext.allowPrivilegeEscalation, false);
	assert.deepEqual(c.securityContext.capabilities.drop, ['ALL']);
	assert.deepEqual(c.ports.map((p) => p.containerPort), [8888]);
	assert.deepEqual(c.readinessProbe.httpGet, { path: '/health', port: 8888 });
	for (const k of ['requests', 'limits'])
		assert.ok(c.resources[k]?.cpu && c.resources[k]?.memory, `resources.${k} must set cpu and memory`);
	// the agent names the memory limit in its results; it must be the container's
	const i = c.args.indexOf('--memory-limit');
	assert.ok(i >= 0, 'the agent is not told the memory limit');
	assert.equal(c.resources.limits.memory, `${Number(c.args[i + 1]) / 1024 ** 3}Gi`);
	// and the disk limit: ephemeral-storage, the local backend's --sandbox-disk default
	const d = c.args.indexOf('--disk-limit');
	assert.ok(d >= 0, 'the agent is not told the disk limit');
	assert.equal(c.resources.limits['ephemeral-storage'], `${Number(c.args[d + 1]) / 1024 ** 3}Gi`);
	assert.equal(c.resources.limits['ephemeral-storage'], '10Gi', 'as --sandbox-disk defaults to');
	assert.ok(c.resources.requests['ephemeral-storage'], 'the scheduler must know the disk a sandbox needs');

	const pool = find(await objects('warm-pool.yaml'), 'SandboxWarmPool', 'go-runtime-pool');
	assert.equal(pool.spec.sandboxTemplateRef.name, 'go-runtime');
});

test("network-policy.yaml's sandbox policy has the template's rules, for the template's pods", { skip: SKIP }, async () => {
	const tmpl = find(await objects('sandbox-template.yaml'), 'SandboxTemplate', 'go-runtime');
	const np = find(await objects('network-policy.yaml'), 'NetworkPolicy', 'kode-gopher-sandbox');
	assert.deepEqual(np.spec.ingress, tmpl.spec.networkPolicy.ingress);
	assert.deepEqual(np.spec.egress, tmpl.spec.networkPolicy.egress);
	assert.deepEqual([...np.spec.policyTypes].sort(), ['Egress', 'Ingress']);
	const podLabels = tmpl.spec.podTemplate.metadata.labels;
	for (const [k, v] of Object.entries(np.spec.podSelector.matchLabels))
		assert.equal(podLabels[k], v, `the policy selects ${k}=${v}, which the template's pods do not carry`);
	// the one peer allowed in is the server: the Deployment's pods must match it
	const dep = find(await objects('server.yaml'), 'Deployment', 'kode-gopher');
	const serverLabels = dep.spec.template.metadata.labels;
	for (const rule of np.spec.ingress)
		for (const peer of rule.from)
			for (const [k, v] of Object.entries(peer.podSelector.matchLabels))
				assert.equal(serverLabels[k], v, `ingress admits ${k}=${v}, which the server's pods do not carry`);
});

test('the kode-gopher ServiceAccount can do exactly what rbac.yaml says, in its own namespace only', { ...T, skip: SKIP }, async () => {
	const ns = await ownNamespace();
	await ok(['apply', '-f', file('server.yaml'), '-f', file('rbac.yaml')], { namespace: ns });
	const sa = `system:serviceaccount:${ns}:kode-gopher`;
	const can = async (args, where = ns) => {
		const r = await kubectl(['auth', 'can-i', `--as=${sa}`, ...args], { namespace: where });
		assert.match(r.stdout.trim(), /^(yes|no)$/, `kubectl auth can-i ${args.join(' ')}: ${r.stderr.trim()}`);
		return r.stdout.trim();
	};
	const allowed = [
		...['get', 'list', 'watch', 'create', 'patch', 'delete'].map((v) => [v, 'sandboxclaims.extensions.agents.x-k8s.io']),
		...['get', 'list', 'watch'].map((v) => [v, 'sandboxes.agents.x-k8s.io']),
		['get', 'pods', '--subresource=proxy'],
		['create', 'pods', '--subresource=proxy'],
	];
	const denied = [
		['update', 'sandboxclaims.extensions.agents.x-k8s.io'],
		['deletecollection', 'sandboxclaims.extensions.agents.x-k8s.io'],
		['patch', 'sandboxclaims.extensions.agents.x-k8s.io', '--subresource=status'],
		...['create', 'patch', 'delete'].map((v) => [v, 'sandboxes.agents.x-k8s.io']),
		...['create', 'patch', 'delete'].map((v) => [v, 'sandboxtemplates.extensions.agents.x-k8s.io']),
		['patch', 'sandboxwarmpools.extensions.agents.x-k8s.io'],
		...['get', 'list', 'create', 'delete'].map((v) => [v, 'pods']),
		['create', 'pods', '--subresource=exec'],
		['create', 'pods', '--subresource=portforward'],
		['get', 'pods', '--subresource=log'],
		['get', 'secrets'],
		['create', 'serviceaccounts', '--subresource=token'],
		['create', 'networkpolicies.networking.k8s.io'],
		['create', 'rolebindings.rbac.authorization.k8s.io'],
	];
	for (const a of allowed)
		assert.equal(await can(a), 'yes', `the ServiceAccount should be allowed to ${a.join(' ')}`);
	for (const a of denied)
		assert.equal(await can(a), 'no', `the ServiceAccount must not be allowed to ${a.join(' ')}`);
	// a Role binds in its namespace only
	for (const a of allowed)
		assert.equal(await can(a, NAMESPACE), 'no', `${a.join(' ')} must not reach namespace ${NAMESPACE}`);
});

test('server.yaml signs users in with Google, its OAuth client read from the Secret kode-gopher-oauth, never a flag value', { ...T, skip: SKIP }, async () => {
	const dep = find(await objects('server.yaml'), 'Deployment', 'kode-gopher');
	const pod = dep.spec.template.spec;
	const c = pod.containers.find((x) => x.name === 'kode-gopher');
	const arg = (name) => c.args.find((a) => a.startsWith(`--${name}=`))?.slice(name.length + 3);
	assert.equal(arg('auth'), 'google');
	assert.equal(arg('http'), '0.0.0.0:8080', 'sign-in may listen on the pod IP');
	assert.match(arg('public-url'), /^https:\/\//);
	assert.ok(arg('allowed-domains') || arg('allowed-users'), 'who may sign in');
	const file = arg('oauth-client-file');
	const mount = c.volumeMounts.find((m) => file.startsWith(`${m.mountPath}/`));
	assert.ok(mount, `${file} is on a mounted volume`);
	assert.equal(mount.readOnly, true);
	const vol = pod.volumes.find((v) => v.name === mount.name);
	assert.equal(vol.secret?.secretName, 'kode-gopher-oauth');
	assert.equal(vol.secret.defaultMode, 0o400);
	assert.ok(!c.args.some((a) => /secret/i.test(a) && !a.startsWith('--oauth-client-file=')), 'no secret in a flag');
	assert.ok(!(c.env || []).some((e) => /secret/i.test(e.name)), 'nor in the environment');
});

test('the server Deployment passes the restricted Pod Security Standard and runs one replica', { ...T, skip: SKIP }, async () => {
	const ns = await ownNamespace();
	const r = await kubectl(['apply', '-f', file('server.yaml'), '-f', file('network-policy.yaml')], { namespace: ns });
	assert.equal(r.code, 0, r.stderr);
	assert.doesNotMatch(r.stderr, /PodSecurity|warning/i, `applying server.yaml warned: ${r.stderr.trim()}`);
	await ok(['rollout', 'status', 'deployment/kode-gopher', '--timeout=90s'], { namespace: ns });
	const pods = JSON.parse(await ok(['get', 'pods', '-l', 'app.kubernetes.io/name=kode-gopher,app.kubernetes.io/component=server',
		'-o', 'json'], { namespace: ns })).items;
	assert.equal(pods.length, 1, 'one server pod');
	assert.equal(pods[0].spec.serviceAccountName, 'kode-gopher');
});

test('the warm pool fills with Ready, restricted-compliant gVisor sandboxes that the ServiceAccount can claim', { ...T, skip: SKIP }, async (t) => {
	const ns = await ownNamespace();
	await ok(['apply', '-f', file('rbac.yaml'), '-f', file('server.yaml')], { namespace: ns });
	// the template's RuntimeClass must exist or its pods are refused; on a cluster that has it,
	// applying the file again changes nothing that matters
	await ok(['apply', '-f', file('runtimeclass-gvisor.yaml')]);

	const tmpl = find(await objects('sandbox-template.yaml'), 'SandboxTemplate', 'go-runtime');
	// Real nodes report ephemeral-storage; a fake node that reports none cannot schedule a pod
	// that requests some, so only there the request is left out.
	const nodes = JSON.parse(await ok(['get', 'nodes', '-o', 'json'])).items;
	if (!nodes.some((n) => n.status?.allocatable?.['ephemeral-storage'])) {
		t.diagnostic('no node reports ephemeral-storage: applying the template without its ephemeral-storage resources');
		for (const c of tmpl.spec.podTemplate.spec.containers)
			for (const k of ['requests', 'limits'])
				delete c.resources?.[k]?.['ephemeral-storage'];
	}
	delete tmpl.metadata.namespace;
	await ok(['apply', '-f', '-'], { namespace: ns, input: tmpl });
	await ok(['apply', '-f', file('warm-pool.yaml')], { namespace: ns });

	const pool = find(await objects('warm-pool.yaml'), 'SandboxWarmPool', 'go-runtime-pool');
	const want = pool.spec.replicas;
	await ok(['wait', 'sandboxwarmpool/go-runtime-pool', `--for=jsonpath={.status.readyReplicas}=${want}`,
		'--timeout=90s'], { namespace: ns });

	// the pods are the template's (admission under "restricted" let them in)
	const pods = JSON.parse(await ok(['get', 'pods', '-l', 'app.kubernetes.io/name=kode-gopher-sandbox', '-o', 'json'],
		{ namespace: ns })).items;
	assert.equal(pods.length, want, `${want} sandbox pods`);
	for (const p of pods) {
		assert.equal(p.spec.runtimeClassName, 'gvisor');
		assert.equal(p.spec.automountServiceAccountToken, false);
		assert.ok(!(p.spec.volumes ?? []).some((v) => v.projected || v.secret), 'no token or secret volume in a sandbox');
		assert.equal(p.spec.containers[0].securityContext.allowPrivilegeEscalation, false);
	}

	// the policy agent-sandbox made from the template has network-policy.yaml's rules
	const made = JSON.parse(await ok(['get', 'networkpolicy', 'go-runtime-network-policy', '-o', 'json'], { namespace: ns }));
	const ours = find(await objects('network-policy.yaml'), 'NetworkPolicy', 'kode-gopher-sandbox');
	assert.deepEqual(made.spec.ingress, ours.spec.ingress);
	assert.deepEqual(made.spec.egress, ours.spec.egress);
	for (const p of pods)
		for (const [k, v] of Object.entries(made.spec.podSelector.matchLabels))
			assert.equal(p.metadata.labels[k], v, `pod ${p.metadata.name} is outside go-runtime-network-policy`);

	// a claim like the server's, made with the ServiceAccount's rights, gets a sandbox
	const claim = {
		apiVersion: 'extensions.agents.x-k8s.io/v1beta1',
		kind: 'SandboxClaim',
		metadata: { name: `manifests-${randomBytes(4).toString('hex')}` },
		spec: {
			warmPoolRef: { name: 'go-runtime-pool' },
			lifecycle: { shutdownTime: new Date(Date.now() + 600_000).toISOString().replace(/\.\d+Z$/, 'Z'), shutdownPolicy: 'Delete' },
		},
	};
	const as = `--as=system:serviceaccount:${ns}:kode-gopher`;
	await ok(['create', as, '-f', '-'], { namespace: ns, input: claim });
	await ok(['wait', as, `sandboxclaim/${claim.metadata.name}`, '--for=condition=Ready', '--timeout=60s'], { namespace: ns });
	const got = JSON.parse(await ok(['get', as, 'sandboxclaim', claim.metadata.name, '-o', 'json'], { namespace: ns }));
	assert.ok(got.status.sandbox?.name, 'the Ready claim names its sandbox');
	assert.ok(got.status.sandbox?.podIPs?.length, 'the Ready claim has the pod IP');
	await ok(['get', as, 'sandbox', got.status.sandbox.name], { namespace: ns });
	await ok(['delete', as, 'sandboxclaim', claim.metadata.name, '--wait=false'], { namespace: ns });
});
