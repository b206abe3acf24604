/*
 * privsep.test.mjs - a worker of a root serve runs as an identity of its own with no privilege
 * (issue 11 item 4), so a worker taken over by its client cannot reach another session.
 *
 * Session A is served and has run a call (its sandbox is up). Then session B's worker starts
 * with the LD_PRELOAD shim tests/security/shim_worker.c, which reads where A's worker, agent
 * socket, sandbox directory and channel are (KG_SHIM_TARGETS, written by this test before B's
 * worker exists) and, from inside B's real worker once it has confined itself, tries to signal,
 * ptrace, read the /proc files and the memory of A's worker, take a descriptor from it, connect
 * to A's agent socket and to A's channel to the master, open A's sandbox files, and get
 * privilege back (setuid 0, capset, ambient raise, securebits, no_new_privs). Every attempt must
 * be refused while both sessions keep serving. Run twice: with the whole confinement, and with
 * --seccomp off (which also skips Landlock), where the identity alone must hold.
 *
 * /proc/PID/status of both workers: own uid and gid (different ones), every capability set
 * empty, NoNewPrivs 1, and (with the filter) Seccomp 2.
 *
 * Not meaningful unless serve runs as root: skipped otherwise. The laptop case (serve as a normal
 * user: no other uid to take; it keeps working and its start-up log says workers share its uid)
 * is the last test, as nobody.
 */
import assert from 'node:assert/strict';
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import test from 'node:test';

import { BIN, callTool, httpServe, procStatus, REPO, sc, sessionWorker, snippet, waitFor } from '../e2e/lib.mjs';

const T = { timeout: 300_000 };
const ROOT = process.getuid() === 0;

const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kg-privsep-'));
const SHIM = path.join(dir, 'shim_worker.so');
execFileSync(process.env.CC || 'cc', ['-shared', '-fPIC', '-o', SHIM,
	path.join(REPO, 'tests', 'security', 'shim_worker.c')]);
test.after(() => fs.rmSync(dir, { recursive: true, force: true }));

/* an ASan build (make asan) refuses a preload ahead of its runtime unless told it is fine */
const ASAN_OPTIONS = [process.env.ASAN_OPTIONS, 'verify_asan_link_order=0'].filter(Boolean).join(':');

const ATTACKS = [
	'signal the other worker', 'ptrace the other worker',
	"open the other worker's /proc/PID/environ", "open the other worker's /proc/PID/mem",
	"open the other worker's /proc/PID/fd", "open the other worker's /proc/PID/maps",
	"read the other worker's memory", 'take a descriptor of the other worker',
	'signal the other worker through a pidfd',
	"connect to the other session's agent socket", "connect to the other worker's channel to the master",
	"open the other sandbox's DIR", "open the other sandbox's DIR/app", "open the other sandbox's DIR/state",
	"open the other sandbox's DIR/sock", "open the other sandbox's DIR/lock",
	'setuid 0', 'setgid 0', 'capset every capability', 'raise an ambient capability',
	'clear the securebits', 'clear no_new_privs',
];
const CONTROLS = ['control: signal itself', 'control: open its own /proc/self/status'];

/* attackLines - B's worker's "kg-attack:" results, once it said it is done */
async function attackLines(s) {
	return waitFor(() => {
		const lines = s.stderr.split('\n').filter((l) => l.startsWith('kg-attack: '));
		if (!lines.includes('kg-attack: done'))
			return null;
		const out = {};
		for (const l of lines) {
			const rest = l.slice('kg-attack: '.length);
			const i = rest.lastIndexOf(': ');
			if (i > 0)
				out[rest.slice(0, i)] = rest.slice(i + 2);
		}
		return out;
	}, { timeout: 60_000, what: 'the attacking worker\'s lines' });
}

/* checkStatus - the worker's identity and privileges as the kernel reports them */
function checkStatus(pid, seccomp) {
	const st = procStatus(pid);
	assert.ok(st, `worker ${pid} is alive`);
	const [ruid, euid, suid, fsuid] = st.Uid.split(/\s+/).map(Number);
	const gids = st.Gid.split(/\s+/).map(Number);
	assert.ok(ruid >= 2100000000 && ruid < 2100100000, `worker uid ${st.Uid} is from the workers' range`);
	assert.deepEqual([euid, suid, fsuid], [ruid, ruid, ruid], `Uid: ${st.Uid}`);
	assert.deepEqual(gids, [ruid, ruid, ruid, ruid], `Gid: ${st.Gid}`);
	assert.equal(st.Groups, '', 'no supplementary groups');
	for (const k of ['CapInh', 'CapPrm', 'CapEff', 'CapBnd', 'CapAmb'])
		assert.equal(st[k], '0000000000000000', `${k} of worker ${pid}`);
	assert.equal(st.NoNewPrivs, '1', 'no_new_privs');
	if (seccomp)
		assert.equal(st.Seccomp, '2', 'a seccomp filter');
	return ruid;
}

