/*
 * churn.test.mjs - session birth and death stay off the other sessions' path (issue 19): the
 * shared server answers a session's requests while another session's sandbox is still being
 * removed, and workers started ahead of need, and their sandboxes, yield the CPU until a session
 * takes them. Workers and sandboxes start on the master's spawner threads, not on the main loop
 * (a start held there by strace, as a hanging file system would, leaves the main loop serving):
 * workers killed and sessions deleted while their sandboxes start leave nothing behind, and a
 * worker that dies before its pid is on its slot is still reaped as that slot's.
 * Run by tests/run.sh (node --test); each test() is one counted result.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { spawn } from 'node:child_process';
import os from 'node:os';
import test from 'node:test';

import { callTool, children, cmdline, descendants, httpServe, isAlive, procStat, sc, sessionWorker, waitFor } from './lib.mjs';

const T = { timeout: 480_000 };

/* FILLER writes many small files into the sandbox: removing them takes the master a while */
const FILLER = `package snippet

import (
	"context"
	"fmt"
	"os"
)

func run(ctx context.Context) (any, error) {
	for d := 0; d < 40; d++ {
		dir := fmt.Sprintf("/app/persist/d%d", d)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
		for f := 0; f < 1000; f++ {
			if err := os.WriteFile(fmt.Sprintf("%s/f%d", dir, f), []byte("x"), 0o644); err != nil {
				return nil, err
			}
		}
	}
	return "filled", nil
}
`;

/* nices - the nice value of every thread of pid */
function nices(pid) {
	return fs.readdirSync(`/proc/${pid}/task`).map((t) => {
		const st = fs.readFileSync(`/proc/${pid}/task/${t}/stat`, 'utf8');
		return Number(st.slice(st.lastIndexOf(')') + 2).split(' ')[16]);
	});
}

test('http: another session is served while an ended session\'s sandbox is still being removed', T, async () => {
	const srv = await httpServe(['--workers-min-idle', '1']);
	try {
		const a = await srv.connect();
		const b = await srv.connect();
		const r = await callTool(a.client, 'execute_go_code', { code: FILLER, timeout_seconds: 200 });
		assert.equal(sc(r).result?.value, 'filled', JSON.stringify(sc(r)));
		const sid = a.sessionId.slice(0, 8);
		const releasing = new RegExp(`releasing sandbox (kg-[0-9a-f]+) of session ${sid}`);
		await a.transport.terminateSession();
		const name = await waitFor(() => releasing.exec(srv.stderr)?.[1], { timeout: 30_000, what: 'the release to start' });
		const released = () => srv.stderr.includes(`released sandbox ${name}\n`);
		/* a request of b's while the 40 000 files of a's sandbox go: answered before they are gone */
		assert.deepEqual(await b.client.ping(), {});
		assert.ok(!released(), `the ping was answered only after ${name} was removed`);
		await waitFor(released, { timeout: 300_000, interval: 200, what: `${name} to be removed` });
	} finally {
		await srv.close();
	}
});

test('http: workers started ahead of need run at a lower priority until a session takes one; the main loop at a higher one', { ...T, skip: os.userInfo().uid !== 0 && 'as root only (a normal user cannot give the priority back)' }, async () => {
	const srv = await httpServe(['--workers-min-idle', '2']);
	try {
		const idle = () => children(srv.pid).filter((p) => /^kode-gopher: worker s=- /.test(cmdline(p) || ''));
		await waitFor(() => idle().length === 2, { timeout: 30_000, what: 'two idle workers' });
		for (const p of idle())
			assert.ok(nices(p).every((n) => n === 10), `idle worker ${p}: nice ${nices(p)}`);
		// the main loop (serve's main thread) runs ahead of the rest; what it starts does not
		// inherit that: jails at 0 like everyone, workers as above
		const st = fs.readFileSync(`/proc/${srv.pid}/task/${srv.pid}/stat`, 'utf8');
		assert.equal(Number(st.slice(st.lastIndexOf(')') + 2).split(' ')[16]), -5, 'serve\'s main loop');
		const js = children(srv.pid).filter((p) => / jail /.test(cmdline(p) || ''));
		assert.ok(js.length >= 2, 'the jails of the idle workers');
		for (const j of js)
			assert.deepEqual([...new Set(nices(j))], [0], `jail ${j}`);
		const s = await srv.connect();
		assert.deepEqual(await s.client.ping(), {});
		const w = sessionWorker(srv.pid, s.sessionId);
		assert.ok(w, 'the session\'s worker');
		assert.deepEqual([...new Set(nices(w))], [0], `session worker ${w}`);
	} finally {
		await srv.close();
	}
});

