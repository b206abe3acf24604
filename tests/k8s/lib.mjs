/*
 * lib.mjs - shared helpers of the Kubernetes tests (tests/k8s/*.test.mjs): kubectl against the
 * test cluster that tests/k8s/run.sh started, polling, SandboxClaims, the agents that the agents
 * fixture (agents.mjs) runs behind the sandbox pods, and the paths of the cluster directory.
 *
 * Environment (set by run.sh): KG_K8S_DIR (the cluster directory of `cluster.sh up`),
 * KUBECONFIG, KG_K8S_NAMESPACE (default kg-test), KG_K8S_POOL (the SandboxWarmPool, default
 * go-runtime-pool), KG_KUBECTL (default kubectl from PATH), KG_BIN (the kode-gopher binary),
 * KG_RUNTIME_DIR (the Go caches), KG_K8S_NETNS (set when the cluster and the tests run in a
 * network namespace of their own; see README.md).
 */
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
export const REPO = path.resolve(here, '..', '..');

export const DIR = process.env.KG_K8S_DIR || '';
if (!DIR)
	throw new Error('KG_K8S_DIR is not set: run the Kubernetes tests with tests/k8s/run.sh');
export const NAMESPACE = process.env.KG_K8S_NAMESPACE || 'kg-test';
export const POOL = process.env.KG_K8S_POOL || 'go-runtime-pool';
export const KUBECTL = process.env.KG_KUBECTL || 'kubectl';
export const BIN = process.env.KG_BIN || path.join(REPO, 'build', 'kode-gopher');
export const RUNTIME_DIR = process.env.KG_RUNTIME_DIR || '/var/cache/kode-gopher/runtime';

/* paths - the files of the cluster directory that tests look at */
export const paths = {
	dir: DIR,
	kubeconfig: process.env.KUBECONFIG || path.join(DIR, 'kubeconfig'),
	pki: path.join(DIR, 'pki'),                     /* ca.crt, ca.key: sign more client certificates */
	logs: path.join(DIR, 'logs'),                   /* one log per cluster process */
	agentsLog: path.join(DIR, 'logs', 'agents.log'), /* the fixture's start/stop lines */
	agentLogs: path.join(DIR, 'logs', 'agents'),    /* each agent's own output */
	agents: path.join(DIR, 'agents'),               /* one sandbox directory per pod uid */
};

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/* kubectl - run kubectl against the test cluster; resolves to its stdout, rejects with its
 * stderr. Options: input (stdin; an object is sent as JSON), namespace (default NAMESPACE;
 * null for none, as for cluster-scoped kinds or -A) */
export function kubectl(args, { input, namespace = NAMESPACE, timeout = 60_000 } = {}) {
	const ns = namespace ? ['-n', namespace] : [];
	const all = ['--kubeconfig', paths.kubeconfig, ...ns, ...args];
	return new Promise((resolve, reject) => {
		const child = execFile(KUBECTL, all, { maxBuffer: 64 << 20, timeout }, (err, stdout, stderr) => {
			if (err) {
				const e = new Error(`kubectl ${args.join(' ')} failed: ${stderr.trim() || err.message}`);
				e.stderr = stderr;
				reject(e);
			} else {
				resolve(stdout);
			}
		});
		if (input !== undefined)
			child.stdin.end(typeof input === 'string' ? input : JSON.stringify(input));
		else
			child.stdin.end();
	});
}

/* getJSON - one object as parsed JSON, or null if it does not exist */
export async function getJSON(kind, name, { namespace = NAMESPACE } = {}) {
	try {
		return JSON.parse(await kubectl(['get', kind, name, '-o', 'json'], { namespace }));
	} catch (e) {
		if (/\(NotFound\)|not found/.test(e.stderr ?? ''))
			return null;
		throw e;
	}
}

/* listJSON - the items of a kind, optionally with a label selector */
export async function listJSON(kind, { namespace = NAMESPACE, selector } = {}) {
	const sel = selector ? ['-l', selector] : [];
	return JSON.parse(await kubectl(['get', kind, ...sel, '-o', 'json'], { namespace })).items;
}

/* apply - kubectl apply an object (or YAML text) */
export const apply = (obj, { namespace = NAMESPACE } = {}) =>
	kubectl(['apply', '-f', '-'], { input: obj, namespace });

