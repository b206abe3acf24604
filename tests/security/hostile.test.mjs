/*
 * hostile.test.mjs - hostile Go code against the local sandbox (the jail), driven through the
 * real `kode-gopher serve` with the official MCP SDK client. Each case checks that the code is
 * CONTAINED: the result tells a model what happened in words it can act on, nothing of the host
 * or of another session is reachable, and the next call in the same session works.
 *
 * Most cases share one session, as a model would; a case that could break its sandbox (or
 * needs other serve flags) opens its own. Run by tests/run.sh (node --test); imports the shared
 * helpers from ../e2e/lib.mjs.
 */
import assert from 'node:assert/strict';
import { createHash, randomUUID } from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import test from 'node:test';

import {
	BIN, callTool, connect, goStr, isAlive, REPO, sandboxEntries, sc, sharedSession, snippet, text, waitFor,
} from '../e2e/lib.mjs';

const T = { timeout: 240_000 };

let firstSandbox; /* the shared session's sandbox: hostile code must not cost it its sandbox */
const live = sharedSession({ onFresh: () => { firstSandbox = undefined; } });



/* show - a result for an assertion message, long outputs cut */
function show(s) {
	if (!s)
		return String(s);
	const o = { ...s };
	for (const k of ['stdout', 'stderr'])
		if (typeof o[k] === 'string' && o[k].length > 800)
			o[k] = o[k].slice(0, 400) + ` …[${o[k].length} chars]… ` + o[k].slice(-400);
	return JSON.stringify(o).slice(0, 3000);
}

/* run - execute_go_code in a session (the shared one by default); returns [result, structured] */
async function run(args, s) {
	s = s || (await live());
	const res = await callTool(s.client, 'execute_go_code', args);
	const st = sc(res);
	assert.ok(st, `no structuredContent: ${text(res).slice(0, 1000)}`);
	return [res, st];
}

/* runRaw - execute_go_code without insisting on structuredContent (a call the sandbox died in) */
async function runRaw(args, s) {
	const res = await callTool(s.client, 'execute_go_code', args);
	return [res, sc(res)];
}

/* runOk - run a snippet that must come back kind ok; returns its value */
async function runOk(args, s) {
	const [res, st] = await run(args, s);
	assert.equal(st.result.kind, 'ok', show(st));
	assert.equal(res.isError, false, show(st));
	return st.result.value;
}

/* The follow-up: a trivial snippet that also counts the processes the sandbox can see, so
 * leftovers of the hostile call (sleepers, a fork bomb) show up. */
const NEXT = snippet(
	'\tents, _ := os.ReadDir("/proc")\n\tn := 0\n\tfor _, e := range ents {\n' +
	'\t\tif _, err := strconv.Atoi(e.Name()); err == nil {\n\t\t\tn++\n\t\t}\n\t}\n' +
	'\treturn map[string]int{"answer": 42, "procs": n}, nil', ['os', 'strconv']);

/*
 * nextCallWorks - the session survived: a trivial call right after returns kind ok quickly, in
 * the same sandbox (unless sameSandbox is false: then a fresh one may have to replace a dead
 * one), with no process of the earlier call left.
 * Returns its structured result.
 */
async function nextCallWorks(s, { sameSandbox = true, prev } = {}) {
	s = s || (await live());
	assert.equal(s.closed, false, 'serve is still running');
	const [res, st] = await run({ code: NEXT }, s);
	assert.equal(st.result.kind, 'ok', `the next call works: ${show(st)}`);
	assert.equal(res.isError, false);
	assert.equal(st.result.value.answer, 42);
	if (sameSandbox)
		assert.equal(st.retried, false, `the next call needed a fresh sandbox: ${show(st)}`);
	// the agent's init, the agent, and this program (plus a build helper at most)
	assert.ok(st.result.value.procs <= 5, `processes left in the sandbox: ${st.result.value.procs}`);
	if (live.is(s)) {
		firstSandbox ??= st.sandbox;
		if (sameSandbox)
			assert.equal(st.sandbox, firstSandbox, 'the hostile call did not cost the session its sandbox');
	}
	if (prev && sameSandbox)
		assert.equal(st.sandbox, prev.sandbox, 'the same sandbox ran the hostile call and the next one');
	return st;
}

/* checkOutcome - a map of path → outcome from the sandbox, each one of the allowed errors */
function allErrors(value, re, what) {
	for (const [p, v] of Object.entries(value))
		assert.match(String(v), re, `${what} ${p}: ${v}`);
}

test('the shared session starts and a trivial call works', T, async () => {
	await nextCallWorks();
});

test('host files are out of reach: /etc/shadow, /root, the repository, the sandbox root, the binary', T, async () => {
	const s = await live();
	const sandboxDirs = fs.readdirSync(s.sandboxRoot).map((d) => path.join(s.sandboxRoot, d));
	const paths = [
		'/etc/shadow', '/etc/gshadow', '/etc/sudoers', '/root', '/root/.bash_history', '/root/.ssh',
		'/home', path.join(REPO, 'Makefile'), path.join(REPO, 'master', 'serve.c'), REPO,
		s.sandboxRoot, ...sandboxDirs, ...sandboxDirs.map((d) => path.join(d, 'app', 'main.go')),
		BIN, '/var/lib/kode-gopher/sandboxes', '/proc/1/root/etc/shadow', '/proc/2/root/etc/shadow',
		'/proc/1/cwd/Makefile', '/sys/kernel', '/boot', '/var/log', '/run',
	];
	const value = await runOk({
		code: snippet(
			`\tpaths := []string{${paths.map(goStr).join(', ')}}\n` +
			'\tout := map[string]string{}\n' +
			'\tfor _, p := range paths {\n' +
			'\t\tif b, err := os.ReadFile(p); err == nil {\n' +
			'\t\t\tout[p] = fmt.Sprintf("READ %d bytes: %.60q", len(b), b)\n' +
			'\t\t} else if ents, derr := os.ReadDir(p); derr == nil && len(ents) > 0 {\n' +
			'\t\t\tout[p] = fmt.Sprintf("LISTED %d entries: %s", len(ents), ents[0].Name())\n' +
			'\t\t} else {\n\t\t\tout[p] = err.Error()\n\t\t}\n\t}\n' +
			'\treturn out, nil', ['fmt', 'os']),
	});
	assert.deepEqual(Object.keys(value).sort(), [...new Set(paths)].sort());
	allErrors(value, /no such file or directory|permission denied/, 'host path');
	// the host's /etc/shadow in particular
	assert.match(value['/etc/shadow'], /^open \/etc\/shadow: (no such file or directory|permission denied)$/);
	await nextCallWorks();
});