/* cpuKnob - where the host keeps a cgroup's CPU weight: the v1 cpu hierarchy's cpu.shares, else
 * cpu.weight of a cgroup2 hierarchy that has the cpu controller; null if neither */
function cpuKnob() {
	for (const line of fs.readFileSync('/proc/self/mountinfo', 'utf8').split('\n')) {
		const [pre, post] = line.split(' - ');
		if (!post)
			continue;
		const [fstype, , opts] = post.split(' ');
		const mnt = pre.split(' ')[4];
		if (fstype === 'cgroup' && opts.split(',').includes('cpu'))
			return { v: 1, file: 'cpu.shares', mnt, prestart: '32', session: '512', path: (pid) => cgPath(pid, (c) => c.split(',').includes('cpu')) };
	}
	for (const line of fs.readFileSync('/proc/self/mountinfo', 'utf8').split('\n')) {
		const [pre, post] = line.split(' - ');
		const mnt = pre.split(' ')[4];
		if (post?.startsWith('cgroup2 ') && fs.readFileSync(`${mnt}/cgroup.controllers`, 'utf8').split(/\s+/).includes('cpu'))
			return { v: 2, file: 'cpu.weight', mnt, prestart: '6', session: '100', path: (pid) => cgPath(pid, (c) => c === '') };
	}
	return null;
}

/* cgPath - pid's group in the hierarchy whose /proc/PID/cgroup controller field matches */
function cgPath(pid, match) {
	try {
		for (const line of fs.readFileSync(`/proc/${pid}/cgroup`, 'utf8').split('\n')) {
			const m = /^\d+:([^:]*):(.*)$/.exec(line);
			if (m && match(m[1]))
				return m[2];
		}
	} catch { /* gone */ }
	return null;
}

/* jailOf - the jail of the worker pid (its --sock-gid is the worker's uid), once the jail is in
 * its own CPU group: { jail, name, file } or null */
function jailOf(srvPid, worker, knob) {
	const uid = /^Uid:\s+(\d+)/m.exec(fs.readFileSync(`/proc/${worker}/status`, 'utf8'))?.[1];
	for (const c of children(srvPid)) {
		const cl = cmdline(c) || '';
		const m = / jail .*--name (kg-[0-9a-f]+) .*--sock-gid (\d+) /.exec(cl);
		if (!m || m[2] !== uid)
			continue;
		const where = knob.path(c);
		if (where === `/kode-gopher/${m[1]}`)
			return { jail: c, name: m[1], file: `${knob.mnt}${where}/${knob.file}` };
	}
	return null;
}

test('http: a pre-started sandbox has a low CPU weight, which the master raises when a session takes it', { ...T, skip: (os.userInfo().uid !== 0 || !cpuKnob()) && 'as root with a cgroup cpu controller only' }, async () => {
	const knob = cpuKnob();
	const read = (f) => fs.readFileSync(f, 'utf8').trim();
	for (const minIdle of ['2', '0']) {
		const srv = await httpServe(['--workers-min-idle', minIdle]);
		try {
			if (minIdle === '2') {
				const idle = () => children(srv.pid).filter((p) => /^kode-gopher: worker s=- /.test(cmdline(p) || ''));
				const jails = await waitFor(() => {
					const js = idle().map((w) => jailOf(srv.pid, w, knob)).filter(Boolean);
					return js.length === 2 ? js : null;
				}, { timeout: 60_000, what: 'two idle workers, each with its jail in its own CPU group' });
				for (const j of jails) {
					assert.equal(read(j.file), knob.prestart, `pre-started sandbox ${j.name}: ${j.file}`);
					// the master's to write: not the sandbox's uid (nor anyone's but root)
					const st = fs.statSync(j.file);
					assert.ok(st.uid === 0 && !(st.mode & 0o022), `${j.file}: uid ${st.uid} mode ${st.mode.toString(8)}`);
				}
			}
			// a session takes one (with --workers-min-idle 0, one started for it: its sandbox may
			// ask for its weight before or after the session has it)
			const s = await srv.connect();
			assert.deepEqual(await s.client.ping(), {});
			const w = sessionWorker(srv.pid, s.sessionId);
			assert.ok(w, 'the session\'s worker');
			const j = await waitFor(() => jailOf(srv.pid, w, knob), { timeout: 60_000, what: 'the session\'s jail in its CPU group' });
			assert.equal(read(j.file), knob.session, `session sandbox ${j.name}: ${j.file}`);
			// the weight stays the master's: the call's processes run in that group at that weight
			const r = await callTool(s.client, 'execute_go_code', { code: 'package snippet\n\nimport "context"\n\nfunc run(ctx context.Context) (any, error) { return 7, nil }\n' });
			assert.equal(sc(r).result?.value, 7, JSON.stringify(sc(r)));
			assert.equal(read(j.file), knob.session, `session sandbox ${j.name} after a call`);
		} finally {
			await srv.close();
		}
	}
});

