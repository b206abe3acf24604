#!/usr/bin/env node
/*
 * agents.mjs - the test cluster's "container runtime": a real kode-gopher sandbox behind every
 * sandbox pod.
 *
 * kwok marks pods Running and Ready with a pod IP but runs nothing. This process, started by
 * `cluster.sh up` and stopped by `cluster.sh down`, watches the sandbox pods of all namespaces
 * (pods whose controller is an agents.x-k8s.io Sandbox) and, for each that has an IP and no
 * deletion timestamp, runs
 *
 *   kode-gopher jail --dir AGENTS/<pod uid> --name k8s-<pod uid> ... --network host --
 *       kode-gopher agent --listen tcp:POD_IP:PORT ...
 *
 * the way master/sandbox_local.c (sandbox_local_spawn) starts a local sandbox, but on the pod's
 * IP (a loopback address, or one inside the cluster's own network namespace) and the port of the
 * pod's first container port (8888 when it names none). When the pod is deleted, starts
 * terminating, or comes back under the same name with a new uid, its agent gets SIGTERM (SIGKILL
 * after STOP_GRACE_MS) and its directory is removed: a recreated pod always gets a fresh agent,
 * which is what a "pod died mid-call" test relies on. An agent that exits by itself is not
 * restarted (the test that caused it should see it); the exit is logged.
 *
 * Level-triggered: each line of a `kubectl get pods --watch` only wakes the loop, which lists
 * the pods and makes the running agents match the list (stale agents stopped first, so a new pod
 * that got a freed IP can bind it). A watch that ends is restarted.
 *
 *   node agents.mjs --kubectl PATH --kubeconfig FILE --dir AGENTS --logs DIR --ready FILE
 *
 * Environment: KG_BIN (the kode-gopher binary), KG_RUNTIME_DIR (the Go caches of
 * `make runtime`), KG_AGENTS_SELECTOR (an extra label selector; by default every pod a Sandbox
 * controls: the controller's own labels are no guide, since adopting a warm pod for a claim strips
 * its agents.x-k8s.io/created-by label). One line per start and stop goes to stdout (cluster.sh appends it
 * to DIR/logs/agents.log); each agent's own output goes to LOGS/<namespace>_<pod>_<uid>.log.
 */