/* waitFor - poll fn until it returns something truthy and return that. An exception thrown by
 * fn counts as "not yet" (a connection refused, an object not there yet); after ms the last one
 * is part of the error, which names `what`. */
export async function waitFor(fn, what, ms = 30_000, interval = 200) {
	const until = Date.now() + ms;
	let last;
	for (;;) {
		try {
			const v = await fn();
			if (v)
				return v;
			last = undefined;
		} catch (e) {
			last = e;
		}
		if (Date.now() >= until)
			throw new Error(`timed out after ${ms} ms waiting for ${what}${last ? `; last error: ${last.message}` : ''}`);
		await sleep(interval);
	}
}

/* uniqueName - a DNS-label name no other test uses */
export const uniqueName = (prefix) => `${prefix}-${randomBytes(4).toString('hex')}`;

/* condition - the status of one condition of an object ("True", "False", or undefined) */
export const condition = (obj, type) => obj?.status?.conditions?.find((c) => c.type === type)?.status;

/* createClaim - a SandboxClaim on the warm pool (it is deleted with its sandbox and pod) */
export function createClaim(name, { pool = POOL, labels = {}, namespace = NAMESPACE } = {}) {
	return apply({
		apiVersion: 'extensions.agents.x-k8s.io/v1beta1',
		kind: 'SandboxClaim',
		metadata: { name, labels },
		spec: { warmPoolRef: { name: pool } },
	}, { namespace });
}

/* deleteObject - delete an object if it exists, without waiting for its finalizers */
export const deleteObject = (kind, name, { namespace = NAMESPACE } = {}) =>
	kubectl(['delete', kind, name, '--ignore-not-found', '--wait=false'], { namespace });

/* claimReady - wait until the claim is Ready with a pod IP; returns { claim, pod, ip, port } */
export async function claimReady(name, { namespace = NAMESPACE, ms = 30_000 } = {}) {
	return waitFor(async () => {
		const claim = await getJSON('sandboxclaim', name, { namespace });
		const ip = claim?.status?.sandbox?.podIPs?.[0];
		if (condition(claim, 'Ready') !== 'True' || !ip)
			return null;
		const pod = await getJSON('pod', claim.status.sandbox.name, { namespace });
		if (!pod || pod.status?.podIP !== ip)
			return null;
		return { claim, pod, ip, port: podPort(pod) };
	}, `SandboxClaim ${namespace}/${name} to be Ready with a pod IP`, ms);
}

/* podPort - the agent's port: the pod's first container port (8888 if it declares none) */
export function podPort(pod) {
	const p = pod?.spec?.containers?.[0]?.ports?.[0]?.containerPort;
	return Number.isInteger(p) ? p : 8888;
}

/* checkReachable - pod IPs are loopback addresses, except when the whole cluster runs in its own
 * network namespace: then only a process inside that namespace may contact them (outside, such
 * an address would be routed out to a real network) */
function checkReachable(ip) {
	if (/^127\./.test(ip))
		return;
	const netns = process.env.KG_K8S_NETNS;
	let inside = false;
	try {
		inside = Boolean(netns) && fs.statSync('/proc/self/ns/net').ino === fs.statSync(`/run/netns/${netns}`).ino;
	} catch {
		inside = false;
	}
	if (!inside)
		throw new Error(`refusing to contact ${ip}: pod IPs outside 127.0.0.0/8 are only reachable inside the cluster's network namespace (KG_K8S_NETNS)`);
}

/* agentRequest - one HTTP request to a pod's agent; resolves to { status, body } (body parsed
 * as JSON when it is JSON) */
export function agentRequest(ip, port, method, urlPath, { body, headers = {}, timeout = 10_000 } = {}) {
	checkReachable(ip);
	const data = body === undefined ? undefined : JSON.stringify(body);
	return new Promise((resolve, reject) => {
		const req = http.request({
			host: ip, port, method, path: urlPath, agent: false, timeout,
			headers: { ...headers, ...(data ? { 'content-type': 'application/json', 'content-length': Buffer.byteLength(data) } : {}) },
		}, (res) => {
			let text = '';
			res.setEncoding('utf8');
			res.on('data', (d) => { text += d; });
			res.on('end', () => {
				let parsed = text;
				try {
					parsed = JSON.parse(text);
				} catch { /* not JSON: keep the text */ }
				resolve({ status: res.statusCode, body: parsed });
			});
		});
		req.on('timeout', () => req.destroy(new Error(`${method} http://${ip}:${port}${urlPath}: no answer in ${timeout} ms`)));
		req.on('error', reject);
		req.end(data);
	});
}