test('the sandbox sees only a tmpfs root with /usr, a few /etc files, /app, /tmp, /proc, /dev', T, async () => {
	const value = await runOk({
		code: snippet(
			'\tents, err := os.ReadDir("/")\n\tif err != nil {\n\t\treturn nil, err\n\t}\n' +
			'\tvar names []string\n\tfor _, e := range ents {\n\t\tnames = append(names, e.Name())\n\t}\n' +
			'\tetc, _ := os.ReadDir("/etc")\n\tvar en []string\n\tfor _, e := range etc {\n\t\ten = append(en, e.Name())\n\t}\n' +
			'\tpw, _ := os.ReadFile("/etc/passwd")\n' +
			'\treturn map[string]any{"root": names, "etc": en, "uid": os.Getuid(), "passwd": string(pw)}, nil', ['os']),
	});
	for (const bad of ['root', 'home', 'work', 'boot', 'sys', 'srv', 'opt', 'mnt'])
		assert.ok(!value.root.includes(bad), `/${bad} is visible in the sandbox: ${value.root}`);
	for (const want of ['app', 'tmp', 'usr', 'proc', 'dev', 'etc'])
		assert.ok(value.root.includes(want), `/${want} is missing: ${value.root}`);
	for (const bad of ['shadow', 'gshadow', 'sudoers', 'ssh'])
		assert.ok(!value.etc.includes(bad), `/etc/${bad} is visible: ${value.etc}`);
	assert.equal(value.uid, 1000, 'the sandbox runs as an unprivileged uid');
	assert.doesNotMatch(value.passwd, /^root:.*:\/root:/m, 'the host\'s passwd is not the sandbox\'s');
});

test('another session\'s /app/persist is invisible, by path and by walking /', T, async () => {
	const a = await live();
	// b without a disk image: its /app/persist is then a plain directory on the host, a path a
	// can try (with the limit b's files are inside its disk image, further out of reach)
	const b = await connect({ args: ['--sandbox-disk', 'off'] });
	const marker = `kg-secret-${randomUUID()}`;
	const content = `the secret of session b ${randomUUID()}`;
	// b writes its secret and can read it back
	const wrote = await runOk({
		code: snippet(
			`\tif err := os.WriteFile(${goStr(`/app/persist/${marker}.txt`)}, []byte(${goStr(content)}), 0o644); err != nil {\n\t\treturn nil, err\n\t}\n` +
			`\tb, err := os.ReadFile(${goStr(`/app/persist/${marker}.txt`)})\n\treturn string(b), err`, ['os']),
	}, b);
	assert.equal(wrote, content);
	const bDirs = sandboxEntries(b.sandboxRoot);
	assert.ok(bDirs.length >= 1, 'b has a sandbox directory on the host');
	const hostCopy = path.join(b.sandboxRoot, bDirs[0], 'app', 'persist', `${marker}.txt`);
	assert.equal(fs.readFileSync(hostCopy, 'utf8'), content, 'the host sees b\'s file where expected');
	// a looks for it: at its own /app/persist, at b's host paths, through /proc, and by walking /
	const direct = [
		`/app/persist/${marker}.txt`, `/tmp/${marker}.txt`, hostCopy, b.sandboxRoot,
		path.join(b.sandboxRoot, bDirs[0]), path.dirname(hostCopy),
	];
	const value = await runOk({
		code: snippet(
			`\tmarker := ${goStr(marker)}\n\tsecret := reverse(${goStr([...content].reverse().join(''))})\n` +
			`\tdirect := []string{${direct.map(goStr).join(', ')}}\n` +
			'\tout := map[string]any{}\n\tfound := []string{}\n' +
			'\tfor _, p := range direct {\n\t\tif _, err := os.Stat(p); err == nil {\n\t\t\tfound = append(found, "stat "+p)\n\t\t} else {\n\t\t\tout[p] = err.Error()\n\t\t}\n\t}\n' +
			'\tprocs, _ := filepath.Glob("/proc/[0-9]*/root/app/persist/" + marker + ".txt")\n' +
			'\tfound = append(found, procs...)\n' +
			'\twalked := 0\n' +
			'\tfilepath.WalkDir("/", func(p string, d fs.DirEntry, err error) error {\n' +
			'\t\tif err != nil {\n\t\t\treturn nil\n\t\t}\n' +
			'\t\tif d.IsDir() && (p == "/proc" || p == "/sys" || p == "/usr" || p == "/dev") {\n\t\t\treturn filepath.SkipDir\n\t\t}\n' +
			'\t\twalked++\n' +
			'\t\tif strings.Contains(p, marker) {\n\t\t\tfound = append(found, "walk "+p)\n\t\t}\n' +
			'\t\tif d.Type().IsRegular() && !strings.HasPrefix(p, "/var/cache/") {\n' +
			'\t\t\tif b, err := os.ReadFile(p); err == nil && strings.Contains(string(b), secret) {\n\t\t\t\tfound = append(found, "content "+p)\n\t\t\t}\n\t\t}\n' +
			'\t\treturn nil\n\t})\n' +
			'\tout["found"] = found\n\tout["walked"] = walked\n\treturn out, nil',
			['io/fs', 'os', 'path/filepath', 'strings']) +
			'\n// reverse - the secret is sent reversed, so this program\'s own source and binary do not hold it\n' +
			'func reverse(s string) string {\n\tr := []rune(s)\n\tfor i, j := 0, len(r)-1; i < j; i, j = i+1, j-1 {\n' +
			'\t\tr[i], r[j] = r[j], r[i]\n\t}\n\treturn string(r)\n}\n',
		timeout_seconds: 120,
	}, a);
	assert.deepEqual(value.found, [], `session a found session b's secret: ${JSON.stringify(value)}`);
	assert.ok(value.walked > 10, `the walk visited ${value.walked} entries`);
	for (const p of direct)
		assert.match(value[p], /no such file or directory/, `${p}: ${value[p]}`);
	await nextCallWorks(a);
	// and b still has it: a's search disturbed nothing
	assert.equal(fs.readFileSync(hostCopy, 'utf8'), content);
});

