/*
 * lifecycle.test.mjs - a session's sandbox over its life, driven through the real
 * `kode-gopher serve` with the official MCP SDK client: /app/persist across calls, the wipe of
 * /app before each execute_go_code, lookup_package_docs touching nothing, the module and build
 * caches surviving between calls, a sandbox killed mid-call (replaced, and the call retried
 * once), and `kode-gopher exec` / `kode-gopher sandboxes` (--keep, --claim, list, rm).
 *
 * One session serves the first tests, as a model would use it; the sandbox-death test opens its
 * own. Run by tests/run.sh (node --test).
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import test, { after } from 'node:test';

import {
	callTool, cmdline, connect, descendants, execGo, goStr, isAlive, procsMatching, run, sc, sharedSession, show as showCut,
	sleep, snippet, text,
	waitFor,
} from './lib.mjs';

const T = { timeout: 300_000 };
const live = sharedSession();



const show = (s) => showCut(s, 2000);

/* exec - execute_go_code; returns [result, structuredContent] */
const exec = async (args, s) => execGo(s || (await live()), args);

/* execOk - execute_go_code that must return kind ok; returns the structured result */
async function execOk(args, s) {
	const [res, st] = await exec(args, s);
	assert.equal(st.result.kind, 'ok', show(st));
	assert.equal(res.isError, false, show(st));
	return st;
}

/* WRITE - a snippet writing files (path → content, directories made), returning "written" */
const WRITE = (files) => snippet(
	`\tfiles := map[string]string{${Object.entries(files).map(([p, c]) => `${goStr(p)}: ${goStr(c)}`).join(', ')}}\n` +
	'\tfor p, c := range files {\n' +
	'\t\tif err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {\n\t\t\treturn nil, err\n\t\t}\n' +
	'\t\tif err := os.WriteFile(p, []byte(c), 0o644); err != nil {\n\t\t\treturn nil, err\n\t\t}\n\t}\n' +
	'\treturn "written", nil', ['os', 'path/filepath']);

/* READ - a snippet returning path → content, or "<missing>" when the file does not exist */
const READ = (paths, extra = '') => snippet(
	`\t// ${extra}\n` +
	`\tpaths := []string{${paths.map(goStr).join(', ')}}\n` +
	'\tout := map[string]string{}\n' +
	'\tfor _, p := range paths {\n' +
	'\t\tb, err := os.ReadFile(p)\n' +
	'\t\tswitch {\n\t\tcase os.IsNotExist(err):\n\t\t\tout[p] = "<missing>"\n' +
	'\t\tcase err != nil:\n\t\t\tout[p] = "<" + err.Error() + ">"\n' +
	'\t\tdefault:\n\t\t\tout[p] = string(b)\n\t\t}\n\t}\n' +
	'\treturn out, nil', ['os']);

test('/app/persist survives from one call to the next', T, async () => {
	const w = await execOk({ code: WRITE({ '/app/persist/x': 'value of x', 'persist/rel/y.txt': 'relative y' }) });
	assert.equal(w.result.value, 'written');
	const r = await execOk({ code: READ(['/app/persist/x', '/app/persist/rel/y.txt', 'persist/x']) });
	assert.deepEqual(r.result.value, {
		'/app/persist/x': 'value of x', '/app/persist/rel/y.txt': 'relative y', 'persist/x': 'value of x',
	});
	assert.equal(r.sandbox, w.sandbox);
	assert.equal(r.retried, false);
});

test('/app is wiped before each execute_go_code, except /app/persist', T, async () => {
	await execOk({
		code: WRITE({
			'/app/other/y': 'gone next call', '/app/top.txt': 'gone too', '/app/persist/kept': 'kept',
			'/app/persist/deep/er/z': 'kept deep',
		}),
	});
	const r = await execOk({
		code: READ(['/app/other/y', '/app/top.txt', '/app/persist/kept', '/app/persist/deep/er/z']),
	});
	assert.deepEqual(r.result.value, {
		'/app/other/y': '<missing>', '/app/top.txt': '<missing>', '/app/persist/kept': 'kept',
		'/app/persist/deep/er/z': 'kept deep',
	});
	// the directory went too, and what the call itself sent is all that is in /app
	const ls = await execOk({
		code: snippet('\tents, err := os.ReadDir("/app")\n\tvar names []string\n' +
			'\tfor _, e := range ents {\n\t\tnames = append(names, e.Name())\n\t}\n\treturn names, err', ['os']),
	});
	assert.ok(!ls.result.value.includes('other'), `/app holds ${ls.result.value}`);
	assert.ok(!ls.result.value.includes('top.txt'), `/app holds ${ls.result.value}`);
	assert.ok(ls.result.value.includes('persist'), `/app holds ${ls.result.value}`);
	assert.ok(ls.result.value.includes('main.go'), `/app holds ${ls.result.value}`);
});