/* jails - the jail processes of serve pid: [{ pid, name, gid }] (--sock-gid: its worker's uid) */
function jails(srvPid) {
	const out = [];
	for (const c of children(srvPid)) {
		const m = / jail .*--name (kg-[0-9a-f]+) .*--sock-gid (\d+) /.exec(cmdline(c) || '');
		if (m && isAlive(c))
			out.push({ pid: c, name: m[1], gid: m[2] });
	}
	return out;
}

/* leftovers - what of the sandboxes is not some live jail's: directories in the sandbox root and
 * (as root) cpu cgroups that no live jail holds, and jails of workers that are gone */
function leftovers(srv) {
	const js = jails(srv.pid);
	const live = new Set(js.map((j) => j.name));
	const uids = new Set(children(srv.pid).filter((p) => /^kode-gopher: worker /.test(cmdline(p) || '') && isAlive(p))
		.map((p) => /^Uid:\s+(\d+)/m.exec(fs.readFileSync(`/proc/${p}/status`, 'utf8'))?.[1]));
	const out = fs.readdirSync(srv.sandboxRoot).filter((d) => d.startsWith('kg-') && !live.has(d)).map((d) => `directory ${d}`);
	const knob = os.userInfo().uid === 0 ? cpuKnob() : null;
	const started = new Set([...srv.stderr.matchAll(/sandbox (kg-[0-9a-f]+): (?:agent pid|its worker went while it started)/g)].map((m) => m[1]));
	for (const name of started)
		if (knob && !live.has(name) && fs.existsSync(`${knob.mnt}/kode-gopher/${name}`))
			out.push(`cgroup ${knob.mnt}/kode-gopher/${name}`);
	if (os.userInfo().uid === 0)
		for (const j of js)
			if (!uids.has(j.gid))
				out.push(`jail ${j.pid} (${j.name}) of a worker that is gone`);
	return out;
}

test('http: workers killed as their sandboxes start, and sessions ended at once, leave nothing behind; others are served; a killed serve takes every child with it', { ...T, skip: os.userInfo().uid !== 0 && 'as root only (workers are told apart from their jails by uid)' }, async () => {
	const srv = await httpServe(['--workers-min-idle', '2']);
	let stopped = false;
	try {
		const keep = await srv.connect();
		assert.deepEqual(await keep.client.ping(), {});
		// pre-started workers killed as soon as they are seen: some before they ask for a
		// sandbox, some while the master starts it, some after
		const seen = new Set(children(srv.pid));
		for (let round = 0; round < 5; round++) {
			// a session takes a pre-started worker (and, served, ends the start-up throttle the
			// last round's death began); the pool starts its replacement, killed as it starts
			const s = await srv.connect();
			assert.deepEqual(await s.client.ping(), {});
			seen.add(sessionWorker(srv.pid, s.sessionId));
			const prestart = /^kode-gopher worker .*--session - |^kode-gopher: worker s=- /;
			const w = await waitFor(() => children(srv.pid).find((p) => !seen.has(p) && prestart.test(cmdline(p) || '')),
				{ timeout: 60_000, interval: 2, what: 'a new worker' });
			seen.add(w);
			process.kill(w, 'SIGKILL');
			// the session ended at once, while the pool refills
			await s.transport.terminateSession();
			assert.deepEqual(await keep.client.ping(), {}, 'the kept session is served meanwhile');
		}
		await waitFor(() => leftovers(srv).length === 0, { timeout: 120_000, interval: 200, what: `nothing left behind (${leftovers(srv).join(', ')})` });
		const r = await callTool(keep.client, 'execute_go_code', { code: 'package snippet\n\nimport "context"\n\nfunc run(ctx context.Context) (any, error) { return 3, nil }\n' });
		assert.equal(sc(r).result?.value, 3, JSON.stringify(sc(r)));
		// the master killed outright: its workers and jails die with it (they tie themselves to
		// it as they start)
		const kids = descendants(srv.pid);
		assert.ok(kids.length >= 4, `serve has workers and jails: ${kids}`);
		process.kill(srv.pid, 'SIGKILL');
		stopped = true;
		await waitFor(() => kids.filter(isAlive).length === 0 || null, { timeout: 30_000, interval: 100, what: `serve's children to die with it (${kids.filter(isAlive).map(cmdline).join('; ')})` });
	} finally {
		if (!stopped)
			await srv.close();
		else
			await srv.close().catch(() => {});
	}
});

