/*
 * disk.test.mjs - a sandbox's disk limit (issue 13 item 2): /app, /app/persist and the session's
 * cache layers are on a file system of the sandbox's own, --sandbox-disk large, so a program
 * that writes without end (one big file, or many small ones for the inodes) stops at the limit
 * with a result that names it, the next call in the session works, another session and the
 * host's disk are untouched, and df inside shows the sandbox's own limit.
 *
 * The limit needs root (a loop-mounted image per sandbox); run as a normal user (nobody, from
 * root), serve must say at start-up that the limit is not in force, and why. New images are
 * copies of one template per sandbox root (issue 17): only a template that root alone can have
 * written is ever mounted, never a planted one.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import test from 'node:test';

import { BIN, callTool, connect, sc, snippet } from '../e2e/lib.mjs';

const T = { timeout: 300_000 };
const ROOT = process.getuid() === 0;
const LIMIT_MIB = 64;

/* df - the sandbox's own view of /app's file system: total and free bytes, total and free inodes */
const DF = snippet(`	var s syscall.Statfs_t
	if err := syscall.Statfs("/app", &s); err != nil {
		return nil, err
	}
	var p syscall.Statfs_t
	if err := syscall.Statfs("/app/persist", &p); err != nil {
		return nil, err
	}
	return map[string]uint64{"size": s.Blocks * uint64(s.Bsize), "free": s.Bavail * uint64(s.Bsize),
		"files": s.Files, "ffree": s.Ffree, "persist_size": p.Blocks * uint64(p.Bsize)}, nil`, ['syscall']);

/* fill - write into dir until the disk refuses: one big file, or many empty ones */
const fill = (dir, many) => snippet(`	if err := os.MkdirAll(${JSON.stringify(dir)}, 0o755); err != nil {
		return nil, err
	}
	if ${many} {
		for i := 0; ; i++ {
			f, err := os.Create(fmt.Sprintf("${dir}/f%d", i))
			if err != nil {
				return nil, fmt.Errorf("after %d files: %w", i, err)
			}
			f.Close()
		}
	}
	f, err := os.Create("${dir}/big")
	if err != nil {
		return nil, err
	}
	buf := make([]byte, 1<<20)
	for i := 0; ; i++ {
		if _, err := f.Write(buf); err != nil {
			return nil, fmt.Errorf("after %d MiB: %w", i, err)
		}
	}`, ['fmt', 'os']);

const WRITE_SOME = snippet(`	if err := os.WriteFile("/app/some", make([]byte, 8<<20), 0o644); err != nil {
		return nil, err
	}
	return "wrote 8 MiB", nil`, ['os']);

/* imageBytes - what the sandbox's image takes on the host's disk */
function imageBytes(s, name) {
	return fs.statSync(path.join(s.sandboxRoot, name, 'disk.img')).blocks * 512;
}

test('a program that fills the sandbox disk stops at --sandbox-disk, the next call works, others untouched', { ...T, skip: !ROOT && 'as root only' }, async () => {
	const a = await connect({ args: ['--sandbox-disk', `${LIMIT_MIB}m`, '--credentials', 'none'] });
	const b = await connect({ args: ['--sandbox-disk', `${LIMIT_MIB}m`, '--credentials', 'none'] });
	try {
		const df = sc(await callTool(a.client, 'execute_go_code', { code: DF }));
		assert.equal(df.result.kind, 'ok', JSON.stringify(df.result));
		const v = df.result.value;
		assert.ok(v.size <= LIMIT_MIB << 20 && v.size > (LIMIT_MIB / 2) << 20, `df inside shows the sandbox's own disk: ${JSON.stringify(v)}`);
		assert.equal(v.persist_size, v.size, '/app/persist is on the same limited disk');
		const other = sc(await callTool(b.client, 'execute_go_code', { code: WRITE_SOME }));
		assert.equal(other.result.kind, 'ok', JSON.stringify(other.result));

		for (const [where, many] of [['/app/junk', false], ['/app/many', true]]) {
			const full = sc(await callTool(a.client, 'execute_go_code', { code: fill(where, many), timeout_seconds: 120 }));
			assert.equal(full.result.kind, 'error', JSON.stringify(full.result));
			assert.match(full.result.message, new RegExp(`^the sandbox's disk is full( \\(no more files: all its inodes are used\\))?: it allows ${LIMIT_MIB} MiB`), full.result.message);
			assert.match(full.result.message, /no space left on device/);
			if (many)
				assert.match(full.result.message, /after \d+ files/);
			// the host's disk holds no more than the limit for it
			assert.ok(imageBytes(a, full.sandbox) <= (LIMIT_MIB + 1) << 20, `image ${imageBytes(a, full.sandbox)} bytes`);
			// the other session is untouched, and so is this one's next call (the wipe frees /app)
			const again = sc(await callTool(b.client, 'execute_go_code', { code: WRITE_SOME }));
			assert.equal(again.result.kind, 'ok', JSON.stringify(again.result));
			const next = sc(await callTool(a.client, 'execute_go_code', { code: WRITE_SOME }));
			assert.equal(next.result.kind, 'ok', JSON.stringify(next.result));
		}
	} finally {
		await a.close();
		await b.close();
	}
});