test('lookup_package_docs between two calls wipes and disturbs nothing', T, async () => {
	const s = await live();
	const w = await execOk({ code: WRITE({ '/app/persist/a': 'written before the doc lookup' }) });
	// the same code twice around the lookup: the second build must come from the cache
	const probe = READ(['/app/persist/a'], 'probe around a doc lookup');
	const first = await execOk({ code: probe });
	assert.deepEqual(first.result.value, { '/app/persist/a': 'written before the doc lookup' });
	for (const args of [{ package: 'fmt', symbol: 'Println' }, { package: 'os' }, { package: 'no.such/pkg' }]) {
		const d = await callTool(s.client, 'lookup_package_docs', args);
		assert.equal(d.isError ?? false, args.package === 'no.such/pkg', `${JSON.stringify(args)}: ${text(d).slice(0, 300)}`);
	}
	const second = await execOk({ code: probe });
	assert.deepEqual(second.result.value, { '/app/persist/a': 'written before the doc lookup' });
	assert.equal(second.cached_build, true, `the doc lookups left the session's build cache alone: ${show(second)}`);
	assert.equal(second.sandbox, w.sandbox);
	assert.equal(second.retried, false);
});

test('caches survive: a module outside the lockfile is tidied once, then built from the cache', T, async () => {
	// github.com/google/btree is neither in runtime/go.mod nor a dependency of anything in it
	const first = await execOk({
		code: snippet('\tt := btree.NewOrderedG[int](2)\n\tfor _, v := range []int{5, 1, 4} {\n\t\tt.ReplaceOrInsert(v)\n\t}\n' +
			'\tmin, _ := t.Min()\n\treturn map[string]int{"len": t.Len(), "min": min}, nil', ['github.com/google/btree']),
	});
	assert.equal(first.tidied, true, `the first import of btree needs a go get: ${show(first)}`);
	assert.deepEqual(first.result.value, { len: 3, min: 1 });
	assert.equal(typeof first.tidy_output, 'string');
	// different source (no cached binary), same module: no tidy, and btree is compiled already
	const second = await execOk({
		code: snippet('\tt := btree.NewOrderedG[string](4)\n\tt.ReplaceOrInsert("gopher")\n' +
			'\tmax, _ := t.Max()\n\treturn max, nil', ['github.com/google/btree']),
	});
	assert.equal(second.tidied, false, show(second));
	assert.equal(second.cached_build, false, show(second));
	assert.equal(second.result.value, 'gopher');
	// btree's archive is in the session's cache: the same import set links directly from it
	// (a direct build needs every archive its plan names; a fact, not a timing)
	assert.equal(second.build_path, 'direct', `btree was compiled by the first call: ${show(second)}`);
	assert.equal(second.sandbox, first.sandbox);
	// and lookup_package_docs now knows the module the session added
	const d = await callTool((await live()).client, 'lookup_package_docs', { package: 'github.com/google/btree', symbol: 'NewOrderedG' });
	assert.equal(d.isError ?? false, false, text(d));
	assert.match(text(d), /func NewOrderedG/);
});

/* agentOf - the sandbox agent below a serve process (host pid), or null */
function agentOf(servePid) {
	for (const pid of descendants(servePid)) {
		// the jail's own command line ends with the agent's: match argv[1] only
		const argv = (cmdline(pid) || '').split(' ');
		if (argv[1] === 'agent' && argv.includes('--listen') && isAlive(pid))
			return pid;
	}
	return null;
}