/* ipcPath - the channel of the only worker this serve has so far */
function ipcPath(servePid) {
	const base = ['/run/kode-gopher', '/tmp/kode-gopher-ids-0'].find((d) => fs.existsSync(d) &&
		fs.readdirSync(d).some((n) => n.startsWith(`kode-gopher.${servePid}.`)));
	assert.ok(base, 'the base of the runtime directories of a serve whose workers have identities');
	const run = fs.readdirSync(base).find((n) => n.startsWith(`kode-gopher.${servePid}.`));
	assert.ok(run, 'the master\'s runtime directory');
	const socks = fs.readdirSync(path.join(base, run)).filter((n) => n.endsWith('.ipc'));
	assert.equal(socks.length, 1, `one worker channel so far: ${socks}`);
	return path.join(base, run, socks[0]);
}

for (const mode of ['kill', 'off']) {
	test(`a taken-over worker (--seccomp ${mode}) cannot reach another session's worker, socket or files, nor get privilege back; both keep serving`,
		{ ...T, skip: !ROOT && 'serve is not root here: workers share its uid (the laptop case)' }, async (t) => {
			const targets = path.join(dir, `targets-${mode}`);
			const s = await httpServe(['--workers-min-idle', '0', '--seccomp', mode], {
				env: { ASAN_OPTIONS, LD_PRELOAD: SHIM, KG_SHIM_TARGETS: targets },
			});
			try {
				assert.match(s.stderr, /workers run as identities of their own/);
				const a = await s.connect();
				const ra = await callTool(a.client, 'execute_go_code', { code: snippet('return "a", nil') },
					{ timeout: 180_000 });
				assert.equal(sc(ra)?.result?.value, 'a', JSON.stringify(sc(ra)));
				const wa = sessionWorker(s.pid, a.transport.sessionId);
				assert.ok(wa, 'session A\'s worker');
				const uidA = checkStatus(wa, mode !== 'off');
				const m = /sandbox (kg-[0-9a-f]+): agent pid \d+ in (\S+)/.exec(s.stderr);
				assert.ok(m, 'session A\'s sandbox is named in the log');
				const sbox = m[2], sock = path.join(sbox, 'sock', 'agent.sock');
				/* the way in is A's worker's gid, and only that */
				const ds = fs.statSync(sbox), ss = fs.statSync(path.join(sbox, 'sock')), ks = fs.statSync(sock);
				assert.equal(ds.gid, uidA);
				assert.equal(ds.mode & 0o7777, 0o710, `DIR mode ${(ds.mode & 0o7777).toString(8)}`);
				assert.equal(ss.gid, uidA);
				assert.equal(ss.mode & 0o7777, 0o2710, `DIR/sock mode ${(ss.mode & 0o7777).toString(8)}`);
				assert.equal(ks.gid, uidA);
				assert.equal(ks.mode & 0o777, 0o660, `agent.sock mode ${(ks.mode & 0o777).toString(8)}`);
				fs.writeFileSync(targets, `pid ${wa}\nsock ${sock}\ndir ${sbox}\nipc ${ipcPath(s.pid)}\n`);

				/* session B's worker starts now, reads the targets and attacks */
				const b = await s.connect();
				const res = await attackLines(s);
				t.diagnostic(Object.entries(res).map(([k, v]) => `${k}: ${v}`).join('; '));
				for (const what of ATTACKS) {
					assert.ok(what in res, `attempted: ${what}`);
					assert.notEqual(res[what], 'ok', `${what} must be refused`);
					assert.match(res[what], /Permission denied|Operation not permitted|Invalid argument/, `${what}: ${res[what]}`);
				}
				for (const what of CONTROLS)
					assert.equal(res[what], 'ok', `${what}: the probe itself works`);

				/* both sessions keep serving, each in its own sandbox */
				const rb = await callTool(b.client, 'execute_go_code', { code: snippet('return "b", nil') },
					{ timeout: 180_000 });
				assert.equal(sc(rb)?.result?.value, 'b', JSON.stringify(sc(rb)));
				const ra2 = await callTool(a.client, 'execute_go_code', { code: snippet('return "a2", nil') },
					{ timeout: 180_000 });
				assert.equal(sc(ra2)?.result?.value, 'a2', JSON.stringify(sc(ra2)));
				const wb = sessionWorker(s.pid, b.transport.sessionId);
				assert.ok(wb && wb !== wa, 'session B has a worker of its own');
				const uidB = checkStatus(wb, mode !== 'off');
				assert.notEqual(uidB, uidA, 'the two workers have different identities');
				checkStatus(wa, mode !== 'off');
			} finally {
				await s.close();
			}
		});
}

/* nobodyHome - a directory of nobody's own (its sandbox root and files go there), or null
 * after skipping t when nobody cannot run the binary (a checkout under a private home is out
 * of nobody's reach: nothing to show then) */