import { execFile, spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import readline from 'node:readline';
import { parseArgs } from 'node:util';

const STOP_GRACE_MS = 3000;
const MEMORY = String(4 * 1024 ** 3); /* the local backend's defaults (master/serve.c) */
const PIDS = '512';
const MAX_TIMEOUT_S = '300';

const { values: opt } = parseArgs({
	options: {
		kubectl: { type: 'string', default: 'kubectl' },
		kubeconfig: { type: 'string' },
		dir: { type: 'string' },
		logs: { type: 'string' },
		ready: { type: 'string' },
	},
});
if (!opt.kubeconfig || !opt.dir || !opt.logs) {
	console.error('usage: agents.mjs --kubectl PATH --kubeconfig FILE --dir AGENTS --logs DIR [--ready FILE]');
	process.exit(2);
}
const BIN = process.env.KG_BIN;
const RUNTIME = process.env.KG_RUNTIME_DIR || '/var/cache/kode-gopher/runtime';
const SELECTOR = process.env.KG_AGENTS_SELECTOR || '';
const selectorArgs = SELECTOR ? ['-l', SELECTOR] : [];

/* say - one line of the fixture's log */
function say(msg) {
	process.stdout.write(`${new Date().toISOString()} ${msg}\n`);
}

/* fail - a start-up problem someone has to fix: say what, exit 1 */
function fail(msg) {
	say(`error: ${msg}`);
	process.exit(1);
}

/* checkSetup - the binary, the caches, and (as root) a directory the sandbox uids can reach:
 * jail switches to an unprivileged uid of the sandbox's own before it binds DIR/app */
function checkSetup() {
	if (!BIN || !fs.existsSync(BIN))
		fail(`no kode-gopher binary at KG_BIN=${BIN || '(unset)'}; build it with make`);
	if (!fs.existsSync(path.join(RUNTIME, 'gomodcache')))
		fail(`no Go runtime caches in ${RUNTIME} (KG_RUNTIME_DIR); prepare them with make runtime`);
	fs.mkdirSync(opt.dir, { recursive: true, mode: 0o711 });
	fs.mkdirSync(opt.logs, { recursive: true });
	if (process.getuid() !== 0)
		return;
	fs.chmodSync(opt.dir, 0o711);
	for (let d = path.dirname(path.resolve(opt.dir)); ; d = path.dirname(d)) {
		if (!(fs.statSync(d).mode & 0o001))
			fail(`sandbox uids cannot reach ${opt.dir}: ${d} is not searchable by others (chmod o+x ${d})`);
		if (d === '/')
			break;
	}
}

/* kubectl - run kubectl against the cluster; resolves to stdout */
function kubectl(args) {
	return new Promise((resolve, reject) => {
		execFile(opt.kubectl, ['--kubeconfig', opt.kubeconfig, ...args],
			{ maxBuffer: 64 << 20, timeout: 30_000 }, (err, stdout, stderr) => {
				if (err)
					reject(new Error(`kubectl ${args.join(' ')}: ${stderr.trim() || err.message}`));
				else
					resolve(stdout);
			});
	});
}

/* agents - uid -> { uid, pod: "ns/name", ip, port, dir, child, exited, stopping } */
const agents = new Map();
let shuttingDown = false;

/* cgroupName - the jail's name for a pod's sandbox (its cgroups are named after it) */
const cgroupName = (uid) => `k8s-${uid}`;

/* podPort - the port the pod's first container declares first; 8888 (the agent's default) if none */
function podPort(pod) {
	const port = pod.spec?.containers?.[0]?.ports?.[0]?.containerPort;
	return Number.isInteger(port) ? port : 8888;
}

/* startAgent - a fresh sandbox directory and a jailed agent on the pod's IP */
function startAgent(pod) {
	const uid = pod.metadata.uid;
	const name = `${pod.metadata.namespace}/${pod.metadata.name}`;
	const ip = pod.status.podIP;
	const port = podPort(pod);
	const dir = path.join(opt.dir, uid);
	fs.rmSync(dir, { recursive: true, force: true });
	for (const sub of ['', 'app', 'app/persist', 'state', 'sock', 'cache'])
		fs.mkdirSync(path.join(dir, sub), { recursive: true, mode: 0o700 });
	const host = ip.includes(':') ? `[${ip}]` : ip;
	const argv = [
		'--pdeathsig', 'KILL', '--', /* the sandbox dies with the fixture, as with the master */
		BIN, 'jail', '--dir', dir, '--name', cgroupName(uid), '--runtime-dir', RUNTIME,
		'--memory', MEMORY, '--pids', PIDS, '--network', 'host', '--log-level', 'info', '--',
		'kode-gopher', 'agent', '--listen', `tcp:${host}:${port}`,
		'--app-dir', '/app', '--state-dir', '/kg/state', '--runtime-dir', RUNTIME,
		'--gomodcache', `${RUNTIME}/gomodcache`, '--gocache', `${RUNTIME}/gocache`,
		'--log-level', 'info', '--max-timeout', MAX_TIMEOUT_S,
		'--memory-limit', MEMORY, '--pids-limit', PIDS,
	];
	const logFile = path.join(opt.logs, `${pod.metadata.namespace}_${pod.metadata.name}_${uid}.log`);
	const out = fs.openSync(logFile, 'a');
	/* detached: a session and process group of its own, so one signal reaches the whole jail */
	const child = spawn('setpriv', argv, { detached: true, stdio: ['ignore', out, out] });
	fs.closeSync(out);
	const a = { uid, pod: name, ip, port, dir, child, stopping: false };
	a.exited = new Promise((resolve) => {
		child.on('error', (e) => resolve({ code: null, signal: null, error: e }));
		child.on('exit', (code, signal) => resolve({ code, signal }));
	});
	a.exited.then((how) => {
		if (a.stopping)
			return;
		const why = how.error ? how.error.message : how.signal ? `signal ${how.signal}` : `status ${how.code}`;
		say(`exited ${name} uid=${uid} ip=${ip} (by itself: ${why}; not restarted; log ${logFile})`);
	});
	agents.set(uid, a);
	say(`start ${name} uid=${uid} ip=${ip} port=${port} pid=${child.pid} dir=${dir}`);
}

/* sleep - a promise that resolves after ms */
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/* signalGroup - signal the jail's process group; false once it is gone */
function signalGroup(a, sig) {
	try {
		process.kill(-a.child.pid, sig);
		return true;
	} catch {
		return false;
	}
}

/* stopAgent - TERM the sandbox, KILL it if it lingers, remove its cgroups and directory */
async function stopAgent(a, why) {
	a.stopping = true;
	if (a.child.exitCode === null && a.child.signalCode === null && a.child.pid) {
		signalGroup(a, 'SIGTERM');
		const late = await Promise.race([a.exited.then(() => false), sleep(STOP_GRACE_MS).then(() => true)]);
		if (late) {
			say(`agent of ${a.pod} uid=${a.uid} ignored SIGTERM for ${STOP_GRACE_MS} ms; killing it`);
			signalGroup(a, 'SIGKILL');
			await a.exited;
		}
	}
	signalGroup(a, 'SIGKILL'); /* whatever the jail left in its group */
	/* the jail's pid namespace empties a moment after its init dies (see sandbox_kill) */
	for (const ctl of ['memory', 'pids']) {
		const cg = `/sys/fs/cgroup/${ctl}/kode-gopher/${cgroupName(a.uid)}`;
		for (let i = 0; i < 40 && fs.existsSync(cg); i++) {
			try {
				fs.rmdirSync(cg);
			} catch {
				await sleep(25);
			}
		}
	}
	fs.rmSync(a.dir, { recursive: true, force: true });
	agents.delete(a.uid);
	say(`stop ${a.pod} uid=${a.uid} ip=${a.ip} (${why})`);
}

/* sandboxPod - is this pod run for an agent-sandbox Sandbox? */
const sandboxPod = (pod) => (pod.metadata.ownerReferences ?? []).some((o) =>
	o.controller && o.kind === 'Sandbox' && o.apiVersion.startsWith('agents.x-k8s.io/'));

/* wanted - does this pod need an agent? */
const wanted = (pod) => Boolean(pod.status?.podIP) && !pod.metadata.deletionTimestamp;

let syncing = false;
let again = false;
let ready = false;

/* sync - list the pods and make the agents match; calls during a sync make it run once more */
async function sync() {
	if (syncing) {
		again = true;
		return;
	}
	syncing = true;
	try {
		do {
			again = false;
			const list = JSON.parse(await kubectl(['get', 'pods', '-A', ...selectorArgs, '-o', 'json']));
			if (shuttingDown)
				return;
			const pods = new Map(list.items.filter(sandboxPod).map((p) => [p.metadata.uid, p]));
			const stale = [...agents.values()].filter((a) => !a.stopping && !wanted(pods.get(a.uid) ?? { metadata: {}, status: {} }));
			await Promise.all(stale.map((a) => {
				const p = pods.get(a.uid);
				const why = !p ? 'pod deleted' : p.metadata.deletionTimestamp ? 'pod terminating' : 'pod lost its IP';
				return stopAgent(a, why);
			}));
			if (shuttingDown)
				return;
			for (const [uid, pod] of pods)
				if (wanted(pod) && !agents.has(uid))
					startAgent(pod);
			if (!ready) {
				ready = true;
				say(`ready: watching the sandbox pods of all namespaces${SELECTOR ? ` labelled ${SELECTOR}` : ''} (binary ${BIN}, runtime ${RUNTIME})`);
				if (opt.ready)
					fs.writeFileSync(opt.ready, `${process.pid}\n`);
			}
		} while (again && !shuttingDown);
	} catch (e) {
		say(`sync failed, trying again in 1 s: ${e.message}`);
		setTimeout(sync, 1000);
	} finally {
		syncing = false;
	}
}

let watcher = null;

/* watch - kubectl's watch as a wake-up signal; its first lines (the pods that exist) and every
 * later change cause a sync, and a sync right away covers the case where no pod exists */
function watch() {
	const w = spawn(opt.kubectl, ['--kubeconfig', opt.kubeconfig, 'get', 'pods', '-A', ...selectorArgs,
		'--watch', '-o', 'name'], { stdio: ['ignore', 'pipe', 'pipe'] });
	watcher = w;
	let err = '';
	w.stderr.on('data', (d) => { err = (err + d).slice(-2000); });
	readline.createInterface({ input: w.stdout }).on('line', () => sync());
	w.on('exit', (code, signal) => {
		if (shuttingDown)
			return;
		say(`kubectl watch ended (${signal ?? `status ${code}`}${err ? `: ${err.trim()}` : ''}); restarting it in 1 s`);
		setTimeout(watch, 1000);
	});
	sync();
}

/* shutdown - stop every agent (in parallel) and exit */
async function shutdown(sig) {
	if (shuttingDown)
		return;
	shuttingDown = true;
	say(`${sig}: stopping ${agents.size} agent(s)`);
	watcher?.kill('SIGTERM');
	await Promise.all([...agents.values()].map((a) => stopAgent(a, 'fixture stopping')));
	process.exit(0);
}

process.on('SIGTERM', () => shutdown('SIGTERM'));
process.on('SIGINT', () => shutdown('SIGINT'));
checkSetup();
watch();