test('http: many sandboxes starting at once: workers killed and sessions deleted while theirs start leave nothing behind; other sessions are served throughout', { ...T, skip: os.userInfo().uid !== 0 && 'as root only (workers are told apart from their jails by uid)' }, async (t) => {
	// every pre-started worker asks for its sandbox as it starts: eight at once queue on the
	// master's spawner, so kills and DELETEs land before, during and after their starts
	const srv = await httpServe(['--workers-min-idle', '8']);
	const ready = /^kode-gopher: worker s=- /;
	try {
		const keep = await srv.connect();
		let pings = 0;
		let pinging = true;
		const pinger = (async () => {
			while (pinging) {
				assert.deepEqual(await keep.client.ping(), {}, 'the kept session is served while sandboxes start');
				pings++;
			}
		})();
		pinger.catch(() => {}); // awaited below; a failure there fails the test
		const seen = new Set(children(srv.pid));
		let killed = 0, deleted = 0, withJail = 0;
		for (let round = 0; round < 3; round++) {
			// four sessions at once take pre-started workers, whose replacements start together
			const ss = await Promise.all([0, 1, 2, 3].map(() => srv.connect()));
			for (const s of ss)
				seen.add(sessionWorker(srv.pid, s.sessionId));
			// two of them end at once: their sandboxes may still be starting
			await Promise.all(ss.slice(0, 2).map((s) => s.transport.terminateSession()));
			deleted += 2;
			// the replacements are killed once they have said HELLO (their title: the REQ_SANDBOX
			// follows at once), most of them while their sandboxes wait on the spawner
			for (let k = 0; k < 3; k++) {
				const w = await waitFor(() => children(srv.pid).find((p) => !seen.has(p) && ready.test(cmdline(p) || '')),
					{ timeout: 60_000, interval: 2, what: 'a new worker' });
				seen.add(w);
				const uid = /^Uid:\s+(\d+)/m.exec(fs.readFileSync(`/proc/${w}/status`, 'utf8'))?.[1];
				withJail += jails(srv.pid).some((j) => j.gid === uid);
				process.kill(w, 'SIGKILL');
				killed++;
			}
			await Promise.all(ss.slice(2).map((s) => s.transport.terminateSession()));
			deleted += 2;
		}
		await waitFor(() => leftovers(srv).length === 0, { timeout: 120_000, interval: 200, what: `nothing left behind (${leftovers(srv).join(', ')})` });
		pinging = false;
		await pinger;
		assert.ok(pings > 0, 'the kept session was pinged');
		// the next session works, in a sandbox of its own
		const next = await srv.connect();
		const r = await callTool(next.client, 'execute_go_code', { code: 'package snippet\n\nimport "context"\n\nfunc run(ctx context.Context) (any, error) { return 5, nil }\n' });
		assert.equal(sc(r).result?.value, 5, JSON.stringify(sc(r)));
		const undone = (srv.stderr.match(/its worker \(pid \d+\) went while it started/g) || []).length;
		const dropped = (srv.stderr.match(/the worker went while it waited for the spawner/g) || []).length;
		t.diagnostic(`${killed} workers killed (${withJail} with a jail already), ${deleted} sessions deleted, ${pings} pings answered; starts undone after their worker went: ${undone} running, ${dropped} queued`);
		assert.doesNotMatch(srv.stderr, /still starting/, 'no worker asked twice');
	} finally {
		await srv.close();
	}
});