function nobodyHome(t, prefix) {
	const can = spawnSync(BIN, ['version'], { uid: 65534, gid: 65534, cwd: '/' });
	if (can.error || can.status !== 0) {
		t.skip(`nobody cannot run ${BIN} here`);
		return null;
	}
	const home = fs.mkdtempSync(path.join(dir, prefix));
	fs.chmodSync(dir, 0o755);
	fs.chmodSync(home, 0o755);
	fs.chownSync(home, 65534, 65534);
	return home;
}

test('the laptop case: a serve that is not root keeps working, and its start-up log says workers share its uid',
	{ ...T, skip: !ROOT && 'needs root to start serve as another user' }, async (t) => {
		const home = nobodyHome(t, 'nobody-');
		if (!home)
			return;
		const prog = path.join(home, 'main.go');
		fs.writeFileSync(prog, 'package main\n\nimport "fmt"\n\nfunc main() { fmt.Println("as nobody") }\n', { mode: 0o644 });
		const runtime = process.env.KODE_GOPHER_RUNTIME_DIR || process.env.RUNTIME_DIR;
		const r = await new Promise((resolve) => {
			const child = spawn(BIN, ['exec', '--log-level', 'info', '--sandbox-root', path.join(home, 'sandboxes'),
				...(runtime ? ['--runtime-dir', runtime] : []), prog], {
				uid: 65534, gid: 65534, cwd: home,
				env: { PATH: process.env.PATH, HOME: home, ASAN_OPTIONS: process.env.ASAN_OPTIONS || '' },
				stdio: ['ignore', 'pipe', 'pipe'],
			});
			let out = '', err = '';
			child.stdout.on('data', (d) => { out += d; });
			child.stderr.on('data', (d) => { err += d; });
			child.on('exit', (code) => resolve({ code, out, err }));
		});
		assert.equal(r.code, 0, r.err.slice(-3000));
		assert.match(r.out, /as nobody/);
		assert.match(r.err, /serve runs as uid 65534, not root: every worker runs as this same user/);
		assert.doesNotMatch(r.err, /workers run as identities of their own/);
	});

/* The Kubernetes deployment (packaging/k8s/server.yaml: uid 10001, no capabilities) and a
 * laptop run serve as a normal user: its workers share its uid. What the kernel lets an owner
 * do to its own processes (ptrace, /proc/PID/mem, environ, fd) a taken-over worker with its
 * filter off could then do to the master, which holds every credential; a non-dumpable master
 * refuses it. The signal stays possible (same uid): the filter and Landlock are what stop that. */
const MASTER_ATTACKS = [
	'ptrace the master', "open the master's /proc/PID/environ", "open the master's /proc/PID/mem",
	"open the master's /proc/PID/fd", "open the master's /proc/PID/maps", "read the master's memory",
	'take a descriptor of the master',
];

test('a serve that is not root is not dumpable: a worker of its uid (--seccomp off) cannot ptrace it or read its /proc files, and the session goes on',
	{ ...T, skip: !ROOT && 'needs root to start serve as another user' }, async (t) => {
		const home = nobodyHome(t, 'nobody-master-');
		if (!home)
			return;
		const runtime = process.env.KODE_GOPHER_RUNTIME_DIR || process.env.RUNTIME_DIR;
		const child = spawn(BIN, ['serve', '--log-level', 'info', '--seccomp', 'off',
			'--sandbox-root', path.join(home, 'sandboxes'), ...(runtime ? ['--runtime-dir', runtime] : [])], {
			uid: 65534, gid: 65534, cwd: home,
			env: { PATH: process.env.PATH, HOME: home, ASAN_OPTIONS, LD_PRELOAD: SHIM, KG_SHIM_MASTER: '1' },
			stdio: ['pipe', 'pipe', 'pipe'],
		});
		const s = { stderr: '', stdout: '' };
		child.stdout.on('data', (d) => { s.stdout += d; });
		child.stderr.on('data', (d) => { s.stderr += d; });
		const exited = new Promise((resolve) => child.on('exit', (code) => resolve(code)));
		try {
			const res = await attackLines(s);
			t.diagnostic(Object.entries(res).map(([k, v]) => `${k}: ${v}`).join('; '));
			assert.match(s.stderr, /this process is not dumpable/);
			for (const what of MASTER_ATTACKS) {
				assert.ok(what in res, `attempted: ${what}`);
				assert.match(res[what], /Permission denied|Operation not permitted/, `${what} must be refused: ${res[what]}`);
			}
			for (const what of CONTROLS)
				assert.equal(res[what], 'ok', `${what}: the probe itself works`);
			/* the worker that tried is still the session's, and it answers */
			child.stdin.write(JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'initialize', params: {
				protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'privsep', version: '1' } } }) + '\n');
			const line = await waitFor(() => s.stdout.split('\n').find((l) => l.includes('"id":1')),
				{ timeout: 60_000, what: 'the answer to initialize' });
			assert.match(line, /"protocolVersion"/);
		} finally {
			child.stdin.end();
			const code = await Promise.race([exited, new Promise((r) => setTimeout(() => r('timeout'), 30_000))]);
			if (code === 'timeout')
				child.kill('SIGKILL');
		}
	});