/* RUNTIME - the base caches; the jail mounts them at the same path inside the sandbox */
const RUNTIME = process.env.KODE_GOPHER_RUNTIME_DIR || '/var/cache/kode-gopher/runtime';

test('the Go caches are per session: what one session writes there, the host and other sessions never see', T, async () => {
	const a = await live();
	const mark = `kg-poison-${randomUUID()}`;
	const modFile = path.join(RUNTIME, 'gomodcache', 'github.com', 'google', 'uuid@v1.6.0', 'uuid.go');
	const cacheDir = path.join(RUNTIME, 'gocache', '00');
	const entry = fs.readdirSync(cacheDir).find((f) => f.endsWith('-d')) || fs.readdirSync(cacheDir)[0];
	assert.ok(entry, `no build cache entry in ${cacheDir}`);
	const cacheFile = path.join(cacheDir, entry);
	const hostBefore = { mod: fs.readFileSync(modFile), cache: fs.readFileSync(cacheFile) };
	const newFiles = [path.join(RUNTIME, 'gocache', `${mark}`), path.join(RUNTIME, 'gocache', '00', `${mark}-d`),
		path.join(RUNTIME, 'gomodcache', 'cache', 'download', `${mark}.txt`)];
	// a's program writes new cache files and tries to replace existing ones (directly and by rename)
	const POISON = snippet(
		'\te := func(err error) string {\n\t\tif err == nil {\n\t\t\treturn "nil"\n\t\t}\n\t\treturn err.Error()\n\t}\n' +
		'\tout := map[string]string{}\n' +
		`\tfor _, p := range []string{${newFiles.map(goStr).join(', ')}} {\n` +
		'\t\tout["new "+p] = e(os.WriteFile(p, []byte("poison"), 0o644))\n\t}\n' +
		`\tfor _, p := range []string{${[modFile, cacheFile].map(goStr).join(', ')}} {\n` +
		'\t\tout["write "+p] = e(os.WriteFile(p, []byte("poison"), 0o644))\n' +
		'\t\ttmp := filepath.Join(filepath.Dir(p), ".kg-poison")\n' +
		'\t\tif err := os.WriteFile(tmp, []byte("poison"), 0o644); err != nil {\n\t\t\tout["rename "+p] = e(err)\n\t\t\tcontinue\n\t\t}\n' +
		'\t\tout["rename "+p] = e(os.Rename(tmp, p))\n\t}\n' +
		'\treturn out, nil', ['os', 'path/filepath']);
	const poisoned = await runOk({ code: POISON }, a);
	// nothing reached the host's base caches
	for (const p of newFiles)
		assert.equal(fs.existsSync(p), false, `${p} appeared on the host`);
	assert.ok(fs.readFileSync(modFile).equals(hostBefore.mod), `${modFile} changed on the host: ${JSON.stringify(poisoned)}`);
	assert.ok(fs.readFileSync(cacheFile).equals(hostBefore.cache), `${cacheFile} changed on the host`);
	assert.equal(fs.existsSync(path.join(path.dirname(modFile), '.kg-poison')), false);
	// a fresh session sees the base caches as they were
	const b = await connect();
	const seen = await runOk({
		code: snippet(
			'\tout := map[string]string{}\n' +
			`\tfor _, p := range []string{${[...newFiles, modFile, cacheFile].map(goStr).join(', ')}} {\n` +
			'\t\tb, err := os.ReadFile(p)\n\t\tif err != nil {\n\t\t\tout[p] = err.Error()\n\t\t} else {\n' +
			'\t\t\tsum := sha256.Sum256(b)\n\t\t\tout[p] = hex.EncodeToString(sum[:])\n\t\t}\n\t}\n' +
			'\treturn out, nil', ['crypto/sha256', 'encoding/hex', 'os']),
	}, b);
	const sha = (buf) => createHash('sha256').update(buf).digest('hex');
	for (const p of newFiles)
		assert.match(seen[p], /no such file or directory/, `session b sees ${p}: ${seen[p]}`);
	assert.equal(seen[modFile], sha(hostBefore.mod), 'session b reads the original module source');
	assert.equal(seen[cacheFile], sha(hostBefore.cache), 'session b reads the original build cache entry');
	// and b builds code that uses the module a tried to poison
	const built = await runOk({ code: snippet('\treturn len(uuid.NewString()), nil', ['github.com/google/uuid']) }, b);
	assert.equal(built, 36);
	await nextCallWorks(a);
});