/* agentHealth - GET /health of a pod's agent: its JSON ({ok, claimed, busy}), or an exception */
export async function agentHealth(ip, port = 8888) {
	const r = await agentRequest(ip, port, 'GET', '/health');
	if (r.status !== 200)
		throw new Error(`GET http://${ip}:${port}/health answered ${r.status}: ${JSON.stringify(r.body)}`);
	return r.body;
}

/* waitHealth - wait until the agent answers /health (kwok marks a pod Ready before its agent
 * listens, so the first connections may be refused) */
export const waitHealth = (ip, port = 8888, ms = 30_000) =>
	waitFor(() => agentHealth(ip, port), `the agent on ${ip}:${port} to answer GET /health`, ms);

/* agentEvents - the fixture's log as [{ time, event: start|stop|exited, pod, uid, ip }] */
export function agentEvents() {
	let text = '';
	try {
		text = fs.readFileSync(paths.agentsLog, 'utf8');
	} catch {
		return [];
	}
	const out = [];
	for (const line of text.split('\n')) {
		const m = /^(\S+) (start|stop|exited) (\S+) uid=(\S+) ip=(\S+)/.exec(line);
		if (m)
			out.push({ time: m[1], event: m[2], pod: m[3], uid: m[4], ip: m[5], line });
	}
	return out;
}

/* agentPids - the pids of the `kode-gopher jail` processes the fixture runs for a pod uid */
export function agentPids(uid) {
	const want = `--dir\0${path.join(paths.agents, uid)}\0`;
	const pids = [];
	for (const p of fs.readdirSync('/proc')) {
		if (!/^\d+$/.test(p))
			continue;
		try {
			const cmd = fs.readFileSync(`/proc/${p}/cmdline`, 'latin1');
			if (cmd.includes('\0jail\0') && cmd.includes(want))
				pids.push(Number(p));
		} catch { /* gone already */ }
	}
	return pids;
}

/* agentGone - has the fixture stopped the pod's agent and removed its sandbox? */
export const agentGone = (uid) =>
	agentEvents().some((e) => e.event === 'stop' && e.uid === uid) &&
	!fs.existsSync(path.join(paths.agents, uid)) && agentPids(uid).length === 0;

/* agentRunning - does the fixture run an agent for the pod uid (started, not stopped)? */
export const agentRunning = (uid) => {
	const ev = agentEvents().filter((e) => e.uid === uid);
	return ev.length > 0 && ev[ev.length - 1].event === 'start' && agentPids(uid).length > 0;
};

/*
 * artifactRoundTrip - a call that writes a 300 KiB PNG-signed file to /app/out, through a
 * session on the Kubernetes backend: its bytes come back exact as image content and through
 * resources/read (the worker reads them raw with the agent's POST /files, which the master's
 * relay and the API server's pod proxy carry as application/x-kode-gopher-file). callTool, sc:
 * tests/e2e/lib.mjs's.
 */
export async function artifactRoundTrip(s, callTool, sc) {
	const want = Buffer.alloc(300 << 10);
	for (let i = 0; i < want.length; i++)
		want[i] = (i * 13) & 255;
	Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]).copy(want);
	const code = `package main

import "os"

func main() {
	b := make([]byte, 300<<10)
	for i := range b {
		b[i] = byte(i * 13)
	}
	copy(b, "\\x89PNG\\r\\n\\x1a\\n")
	os.WriteFile("out/p.png", b, 0o644)
}
`;
	const res = await callTool(s.client, 'execute_go_code', { code });
	const img = res.content.find((c) => c.type === 'image');
	if (!img || !Buffer.from(img.data, 'base64').equals(want))
		throw new Error(`the artifact did not come back byte for byte: ${JSON.stringify(sc(res)).slice(0, 1500)}`);
	const r = await s.client.readResource({ uri: 'sandbox:///app/out/p.png' });
	if (!Buffer.from(r.contents[0].blob, 'base64').equals(want) || r.contents[0].mimeType !== 'image/png')
		throw new Error('resources/read did not return the artifact byte for byte');
}