test('sandbox killed mid-call → a fresh sandbox, the call retried once, /app/persist empty again', T, async () => {
	const s = await connect();
	const w = await execOk({ code: WRITE({ '/app/persist/p': 'before the crash' }) }, s);
	const agent = agentOf(s.pid);
	assert.ok(agent, `no agent below serve ${s.pid}`);
	const phases = [];
	const call = callTool(s.client, 'execute_go_code', {
		code: snippet('\tb, err := os.ReadFile("/app/persist/p")\n\ttime.Sleep(8 * time.Second)\n' +
			'\tif err != nil {\n\t\treturn "persist empty: " + err.Error(), nil\n\t}\n\treturn "persist has: " + string(b), nil',
		['os', 'time']),
		timeout_seconds: 30,
	}, { onprogress: (p) => phases.push(p.message || '') });
	call.catch(() => { /* awaited below */ });
	await waitFor(() => phases.some((m) => m.startsWith('run')), { timeout: 120_000, what: 'the run phase' });
	await sleep(500);
	const t0 = Date.now();
	process.kill(agent, 'SIGKILL');
	const res = await call;
	const st = sc(res);
	assert.ok(st, `no structuredContent: ${text(res).slice(0, 1000)}`);
	assert.equal(st.retried, true, show(st));
	assert.notEqual(st.sandbox, w.sandbox, 'a fresh sandbox ran the retry');
	// the call waited for that fresh sandbox to be claimed: it starts a jail and an agent, which
	// cannot happen within the same millisecond (claim_ms was the first claim's, 0 when warm)
	assert.ok(st.timings.claim_ms > 0, `claim_ms counts the fresh sandbox's claim: ${show(st.timings)}`);
	assert.equal(st.result.kind, 'ok', show(st));
	assert.match(st.result.value, /^persist empty: open \/app\/persist\/p: no such file or directory$/);
	assert.ok(Date.now() - t0 >= 7000, 'the retry ran the 8 s sleep again');
	assert.equal(isAlive(agent), false, 'the killed agent is gone');
	// the session carries on in the new sandbox, whose /app/persist started empty
	const after = await execOk({ code: READ(['/app/persist/p']) }, s);
	assert.deepEqual(after.result.value, { '/app/persist/p': '<missing>' });
	assert.equal(after.sandbox, st.sandbox);
	assert.equal(after.retried, false);
	const agent2 = agentOf(s.pid);
	assert.ok(agent2 && agent2 !== agent, 'a new agent serves the session');
	// the dead sandbox's directory was released
	assert.ok(!fs.existsSync(path.join(s.sandboxRoot, w.sandbox)), `${w.sandbox} was left on disk`);
});

/* ---- kode-gopher exec and kode-gopher sandboxes ---- */

const execRoot = fs.mkdtempSync(path.join(os.tmpdir(), 'kg-e2e-exec-'));
const files = fs.mkdtempSync(path.join(os.tmpdir(), 'kg-e2e-files-'));

after(async () => {
	// kept sandboxes: remove through the command, then whatever is left on disk
	const names = (await kg(['sandboxes', 'list'])).stdout.split('\n').slice(1).map((l) => l.split('\t')[0]).filter(Boolean);
	if (names.length)
		await kg(['sandboxes', 'rm', ...names]);
	for (const pid of procsMatching(execRoot))
		try {
			process.kill(pid, 'SIGKILL');
		} catch { /* gone */ }
	for (const d of [execRoot, files])
		fs.rmSync(d, { recursive: true, force: true });
});

/* kg - run `kode-gopher ARGS` with the test's sandbox root; resolves {code, stdout, stderr} */
function kg(args, { input, timeout = 180_000 } = {}) {
	return run(args, { input, timeout, env: { KODE_GOPHER_SANDBOX_ROOT: execRoot } });
}

/* file - a Go file for exec in the test's scratch directory; returns its path */
function file(name, content) {
	const p = path.join(files, name);
	fs.writeFileSync(p, content);
	return p;
}

/* listed - the names `sandboxes list` prints */
async function listed() {
	const r = await kg(['sandboxes', 'list']);
	assert.equal(r.code, 0, `sandboxes list: ${r.stderr}`);
	const [header, ...rows] = r.stdout.split('\n').filter(Boolean);
	if (header !== undefined) // none: stdout stays empty
		assert.equal(header, 'NAME\tPERSIST\tSTATE\tAGE\tSIZE');
	return rows.map((l) => l.split('\t')[0]);
}

test('exec --json: exit 0 for an ok result, 1 for an error result', T, async () => {
	const ok = await kg(['exec', '--json', file('ok.go', snippet('\treturn map[string]int{"n": 7}, nil'))]);
	assert.equal(ok.code, 0, ok.stderr);
	const j = JSON.parse(ok.stdout);
	assert.equal(j.result.kind, 'ok');
	assert.deepEqual(j.result.value, { n: 7 });
	assert.equal(j.phase, 'run');
	assert.equal(typeof j.sandbox, 'string');

	const bad = await kg(['exec', '--json', file('bad.go', snippet('\treturn nil, errors.New("it went wrong")', ['errors']))]);
	assert.equal(bad.code, 1, bad.stderr);
	const jb = JSON.parse(bad.stdout);
	assert.equal(jb.result.kind, 'error');
	assert.equal(jb.result.message, 'it went wrong');

	const build = await kg(['exec', '--json', file('build.go', snippet('\treturn undefinedThing, nil'))]);
	assert.equal(build.code, 1, build.stderr);
	assert.equal(JSON.parse(build.stdout).result.kind, 'build_error');
	// exec leaves nothing behind without --keep
	assert.deepEqual(await listed(), []);
});