/* spawnerThread - the tid of serve's thread of that name (master/later.c's spawners), or undefined */
function spawnerThread(pid, name) {
	return fs.readdirSync(`/proc/${pid}/task`).find((t) => {
		try {
			return fs.readFileSync(`/proc/${pid}/task/${t}/comm`, 'utf8').trim() === name;
		} catch {
			return false;
		}
	});
}

/* holdSpawner - strace serve's thread `name` alone and hold it in the next of its `calls` (at the
 * call's entry or exit) until release() (strace detaches; the thread goes on). held() gives the
 * line strace wrote for the held call while the thread sits there, else null. */
async function holdSpawner(srv, dir, name, calls, at) {
	const tid = await waitFor(() => spawnerThread(srv.pid, name), { timeout: 30_000, what: `the master's ${name} thread` });
	const out = `${dir}/strace.${tid}.${Date.now()}`;
	const st = spawn('strace', ['-p', tid, '-e', `trace=${calls}`, '-e', `inject=${calls}:delay_${at}=600000000`, '-o', out], { stdio: ['ignore', 'ignore', 'pipe'] });
	let err = '';
	st.stderr.on('data', (d) => { err += d; });
	const exited = new Promise((r) => st.on('exit', r));
	await waitFor(() => /attached/.test(err) || null, { timeout: 30_000, what: `strace to attach (${err})` });
	const state = () => /^State:\s+(\S)/m.exec(fs.readFileSync(`/proc/${srv.pid}/task/${tid}/status`, 'utf8'))?.[1];
	return {
		held: () => (fs.existsSync(out) && state() === 't' && fs.readFileSync(out, 'utf8').split('\n').find((l) => l.trim())) || null,
		async release() {
			st.kill('SIGTERM');
			await exited;
		},
	};
}

/* gone - pid has exited and been reaped (by serve: what its death sets off has run) */
const gone = (pid) => !fs.existsSync(`/proc/${pid}`);