test('symlinks to host paths left in /app and /app/persist do not lead the release astray', T, async () => {
	const victim = fs.mkdtempSync(path.join(os.tmpdir(), 'kg-victim-'));
	try {
		fs.mkdirSync(path.join(victim, 'sub'));
		fs.writeFileSync(path.join(victim, 'file'), 'precious');
		fs.writeFileSync(path.join(victim, 'sub', 'f2'), 'precious too');
		const s = await connect();
		const links = {
			'/app/persist/link': victim, '/app/persist/flink': path.join(victim, 'file'),
			'/app/persist/rel': `../../../../../../../..${victim}`, '/app/persist/d/deep': path.join(victim, 'sub'),
			'/app/link': victim,
		};
		const value = await runOk({
			code: snippet(
				'\tout := map[string]string{}\n\tos.MkdirAll("/app/persist/d", 0o755)\n' +
				`\tfor link, target := range map[string]string{${Object.entries(links).map(([l, t]) => `${goStr(l)}: ${goStr(t)}`).join(', ')}} {\n` +
				'\t\tif err := os.Symlink(target, link); err != nil {\n\t\t\treturn nil, err\n\t\t}\n' +
				'\t\t_, err := os.ReadFile(filepath.Join(link, "file"))\n\t\tout[link] = fmt.Sprint(err)\n\t}\n' +
				'\t// a directory its owner cannot read either\n\tos.Chmod("/app/persist/d", 0)\n' +
				'\treturn out, nil', ['fmt', 'os', 'path/filepath']),
		}, s);
		for (const [l, v] of Object.entries(value))
			assert.notEqual(v, '<nil>', `${l} led the sandbox to the host's ${victim}`);
		// the session ends as a client ends it (stdin closes); serve releases the sandbox itself
		const dirs = sandboxEntries(s.sandboxRoot);
		await s.transport.close();
		await waitFor(() => !isAlive(s.pid), { timeout: 15_000, what: 'serve to exit' });
		for (const d of dirs)
			assert.equal(fs.existsSync(path.join(s.sandboxRoot, d)), false, `sandbox ${d} was left on disk`);
		assert.equal(fs.readFileSync(path.join(victim, 'file'), 'utf8'), 'precious');
		assert.equal(fs.readFileSync(path.join(victim, 'sub', 'f2'), 'utf8'), 'precious too');
	} finally {
		fs.rmSync(victim, { recursive: true, force: true });
	}
});

test('writes outside /app fail (read-only), while /app, /app/persist and /tmp work', T, async () => {
	const denied = [
		'/usr/kg-evil', '/usr/bin/kg-evil', '/kg-evil', '/etc/kg-evil', '/etc/passwd', '/etc/hosts',
		'/etc/resolv.conf', '/kg/kg-evil', '/kg/kode-gopher', '/var/kg-evil',
		'/var/cache/kode-gopher/runtime/kg-evil', '/proc/kg-evil', '/proc/sys/kernel/hostname',
	];
	const allowed = ['/app/kg-ok', '/app/persist/kg-ok', '/tmp/kg-ok'];
	const value = await runOk({
		code: snippet(
			`\tpaths := []string{${[...denied, ...allowed].map(goStr).join(', ')}}\n` +
			'\tout := map[string]string{}\n' +
			'\tfor _, p := range paths {\n' +
			'\t\tif err := os.WriteFile(p, []byte("kg"), 0o644); err != nil {\n\t\t\tout[p] = err.Error()\n\t\t\tcontinue\n\t\t}\n' +
			'\t\tb, err := os.ReadFile(p)\n\t\tout[p] = fmt.Sprintf("WROTE %s %v", b, err)\n\t}\n' +
			'\tout["mkdir /usr/local/kg"] = fmt.Sprint(os.Mkdir("/usr/local/kg", 0o755))\n' +
			'\tout["remove /usr/bin/sh"] = fmt.Sprint(os.Remove("/usr/bin/sh"))\n' +
			'\tout["chmod /app/persist"] = fmt.Sprint(os.Chmod("/app/persist", 0o700))\n' +
			'\treturn out, nil', ['fmt', 'os']),
	});
	for (const p of denied)
		assert.match(value[p], /read-only file system|permission denied|no such file or directory/, `${p}: ${value[p]}`);
	for (const p of ['/usr/kg-evil', '/kg-evil', '/etc/kg-evil', '/etc/passwd', '/usr/bin/kg-evil'])
		assert.match(value[p], /read-only file system|permission denied/, `${p}: ${value[p]}`);
	for (const p of allowed)
		assert.equal(value[p], 'WROTE kg <nil>', `${p}: ${value[p]}`);
	assert.match(value['mkdir /usr/local/kg'], /read-only file system|permission denied/);
	assert.match(value['remove /usr/bin/sh'], /read-only file system|permission denied/);
	// nothing reached the host
	for (const p of ['/usr/kg-evil', '/kg-evil', '/etc/kg-evil', '/usr/local/kg'])
		assert.equal(fs.existsSync(p), false, `${p} exists on the host`);
	await nextCallWorks();
});

/* LIMIT_MSG - how a result names the sandbox's process limit (--sandbox-pids, default 512) */
const LIMIT_MSG = /^the program hit the sandbox's limit of 512 processes and threads \(too many processes\); start fewer: /;

test('fork bomb in a shell → contained by the pids limit; the next call works', T, async () => {
	const [res, st] = await run({
		code: snippet(
			'\tcmd := exec.Command("/bin/bash", "-c", "f(){ f | f & }; f")\n' +
			'\tcmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr\n' +
			'\tif err := cmd.Run(); err != nil {\n\t\treturn nil, err\n\t}\n' +
			'\t<-ctx.Done()\n\treturn nil, ctx.Err()', ['os', 'os/exec']),
		timeout_seconds: 8,
	});
	assert.equal(res.isError, true, show(st));
	assert.equal(st.phase, 'run', show(st));
	// bash retries its forks until the timeout ends it all; each failed fork says why
	assert.equal(st.result.kind, 'timeout', show(st));
	assert.match(st.result.message, /ran past its 8 s timeout/, show(st));
	assert.match(st.stderr, /fork: retry: resource temporarily unavailable/i, show(st));
	await nextCallWorks(undefined, { prev: st });
});