test('a full /app/persist: the next call still builds, so the program that cleans up can run', { ...T, skip: !ROOT && 'as root only' }, async () => {
	const s = await connect({ args: ['--sandbox-disk', `${LIMIT_MIB}m`, '--credentials', 'none'] });
	try {
		const full = sc(await callTool(s.client, 'execute_go_code', { code: fill('/app/persist/junk', false), timeout_seconds: 120 }));
		assert.equal(full.result.kind, 'error', JSON.stringify(full.result));
		assert.match(full.result.message, new RegExp(`the sandbox's disk is full.*: it allows ${LIMIT_MIB} MiB`));
		// /app/persist survives the wipe; the agent's reserve lets this call build all the same
		const clean = sc(await callTool(s.client, 'execute_go_code', {
			code: snippet('\treturn nil, os.RemoveAll("/app/persist/junk")', ['os']),
		}));
		assert.equal(clean.phase, 'run', JSON.stringify(clean));
		assert.equal(clean.result.kind, 'ok', JSON.stringify(clean.result));
		const next = sc(await callTool(s.client, 'execute_go_code', { code: WRITE_SOME }));
		assert.equal(next.result.kind, 'ok', JSON.stringify(next.result));
	} finally {
		await s.close();
	}
});

/* LS_PERSIST - what /app/persist holds, as the sandbox sees it */
const LS_PERSIST = snippet(`	es, err := os.ReadDir("/app/persist")
	if err != nil {
		return nil, err
	}
	names := []string{}
	for _, e := range es {
		names = append(names, e.Name())
	}
	return names, nil`, ['os']);

/* plantedImage - an ext4 image of the limit's size holding app/persist/PLANTED: what an attacker
 * would have the jail mount (as root) in place of the template */
function plantedImage(dir) {
	const tree = path.join(dir, 'tree');
	fs.mkdirSync(path.join(tree, 'app', 'persist'), { recursive: true });
	fs.writeFileSync(path.join(tree, 'app', 'persist', 'PLANTED'), 'not yours');
	const img = path.join(dir, 'planted.img');
	fs.writeFileSync(img, '');
	fs.truncateSync(img, LIMIT_MIB << 20);
	const r = spawnSync('mke2fs', ['-q', '-F', '-t', 'ext4', '-d', tree, img], { encoding: 'utf8' });
	assert.equal(r.status, 0, r.stderr);
	return img;
}

test('new sandboxes copy one template image per sandbox root; a template that is not root\'s own alone is never mounted', { ...T, skip: !ROOT && 'as root only' }, async () => {
	const scratch = fs.mkdtempSync(path.join(os.tmpdir(), 'kg-disk-tpl-'));
	fs.chmodSync(scratch, 0o711); // sandboxes run as users of their own and must reach their directories
	const tplName = `.disk-v1-${LIMIT_MIB << 20}.img`;
	/* one session in root; the names in its /app/persist and its df */
	const session = async (root) => {
		const s = await connect({ args: ['--sandbox-disk', `${LIMIT_MIB}m`, '--credentials', 'none'],
			env: { KODE_GOPHER_SANDBOX_ROOT: root } });
		try {
			const ls = sc(await callTool(s.client, 'execute_go_code', { code: LS_PERSIST }));
			assert.equal(ls.result.kind, 'ok', JSON.stringify(ls));
			const df = sc(await callTool(s.client, 'execute_go_code', { code: DF }));
			assert.equal(df.result.kind, 'ok', JSON.stringify(df));
			return { names: ls.result.value, df: df.result.value };
		} finally {
			await s.close();
		}
	};
	try {
		// the first sandbox of a root makes the template, root's alone; the next one copies it
		const own = path.join(scratch, 'own');
		fs.mkdirSync(own, { mode: 0o711 });
		const first = await session(own);
		const st = fs.lstatSync(path.join(own, tplName));
		assert.ok(st.isFile() && st.uid === 0 && (st.mode & 0o777) === 0o600 && st.size === LIMIT_MIB << 20,
			`template ${JSON.stringify({ uid: st.uid, mode: (st.mode & 0o777).toString(8), size: st.size })}`);
		const second = await session(own);
		assert.deepEqual(first.names, []);
		assert.deepEqual(second.names, []);
		assert.ok(second.df.size <= LIMIT_MIB << 20 && second.df.size > (LIMIT_MIB / 2) << 20, JSON.stringify(second.df));
		assert.equal(second.df.files, first.df.files, 'the copy is the same file system as one made by mke2fs');

		// the attack: a file system image of someone else's where the template would be
		const img = plantedImage(scratch);
		const variants = {
			'a symlink to it': (t) => fs.symlinkSync(img, t),
			'owned by another user': (t) => { fs.copyFileSync(img, t); fs.chmodSync(t, 0o600); fs.chownSync(t, 65534, 65534); },
			'root\'s, but others may read or write it': (t) => { fs.copyFileSync(img, t); fs.chmodSync(t, 0o666); },
			'root\'s, but with a second link': (t) => { fs.copyFileSync(img, t); fs.chmodSync(t, 0o600); fs.linkSync(t, `${t}.other`); },
			'of another size': (t) => { fs.copyFileSync(img, t); fs.chmodSync(t, 0o600); fs.truncateSync(t, (LIMIT_MIB << 20) * 2); },
		};
		for (const [how, plant] of Object.entries(variants)) {
			const root = path.join(scratch, `r${Object.keys(variants).indexOf(how)}`);
			fs.mkdirSync(root, { mode: 0o711 });
			const t = path.join(root, tplName);
			plant(t);
			const before = fs.lstatSync(t);
			const r = await session(root);
			assert.deepEqual(r.names, [], `${how}: the sandbox saw the planted image's files`);
			assert.ok(r.df.size <= LIMIT_MIB << 20, `${how}: ${JSON.stringify(r.df)}`);
			const after = fs.lstatSync(t);
			assert.equal(after.ino, before.ino, `${how}: the planted file was replaced`);
		}
	} finally {
		fs.rmSync(scratch, { recursive: true, force: true });
	}
});