test('http: a sandbox start held up on the spawner thread: other sessions are served meanwhile, and its worker killed or its session deleted undo it; nothing is left behind', { ...T, skip: os.userInfo().uid !== 0 && 'as root only (workers are told apart from their jails by uid)' }, async (t) => {
	const srv = await httpServe(['--workers-min-idle', '1']);
	const ready = /^kode-gopher: worker s=- /;
	const tmp = fs.mkdtempSync(`${os.tmpdir()}/kg-churn-`);
	let hold;
	try {
		const keep = await srv.connect();
		assert.deepEqual(await keep.client.ping(), {});
		await waitFor(() => leftovers(srv).length === 0 && jails(srv.pid).length === 2 || null, { timeout: 60_000, what: 'both sandboxes up' });
		const before = new Set(children(srv.pid));
		hold = await holdSpawner(srv, tmp, 'kg-sandboxes', 'mkdir', 'enter');
		// a session takes the idle worker; its replacement's sandbox start hangs in its mkdir
		const a = await srv.connect();
		const w1 = await waitFor(() => children(srv.pid).find((p) => !before.has(p) && ready.test(cmdline(p) || '')), { timeout: 60_000, interval: 5, what: 'the replacement worker' });
		await waitFor(() => /^mkdir\(/.test(hold.held()) || null, { timeout: 60_000, what: 'its sandbox start to be held in the spawner' });
		// the main loop is not the thread that waits: both sessions are answered
		assert.deepEqual(await keep.client.ping(), {});
		assert.deepEqual(await a.client.ping(), {});
		assert.match(hold.held(), /^mkdir\(/, 'the start was still held while the sessions were answered');
		// a session takes w1, whose sandbox is still starting, and is deleted: w1 leaves; its
		// replacement w2 asks for a sandbox behind w1's and is killed
		const b = await srv.connect();
		assert.equal(sessionWorker(srv.pid, b.sessionId), w1, 'the new session has the worker whose sandbox is held');
		const w2 = await waitFor(() => children(srv.pid).find((p) => !before.has(p) && p !== w1 && ready.test(cmdline(p) || '')), { timeout: 60_000, interval: 5, what: 'the next replacement worker' });
		await b.transport.terminateSession();
		process.kill(w2, 'SIGKILL');
		await waitFor(() => (gone(w1) && gone(w2)) || null, { timeout: 60_000, what: 'both workers reaped' });
		assert.match(hold.held(), /^mkdir\(/, 'both went while the start was held');
		assert.deepEqual(await keep.client.ping(), {});
		await hold.release();
		hold = null;
		await waitFor(() => new RegExp(`its worker \\(pid ${w1}\\) went while it started; removing it`).test(srv.stderr) || null, { timeout: 60_000, what: 'the held start to undo itself' });
		await waitFor(() => leftovers(srv).length === 0, { timeout: 120_000, interval: 200, what: `nothing left behind (${leftovers(srv).join(', ')})` });
		// w2's start, queued behind the held one, was dropped unstarted (unless w2 died before its
		// REQ_SANDBOX was read: then there was none; either way leftovers() found no jail of it)
		t.diagnostic(new RegExp(`a sandbox for worker pid ${w2} was not started`).test(srv.stderr)
			? 'the killed worker\'s queued start was dropped' : 'the killed worker died before asking for a sandbox');
		// the pool goes on: the next session works in a sandbox of its own
		const next = await srv.connect();
		const r = await callTool(next.client, 'execute_go_code', { code: 'package snippet\n\nimport "context"\n\nfunc run(ctx context.Context) (any, error) { return 9, nil }\n' });
		assert.equal(sc(r).result?.value, 9, JSON.stringify(sc(r)));
		const r2 = await callTool(a.client, 'execute_go_code', { code: 'package snippet\n\nimport "context"\n\nfunc run(ctx context.Context) (any, error) { return 8, nil }\n' });
		assert.equal(sc(r2).result?.value, 8, JSON.stringify(sc(r2)));
	} finally {
		if (hold)
			await hold.release();
		await srv.close();
		fs.rmSync(tmp, { recursive: true, force: true });
	}
});

test('http: a worker that dies before its spawner has put its pid on its slot is reaped as that slot\'s worker, not as a stranger; the pool goes on', { ...T, skip: os.userInfo().uid !== 0 && 'as root only (like the other cases here)' }, async () => {
	const srv = await httpServe(['--workers-min-idle', '1']);
	const tmp = fs.mkdtempSync(`${os.tmpdir()}/kg-churn-`);
	let hold;
	try {
		const keep = await srv.connect();
		await waitFor(() => jails(srv.pid).length === 2 || null, { timeout: 60_000, what: 'both sandboxes up' });
		// the worker spawner held as its next posix_spawn returns: the worker runs, its pid
		// not yet on its slot
		hold = await holdSpawner(srv, tmp, 'kg-workers', 'clone,clone3,vfork', 'exit');
		await srv.connect(); // takes the idle worker: the pool starts a replacement
		const line = await waitFor(() => hold.held(), { timeout: 60_000, what: 'the worker spawner to be held after a start' });
		const w = Number(/= (\d+) \(DELAYED\)/.exec(line)?.[1]);
		assert.ok(w > 0 && children(srv.pid).includes(w), `the held start made a worker (${line})`);
		process.kill(w, 'SIGKILL');
		await waitFor(() => procStat(w)?.state === 'Z' || null, { timeout: 30_000, what: 'the worker to die' });
		// the main loop goes on serving, and leaves the dead worker unreaped while its start is held
		assert.deepEqual(await keep.client.ping(), {});
		assert.ok(hold.held(), 'still held');
		assert.equal(procStat(w)?.state, 'Z', 'not reaped while nobody knows it yet');
		await hold.release();
		hold = null;
		// reaped as its slot's worker: a start-up failure of that pid, its slot freed
		await waitFor(() => new RegExp(`worker pid ${w} killed by signal 9 \\(SIGKILL\\) before serving any request`).test(srv.stderr) || null, { timeout: 60_000, what: `worker ${w}'s death to be seen as its slot's` });
		assert.ok(gone(w), 'reaped');
		const next = await srv.connect();
		const r = await callTool(next.client, 'execute_go_code', { code: 'package snippet\n\nimport "context"\n\nfunc run(ctx context.Context) (any, error) { return 4, nil }\n' });
		assert.equal(sc(r).result?.value, 4, JSON.stringify(sc(r)));
		await waitFor(() => leftovers(srv).length === 0, { timeout: 120_000, interval: 200, what: `nothing left behind (${leftovers(srv).join(', ')})` });
	} finally {
		if (hold)
			await hold.release();
		await srv.close();
		fs.rmSync(tmp, { recursive: true, force: true });
	}
});