/* spawner - a snippet that starts up to max never-waited `sleep` processes, returning how many */
const spawner = (max) => snippet(
	`\tn := 0\n\tfor i := 0; i < ${max}; i++ {\n` +
	'\t\tif err := exec.Command("sleep", "1000").Start(); err != nil {\n' +
	'\t\t\treturn n, fmt.Errorf("after %d processes: %w", n, err)\n\t\t}\n\t\tn++\n\t}\n' +
	'\treturn n, nil', ['fmt', 'os/exec']);

/* spawnerStopped - the spawner's call ended at the pids limit with a message naming it. Which
 * task the limit refuses first depends on scheduling, not on the product: the program's next
 * fork (kind error: its own error, "after N processes: fork/exec ...: resource temporarily
 * unavailable") or a thread the Go runtime wanted meanwhile (kind panic: "failed to create new
 * OS thread", newosproc); both are right, and each is checked whole */
function spawnerStopped(res, st, limit, lo, hi) {
	assert.equal(res.isError, true, show(st));
	assert.match(st.result.message, limit, show(st));
	if (st.result.kind === 'panic') {
		assert.match(st.result.message, /newosproc/, show(st));
		assert.match(st.stderr, /failed to create new OS thread \(have \d+ already; errno=11\)/, show(st));
		return;
	}
	assert.equal(st.result.kind, 'error', show(st));
	assert.match(st.result.message, /after \d+ processes: fork\/exec \/usr\/bin\/sleep: resource temporarily unavailable$/, show(st));
	const n = Number(/after (\d+) processes/.exec(st.result.message)[1]);
	assert.ok(n > lo && n < hi, `${n} processes before the limit`);
}

test('process spawner (os/exec sleep in a loop, never waited) → "resource temporarily unavailable"', T, async () => {
	const [res, st] = await run({
		code: spawner(100000),
		timeout_seconds: 30,
	});
	spawnerStopped(res, st, LIMIT_MSG, 10, 513);
	// the sleepers are gone: the next call sees no more than its own few processes
	await nextCallWorks(undefined, { prev: st });
});