/* APP_MOUNT - the mount options of /app as the sandbox's program sees them (/proc/self/mountinfo:
 * the mount's own options, " - ", the file system type, the source, the super block's options) */
const APP_MOUNT = snippet(`	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	for _, l := range strings.Split(string(b), "\\n") {
		f := strings.Fields(l)
		if len(f) > 4 && f[4] == "/app" {
			return l, nil
		}
	}
	return nil, fmt.Errorf("no /app mount in %s", b)`, ['fmt', 'os', 'strings']);

test('a sandbox that is not kept has a disk without cache flushes; a kept one keeps them', { ...T, skip: !ROOT && 'as root only' }, async () => {
	// a thrown-away sandbox's file system need not survive a crash of the host, and the flushes
	// cost its release an fsync of the whole image (issue 17); a kept sandbox's must survive
	for (const [persistent, want] of [[false, true], [true, false]]) {
		const s = await connect({ args: ['--sandbox-disk', `${LIMIT_MIB}m`, '--credentials', 'none',
			...(persistent ? ['--persistent'] : [])] });
		try {
			const r = sc(await callTool(s.client, 'execute_go_code', { code: APP_MOUNT }));
			assert.equal(r.result.kind, 'ok', JSON.stringify(r));
			const line = r.result.value;
			assert.match(line, / - ext4 /, line);
			assert.equal(/[ ,]nobarrier(,|$)/.test(line.split(' - ')[1]), want,
				`${persistent ? 'kept' : 'not kept'}: ${line}`);
		} finally {
			await s.close();
		}
	}
});

test('as a normal user, serve says at start-up that the disk limit is not in force, and why', T, () => {
	// as root: serve run as nobody (setpriv), with a home and a runtime directory of its own;
	// stdin closed, so serve ends by itself once started
	const home = fs.mkdtempSync(path.join(os.tmpdir(), 'kg-disk-user-'));
	fs.chmodSync(home, 0o777);
	try {
		const env = { PATH: process.env.PATH, HOME: home, XDG_RUNTIME_DIR: home };
		// a copy nobody can run, wherever the build is (a home may be 0700)
		const bin = path.join(home, 'kode-gopher');
		fs.copyFileSync(BIN, bin);
		fs.chmodSync(bin, 0o755);
		const serve = [bin, 'serve', '--sandbox-root', path.join(home, 'sb')];
		const r = ROOT
			? spawnSync('setpriv', ['--reuid=65534', '--regid=65534', '--clear-groups', ...serve], { env, input: '', encoding: 'utf8', timeout: 60_000 })
			: spawnSync(serve[0], serve.slice(1), { env, input: '', encoding: 'utf8', timeout: 60_000 });
		assert.equal(r.error, undefined, String(r.error));
		assert.match(r.stderr, /the sandbox disk limit \(--sandbox-disk 10240 MiB\) is not in force: it needs root \(a file system image loop-mounted per sandbox\), and kode-gopher runs as a normal user; sandboxes write to the host's disk under \S+ without a limit/, r.stderr);
	} finally {
		fs.rmSync(home, { recursive: true, force: true });
	}
});