test('exec - reads the code from stdin; the summary without --json says ok', T, async () => {
	const prog = 'package main\n\nimport "fmt"\n\nfunc main() { fmt.Println("from stdin", 6*7) }\n';
	const r = await kg(['exec', '-'], { input: prog });
	assert.equal(r.code, 0, r.stderr);
	// like go run: the program's output on stdout, the summary on stderr
	assert.equal(r.stdout, 'from stdin 42\n');
	assert.match(r.stderr, /^ok\b/m);
	const j = await kg(['exec', '--json', '-'], { input: prog });
	assert.equal(j.code, 0, j.stderr);
	assert.equal(JSON.parse(j.stdout).stdout, 'from stdin 42\n');
	const e = await kg(['exec', '-'], { input: snippet('\treturn nil, errors.New("nope")', ['errors']) });
	assert.equal(e.code, 1);
	assert.match(e.stderr, /^error \(wrapped\): nope\b/m);
});

test('exec --keep, sandboxes list, exec --claim, sandboxes rm', T, async () => {
	const writer = file('keep.go', snippet(
		'\told, _ := os.ReadFile("/app/persist/k.txt")\n' +
		'\tif err := os.WriteFile("/app/persist/k.txt", []byte("kept by exec --keep"), 0o644); err != nil {\n\t\treturn nil, err\n\t}\n' +
		'\treturn "had: " + string(old), nil', ['os']));
	const k = await kg(['exec', '--json', '--keep', writer]);
	assert.equal(k.code, 0, k.stderr);
	assert.equal(JSON.parse(k.stdout).result.value, 'had: ');
	const m = /kept sandbox (\S+)/.exec(k.stderr);
	assert.ok(m, `exec --keep names the sandbox on stderr: ${k.stderr}`);
	const name = m[1];
	assert.equal(JSON.parse(k.stdout).sandbox, name);
	assert.ok((await listed()).includes(name), 'sandboxes list shows the kept sandbox');
	assert.match((await kg(['sandboxes', 'list'])).stdout, new RegExp(`^${name}\\t.*has-persist`, 'm'));
	// nothing of it runs while it waits to be claimed
	assert.deepEqual(procsMatching(path.join(execRoot, name)), []);

	// a later run claims it and finds what the first one left in /app/persist
	const reader = file('claim.go', snippet('\tb, err := os.ReadFile("/app/persist/k.txt")\n\treturn string(b), err', ['os']));
	const c = await kg(['exec', '--json', '--keep', '--claim', name, reader]);
	assert.equal(c.code, 0, c.stderr);
	const jc = JSON.parse(c.stdout);
	assert.equal(jc.result.value, 'kept by exec --keep', c.stdout);
	assert.equal(jc.sandbox, name);
	assert.ok((await listed()).includes(name), 'claimed with --keep, it is kept again');

	const rm = await kg(['sandboxes', 'rm', name]);
	assert.equal(rm.code, 0, rm.stderr);
	assert.ok(!(await listed()).includes(name), 'sandboxes list no longer shows it');
	assert.equal(fs.existsSync(path.join(execRoot, name)), false, 'its directory is gone');
	const again = await kg(['sandboxes', 'rm', name]);
	assert.notEqual(again.code, 0, 'removing it twice is an error');
	assert.match(again.stderr, new RegExp(name));
});

test('exec --claim without --keep takes the kept sandbox and releases it at the end', T, async () => {
	const k = await kg(['exec', '--keep', file('keep2.go', WRITE({ '/app/persist/once': 'claimed once' }))]);
	assert.equal(k.code, 0, k.stderr);
	const name = /kept sandbox (\S+)/.exec(k.stderr)?.[1];
	assert.ok(name, k.stderr);
	const c = await kg(['exec', '--json', '--claim', name, file('claim2.go', READ(['/app/persist/once']))]);
	assert.equal(c.code, 0, c.stderr);
	assert.deepEqual(JSON.parse(c.stdout).result.value, { '/app/persist/once': 'claimed once' });
	assert.ok(!(await listed()).includes(name), 'a claim without --keep is released like a new sandbox');
	const missing = await kg(['exec', '--json', '--claim', name, file('claim3.go', READ(['/app/persist/once']))]);
	assert.notEqual(missing.code, 0, `claiming a removed sandbox fails: ${missing.stdout}`);
	assert.match(missing.stderr + missing.stdout, new RegExp(name));
});