test('--sandbox-pids 64 → the spawner stops near 64 processes, and the message names that limit', T, async () => {
	const s = await connect({ args: ['--sandbox-pids', '64'] });
	const [res, st] = await run({
		code: spawner(1000),
		timeout_seconds: 30,
	}, s);
	spawnerStopped(res, st, /^the program hit the sandbox's limit of 64 processes and threads/, 0, 64);
	await nextCallWorks(s, { prev: st });
});

test('thread bomb (goroutines locked to OS threads) → kind panic naming the thread limit', T, async () => {
	const [res, st] = await run({
		code: snippet(
			'\tfor i := 0; i < 100000; i++ {\n' +
			'\t\tgo func() {\n\t\t\truntime.LockOSThread()\n\t\t\ttime.Sleep(time.Hour)\n\t\t}()\n\t}\n' +
			'\ttime.Sleep(time.Hour)\n\treturn "survived", nil', ['runtime', 'time']),
		timeout_seconds: 30,
	});
	assert.equal(res.isError, true, show(st));
	assert.equal(st.result.kind, 'panic', show(st));
	assert.match(st.result.message, LIMIT_MSG, show(st));
	assert.match(st.result.message, /newosproc/, show(st));
	assert.match(st.stderr, /failed to create new OS thread \(have \d+ already; errno=11\)/, show(st));
	// the program sleeps an hour: kind panic (not timeout) says the limit, not the timeout, ended it
	await nextCallWorks(undefined, { prev: st });
});

test('unbounded allocation with --sandbox-memory 512m → kind killed (out of memory)', T, async () => {
	const s = await connect({ args: ['--sandbox-memory', '512m'] });
	const [res, st] = await run({
		code: snippet(
			'\tvar keep [][]byte\n\tfor {\n\t\tb := make([]byte, 16<<20)\n' +
			'\t\tfor i := range b {\n\t\t\tb[i] = 1\n\t\t}\n\t\tkeep = append(keep, b)\n\t}'),
		timeout_seconds: 60,
	}, s);
	assert.equal(res.isError, true, show(st));
	assert.equal(st.result.kind, 'killed', show(st));
	assert.equal(st.signal, 'SIGKILL', show(st));
	assert.match(st.result.message, /^the program ran out of memory: the sandbox allows 512 MiB \(builds included\)/, show(st));
	// kind killed with the out-of-memory message (not timeout) says the limit ended it
	assert.ok(st.timings.max_rss_kb < 600 * 1024, `max_rss_kb ${st.timings.max_rss_kb} stays near the 512 MiB limit`);
	await nextCallWorks(s, { prev: st });
});

/* four processes of 100 MiB each under a 256 MiB limit: the kernel OOM-kills one of them, whose
 * size alone is far from the limit, and the program exits 1 because its child died. The result
 * must still name the memory limit: the agent reads the kernel's OOM-kill count of the
 * sandbox's memory cgroup (memory.events, memory.oom_control on v1), not a guess from sizes. */
const SPREAD = `package main

import (
	"fmt"
	"os"
	"os/exec"
	"time"
)

func main() {
	if len(os.Args) > 1 {
		b := make([]byte, 100<<20)
		for i := range b {
			b[i] = 1
		}
		time.Sleep(time.Hour)
	}
	errs := make(chan error, 4)
	for i := 0; i < 4; i++ {
		go func() { errs <- exec.Command(os.Args[0], "child").Run() }()
	}
	fmt.Fprintln(os.Stderr, "child:", <-errs)
	os.Exit(1)
}
`;

test('memory spread over four processes, none near --sandbox-memory 256m alone → the OOM kill is still named', T, async (t) => {
	if (process.getuid() !== 0)
		return t.skip('needs a memory cgroup, which this host (cgroup v1) gives root only');
	const s = await connect({ args: ['--sandbox-memory', '256m'] });
	const [res, st] = await run({ code: SPREAD, timeout_seconds: 60 }, s);
	assert.equal(res.isError, true, show(st));
	assert.equal(st.result.kind, 'exit', show(st));
	assert.match(st.stderr, /child: signal: killed/, show(st));
	assert.ok(st.timings.max_rss_kb < 256 * 1024 * 0.7, `max_rss_kb ${st.timings.max_rss_kb}: no process came near the limit`);
	assert.match(st.result.message, /^the program ran out of memory: the sandbox allows 256 MiB \(builds included\)/, show(st));
	await nextCallWorks(s, { prev: st });
});

test('endless printing with timeout_seconds 5 → kind timeout, stdout truncated near 1 MiB', T, async () => {
	const [res, st] = await run({
		code: snippet('\tfor i := 0; ; i++ {\n\t\tfmt.Println("line", i, "of an endless stream of output")\n\t}', ['fmt']),
		timeout_seconds: 5,
	});
	assert.equal(res.isError, true, show(st));
	assert.equal(st.result.kind, 'timeout', show(st));
	assert.match(st.result.message, /5 s timeout/);
	assert.equal(st.stdout_truncated, true, show(st));
	const n = Buffer.byteLength(st.stdout);
	assert.ok(n > 900 * 1024 && n < 1100 * 1024, `stdout is ${n} bytes`);
	assert.ok(st.stdout.startsWith('line 0 of an endless stream of output\n'), show(st));
	assert.match(st.stdout, /bytes omitted/);
	await nextCallWorks(undefined, { prev: st });
});

test('sleeping past timeout_seconds 2 → kind timeout, and the message says so', T, async () => {
	const [res, st] = await run({
		code: snippet('\ttime.Sleep(time.Minute)\n\treturn "woke", nil', ['time']),
		timeout_seconds: 2,
	});
	assert.equal(res.isError, true, show(st));
	assert.equal(st.phase, 'run');
	assert.equal(st.result.kind, 'timeout', show(st));
	assert.match(st.result.message, /ran past its 2 s timeout/);
	// a lower bound only: kind timeout on a program that sleeps a minute already says the timeout
	// ended it, and an upper bound on the clock would fail on a loaded machine
	assert.ok(st.duration_ms >= 2000, `duration_ms ${st.duration_ms}`);
	await nextCallWorks(undefined, { prev: st });
});

/* EPERM_RE - how Go spells EPERM */
const EPERM = /^operation not permitted$/;

test('signalling the agent, pid 1 or every process (-1) → EPERM; the agent lives on', T, async () => {
	const value = await runOk({
		code: snippet(
			'\te := func(err error) string {\n\t\tif err == nil {\n\t\t\treturn "nil"\n\t\t}\n\t\treturn err.Error()\n\t}\n' +
			'\tpp := os.Getppid()\n' +
			'\tout := map[string]string{}\n' +
			'\tout["kill parent"] = e(syscall.Kill(pp, syscall.SIGKILL))\n' +
			'\tout["term parent"] = e(syscall.Kill(pp, syscall.SIGTERM))\n' +
			'\tout["kill parent group"] = e(syscall.Kill(-pp, syscall.SIGKILL))\n' +
			'\tout["kill 1"] = e(syscall.Kill(1, syscall.SIGKILL))\n' +
			'\tout["kill -1"] = e(syscall.Kill(-1, syscall.SIGKILL))\n' +
			'\tout["tgkill parent"] = e(syscall.Tgkill(pp, pp, syscall.SIGKILL))\n' +
			'\t_, _, en := syscall.RawSyscall(syscall.SYS_TKILL, uintptr(pp), uintptr(syscall.SIGKILL), 0)\n' +
			'\tout["tkill parent"] = e(en)\n' +
			'\t_, _, en = syscall.RawSyscall(434 /* pidfd_open */, uintptr(pp), 0, 0)\n' +
			'\tout["pidfd_open parent"] = e(en)\n' +
			'\ttime.Sleep(200 * time.Millisecond)\n' +
			'\treturn out, nil', ['os', 'syscall', 'time']),
	});
	for (const [k, v] of Object.entries(value))
		assert.match(v, EPERM, `${k}: ${v}`);
	await nextCallWorks();
});

test('rt_sigqueueinfo(SIGKILL) to the agent → EPERM; the agent lives on', T, async () => {
	const s = await connect();
	const before = await nextCallWorks(s);
	const [res, st] = await runRaw({
		code: snippet(
			'\tvar info [128]byte\n' +
			'\t*(*int32)(unsafe.Pointer(&info[0])) = int32(syscall.SIGKILL) // si_signo\n' +
			'\t*(*int32)(unsafe.Pointer(&info[8])) = -1                     // si_code SI_QUEUE\n' +
			'\tout := map[string]string{}\n' +
			'\t_, _, en := syscall.RawSyscall(syscall.SYS_RT_SIGQUEUEINFO, uintptr(os.Getppid()), uintptr(syscall.SIGKILL), uintptr(unsafe.Pointer(&info[0])))\n' +
			'\tout["rt_sigqueueinfo parent"] = en.Error()\n' +
			'\t_, _, en = syscall.RawSyscall6(297 /* rt_tgsigqueueinfo */, uintptr(os.Getppid()), uintptr(os.Getppid()), uintptr(syscall.SIGKILL), uintptr(unsafe.Pointer(&info[0])), 0, 0)\n' +
			'\tout["rt_tgsigqueueinfo parent"] = en.Error()\n' +
			'\ttime.Sleep(200 * time.Millisecond)\n\treturn out, nil', ['os', 'syscall', 'time', 'unsafe']),
	}, s);
	// whatever happened, the session goes on
	const next = await nextCallWorks(s, { sameSandbox: false });
	assert.ok(st, `the agent was killed, the call retried in a fresh sandbox and killed it again; ` +
		`the call returned only: ${JSON.stringify(res).slice(0, 600)}`);
	assert.equal(st.retried, false, `the agent died and the call ran again in a fresh sandbox: ${show(st)}`);
	assert.equal(st.result.kind, 'ok', show(st));
	assert.equal(res.isError, false);
	for (const [k, v] of Object.entries(st.result.value))
		assert.match(v, EPERM, `${k}: ${v}`);
	assert.equal(next.sandbox, before.sandbox, 'the agent survived: the same sandbox ran every call');
});

test('/proc/<agent>/mem is not writable from the user program; the agent lives on', T, async () => {
	const s = await connect();
	const before = await nextCallWorks(s);
	const [res, st] = await runRaw({
		code: snippet(
			'\tpp := os.Getppid()\n' +
			'\tmaps, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pp))\n' +
			'\tvar addr uint64\n' +
			'\tfor _, l := range strings.Split(string(maps), "\\n") {\n' +
			'\t\tif strings.Contains(l, "r-xp") {\n' +
			'\t\t\taddr, _ = strconv.ParseUint(strings.Split(l, "-")[0], 16, 64)\n\t\t\tbreak\n\t\t}\n\t}\n' +
			'\tout := map[string]string{"maps": fmt.Sprint(err)}\n' +
			'\tf, err := os.OpenFile(fmt.Sprintf("/proc/%d/mem", pp), os.O_RDWR, 0)\n' +
			'\tout["open"] = fmt.Sprint(err)\n' +
			'\tif err == nil && addr != 0 {\n' +
			'\t\tb := make([]byte, 16)\n\t\t_, rerr := f.ReadAt(b, int64(addr))\n\t\tout["read"] = fmt.Sprint(rerr)\n' +
			'\t\t_, werr := f.WriteAt(make([]byte, 1<<16), int64(addr))\n\t\tout["write"] = fmt.Sprint(werr)\n' +
			'\t\tf.Close()\n\t}\n' +
			'\ttime.Sleep(200 * time.Millisecond)\n\treturn out, nil', ['fmt', 'os', 'strconv', 'strings', 'time']),
	}, s);
	// whatever happened, the session goes on
	const next = await nextCallWorks(s, { sameSandbox: false });
	assert.ok(st, `the agent was killed, the call retried in a fresh sandbox and killed it again; ` +
		`the call returned only: ${JSON.stringify(res).slice(0, 600)}`);
	assert.equal(st.retried, false, `the agent died and the call ran again in a fresh sandbox: ${show(st)}`);
	assert.equal(st.result.kind, 'ok', show(st));
	assert.equal(res.isError, false);
	assert.match(st.result.value.open, /permission denied|operation not permitted/, show(st));
	assert.equal(next.sandbox, before.sandbox, 'the agent survived: the same sandbox ran every call');
});

test('ptrace, mount, unshare, setns, bpf, keyctl, namespaces through clone → EPERM', T, async () => {
	const value = await runOk({
		code: snippet(
			'\te := func(err error) string {\n\t\tif err == nil {\n\t\t\treturn "nil"\n\t\t}\n\t\treturn err.Error()\n\t}\n' +
			'\tout := map[string]string{}\n' +
			'\tout["ptrace attach parent"] = e(syscall.PtraceAttach(os.Getppid()))\n' +
			'\tout["ptrace attach 1"] = e(syscall.PtraceAttach(1))\n' +
			'\tout["mount tmpfs"] = e(syscall.Mount("tmpfs", "/tmp", "tmpfs", 0, ""))\n' +
			'\tout["mount bind"] = e(syscall.Mount("/app", "/usr", "", syscall.MS_BIND, ""))\n' +
			'\tout["umount /usr"] = e(syscall.Unmount("/usr", syscall.MNT_DETACH))\n' +
			'\tout["unshare user"] = e(syscall.Unshare(syscall.CLONE_NEWUSER))\n' +
			'\tout["unshare mount"] = e(syscall.Unshare(syscall.CLONE_NEWNS))\n' +
			'\tout["unshare net"] = e(syscall.Unshare(syscall.CLONE_NEWNET))\n' +
			'\tout["chroot"] = e(syscall.Chroot("/tmp"))\n' +
			'\t_, _, en := syscall.RawSyscall(308 /* setns */, 0, 0, 0)\n\tout["setns"] = e(en)\n' +
			'\t_, _, en = syscall.RawSyscall(321 /* bpf */, 0, 0, 0)\n\tout["bpf"] = e(en)\n' +
			'\t_, _, en = syscall.RawSyscall(298 /* perf_event_open */, 0, 0, 0)\n\tout["perf_event_open"] = e(en)\n' +
			'\t_, _, en = syscall.RawSyscall(250 /* keyctl */, 0, 0, 0)\n\tout["keyctl"] = e(en)\n' +
			'\t_, _, en = syscall.RawSyscall(246 /* kexec_load */, 0, 0, 0)\n\tout["kexec_load"] = e(en)\n' +
			'\t_, _, en = syscall.RawSyscall(313 /* finit_module */, 0, 0, 0)\n\tout["finit_module"] = e(en)\n' +
			'\tcmd := exec.Command("/bin/true")\n' +
			'\tcmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWUSER}\n' +
			'\tout["clone newuser"] = e(cmd.Run())\n' +
			'\tcmd = exec.Command("/bin/true")\n' +
			'\tcmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNS | syscall.CLONE_NEWPID}\n' +
			'\tout["clone newns"] = e(cmd.Run())\n' +
			'\treturn out, nil', ['os', 'os/exec', 'syscall']),
	});
	for (const [k, v] of Object.entries(value))
		assert.match(v, /operation not permitted/, `${k}: ${v}`);
	for (const k of ['ptrace attach parent', 'mount tmpfs', 'unshare user', 'setns', 'bpf', 'keyctl'])
		assert.match(value[k], EPERM, `${k}: ${value[k]}`);
	await nextCallWorks();
});

test('raw (AF_INET SOCK_RAW ICMP) and packet (AF_PACKET) sockets → EPERM', T, async () => {
	const value = await runOk({
		code: snippet(
			'\te := func(err error) string {\n\t\tif err == nil {\n\t\t\treturn "nil"\n\t\t}\n\t\treturn err.Error()\n\t}\n' +
			'\tout := map[string]string{}\n' +
			'\t_, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_RAW, syscall.IPPROTO_ICMP)\n\tout["inet raw icmp"] = e(err)\n' +
			'\t_, err = syscall.Socket(syscall.AF_INET6, syscall.SOCK_RAW, syscall.IPPROTO_ICMPV6)\n\tout["inet6 raw"] = e(err)\n' +
			'\t_, err = syscall.Socket(syscall.AF_INET, syscall.SOCK_RAW|syscall.SOCK_CLOEXEC, syscall.IPPROTO_RAW)\n\tout["inet raw cloexec"] = e(err)\n' +
			'\t_, err = syscall.Socket(syscall.AF_PACKET, syscall.SOCK_RAW, 0x0300)\n\tout["packet raw"] = e(err)\n' +
			'\t_, err = syscall.Socket(syscall.AF_PACKET, syscall.SOCK_DGRAM, 0x0300)\n\tout["packet dgram"] = e(err)\n' +
			'\t_, err = net.ListenPacket("ip4:icmp", "0.0.0.0")\n\tout["net ip4:icmp"] = e(err)\n' +
			'\treturn out, nil', ['net', 'syscall']),
	});
	for (const [k, v] of Object.entries(value))
		assert.match(v, /operation not permitted/, `${k}: ${v}`);
	await nextCallWorks();
});

test('the agent\'s socket is out of user code\'s reach: not in its view, by any path', T, async () => {
	const value = await runOk({
		code: snippet(
			'\tout := map[string]string{}\n' +
			'\tents, err := os.ReadDir("/kg/sock")\n' +
			'\tout["list /kg/sock"] = fmt.Sprint(len(ents), err)\n' +
			'\tfor _, p := range []string{"/kg/sock/agent.sock", "/proc/1/root/kg/sock/agent.sock", "/proc/self/root/kg/sock/agent.sock"} {\n' +
			'\t\tc, err := net.DialTimeout("unix", p, 2*time.Second)\n' +
			'\t\tif c != nil {\n\t\t\tc.Close()\n\t\t}\n' +
			'\t\tout["dial "+p] = fmt.Sprint(err)\n\t}\n' +
			'\tc, err := net.DialTimeout("unix", "@kode-gopher", 2*time.Second)\n' +
			'\tif c != nil {\n\t\tc.Close()\n\t}\n' +
			'\tout["dial abstract"] = fmt.Sprint(err)\n' +
			'\treturn out, nil', ['fmt', 'net', 'os', 'time']),
	});
	assert.equal(value['list /kg/sock'], '0 <nil>', JSON.stringify(value));
	for (const [k, v] of Object.entries(value))
		if (k.startsWith('dial'))
			assert.match(v, /no such file or directory|permission denied|connection refused/, `${k}: ${v}`);
	await nextCallWorks();
});

/* httpServer - a tiny HTTP server on the host's 127.0.0.1; resolves to {port, hits, close} */
async function httpServer() {
	const hits = [];
	const srv = http.createServer((req, res) => {
		hits.push(req.url);
		res.end('hello from the host');
	});
	await new Promise((resolve) => srv.listen(0, '127.0.0.1', resolve));
	return { port: srv.address().port, hits, close: () => new Promise((r) => srv.close(r)) };
}

/* GET - a snippet fetching a URL, returning the body or the error text */
const GET = (url) => snippet(
	'\tc := &http.Client{Timeout: 5 * time.Second}\n' +
	`\tresp, err := c.Get(${goStr(url)})\n` +
	'\tif err != nil {\n\t\treturn nil, err\n\t}\n\tdefer resp.Body.Close()\n' +
	'\tb, err := io.ReadAll(resp.Body)\n\treturn string(b), err', ['io', 'net/http', 'time']);

test('network: the default sandbox cannot reach the host\'s 127.0.0.1; --sandbox-network host can, none has nothing', T, async () => {
	const srv = await httpServer();
	try {
		const url = `http://127.0.0.1:${srv.port}/from-the-sandbox`;
		const [res0, st0] = await run({ code: GET(url) });
		assert.equal(res0.isError, true, show(st0));
		assert.match(st0.result.message, /connection refused/, show(st0));
		assert.deepEqual(srv.hits, [], 'no request arrived from a sandbox with a network of its own');

		const host = await connect({ args: ['--sandbox-network', 'host'] });
		const value = await runOk({ code: GET(url) }, host);
		assert.equal(value, 'hello from the host');
		assert.deepEqual(srv.hits, ['/from-the-sandbox']);

		const none = await connect({ args: ['--sandbox-network', 'none'] });
		const [res, st] = await run({ code: GET(url.replace('from-the-sandbox', 'no-network')) }, none);
		assert.equal(res.isError, true, show(st));
		assert.equal(st.result.kind, 'error', show(st));
		assert.match(st.result.message, /connection refused|network is unreachable|timeout|no route to host/i, show(st));
		assert.deepEqual(srv.hits, ['/from-the-sandbox'], 'no request arrived from the sandbox without network');
		// nor any host on the internet: DNS and a literal address both fail
		const [, st2] = await run({ code: GET('http://1.1.1.1/') }, none);
		assert.equal(st2.result.kind, 'error', show(st2));
		assert.match(st2.result.message, /network is unreachable|timeout|connection refused/i, show(st2));
		await nextCallWorks(none, { prev: st });
	} finally {
		await srv.close();
	}
});
