/*
 * aged-cache.test.mjs - the base build cache stays warm however old it is (issue 13 item 5).
 *
 * A week after `make runtime` every base entry is past the go command's trim limit (five days
 * unused, judged by mtime) and trim.txt is past its one-day interval: a go command in a sandbox
 * would then trim the session's overlay of the base, leaving a whiteout for every base entry,
 * and the next build would start from nothing. This test runs against a runtime copy whose
 * cache entries and trim.txt are aged eight days, and checks that no base entry disappears
 * from a sandbox's view and that later builds use the base, also when the session's own
 * trim.txt is older than a day (a session that has lived that long).
 *
 * The copy: the build cache's action entries (-a, which decide hits), trim.txt and the small
 * files are copied and aged; output files (-d) are hard links to the shared runtime's (the same
 * inodes, never written: an overlay never writes its lower layer), or copies on another file
 * system. No lockfile and an empty module cache: the programs use the standard library only.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import test from 'node:test';

import { BIN } from '../e2e/lib.mjs';

const RUNTIME = process.env.KODE_GOPHER_RUNTIME_DIR || process.env.RUNTIME_DIR || '/var/cache/kode-gopher/runtime';
const T = { timeout: 600_000 };
const AGE_S = 8 * 86400;

/* linkOrCopy - a hard link of src at dst, or a copy where links cannot go (another fs) */
function linkOrCopy(src, dst) {
	try {
		fs.linkSync(src, dst);
	} catch (e) {
		if (e.code !== 'EXDEV' && e.code !== 'EPERM')
			throw e;
		fs.copyFileSync(src, dst);
	}
}

/* agedRuntime - a copy of the runtime in dir whose build cache is eight days old */
function agedRuntime(dir) {
	const old = new Date(Date.now() - AGE_S * 1000);
	// no lockfile: programs of the standard library alone, whose cache entries do not depend on
	// the module graph, so the module cache can stay empty (31 000 files less to copy)
	fs.mkdirSync(path.join(dir, 'gomodcache'), { mode: 0o755 });
	const src = path.join(RUNTIME, 'gocache'), dst = path.join(dir, 'gocache');
	fs.mkdirSync(dst, { mode: 0o755 });
	let entries = 0;
	for (const top of fs.readdirSync(src, { withFileTypes: true })) {
		const s = path.join(src, top.name), d = path.join(dst, top.name);
		if (!top.isDirectory()) {
			fs.copyFileSync(s, d);
			fs.utimesSync(d, old, old);
			continue;
		}
		fs.mkdirSync(d, { mode: 0o755 });
		for (const e of fs.readdirSync(s)) {
			if (e.endsWith('-d') && fs.lstatSync(path.join(s, e)).isFile()) {
				linkOrCopy(path.join(s, e), path.join(d, e));
				continue;
			}
			fs.cpSync(path.join(s, e), path.join(d, e), { recursive: true });
			fs.utimesSync(path.join(d, e), old, old);
			if (e.endsWith('-a'))
				entries++;
		}
		fs.utimesSync(d, old, old);
	}
	fs.writeFileSync(path.join(dst, 'trim.txt'), `${Math.floor(Date.now() / 1000) - AGE_S}`);
	fs.utimesSync(path.join(dst, 'trim.txt'), old, old);
	return entries;
}

/* walk - counts of what a cache layer holds: whiteouts (0/0 character devices) and entries */
function walk(dir) {
	const n = { whiteouts: 0, outputs: 0, actions: 0 };
	for (const e of fs.readdirSync(dir, { withFileTypes: true, recursive: true })) {
		if (e.isCharacterDevice())
			n.whiteouts++;
		else if (e.isFile() && e.name.endsWith('-d'))
			n.outputs++;
		else if (e.isFile() && e.name.endsWith('-a'))
			n.actions++;
	}
	return n;
}

/* exec - one `kode-gopher exec` of src against the aged runtime; the parsed result */
function exec(root, runtime, src, extra) {
	const file = path.join(root, 'main.go');
	fs.writeFileSync(file, src);
	// --sandbox-disk off: the cache layers then sit in the sandbox directory, where the test can
	// count them (with the limit they are inside the sandbox's disk image; the agent's hold on
	// trimming is the same either way)
	const r = spawnSync(BIN, ['exec', '--json', '--credentials', 'none', '--runtime-dir', runtime,
		'--sandbox-root', root, '--sandbox-disk', 'off', ...extra, file], { encoding: 'utf8', timeout: 300_000 });
	fs.rmSync(file);
	assert.equal(r.status, 0, r.stderr);
	return JSON.parse(r.stdout);
}

/* program - a program of the standard library's usual packages, different for each n */
const program = (n) => `package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
)

func main() {
	b, _ := json.Marshal(map[string]int{"n": ${n}})
	fmt.Println(strings.ToUpper(string(b)), http.StatusText(http.StatusTeapot))
}
`;

test('a base cache aged eight days stays visible and warm in every sandbox, however long the session', T, () => {
	const work = fs.mkdtempSync(path.join(path.dirname(RUNTIME), 'kg-aged-test-'));
	fs.chmodSync(work, 0o755);
	const runtime = path.join(work, 'runtime'), root = path.join(work, 'sandboxes');
	fs.mkdirSync(runtime, { mode: 0o755 });
	fs.mkdirSync(root, { mode: 0o711 });
	try {
		const base = agedRuntime(runtime);
		assert.ok(base > 100, `the runtime's build cache holds entries (${base})`);
		const baseTrim = fs.readFileSync(path.join(runtime, 'gocache', 'trim.txt'), 'utf8');

		const first = exec(root, runtime, program(1), ['--keep']);
		assert.equal(first.result.kind, 'ok', JSON.stringify(first));
		const name = first.sandbox;
		const upper = path.join(root, name, 'cache', 'gocache', 'upper');
		let n = walk(upper);
		assert.equal(n.whiteouts, 0, `no base entry removed from the sandbox's view (${JSON.stringify(n)})`);

		// a session older than a day: its own trim.txt is that old too
		fs.writeFileSync(path.join(upper, 'trim.txt'), `${Math.floor(Date.now() / 1000) - AGE_S}`);
		const second = exec(root, runtime, program(2), ['--claim', name, '--keep']);
		assert.equal(second.result.kind, 'ok', JSON.stringify(second));
		assert.equal(second.cached_build, false);
		n = walk(upper);
		assert.equal(n.whiteouts, 0, `no base entry removed from the sandbox's view (${JSON.stringify(n)})`);
		// built from the base: only the main package's own actions are new, not the library's
		assert.ok(n.outputs < 40, `the second build used the base cache, not a rebuild (${JSON.stringify(n)})`);

		// a new sandbox on the same base
		const rm = spawnSync(BIN, ['sandboxes', 'rm', '--sandbox-root', root, name], { encoding: 'utf8' });
		assert.equal(rm.status, 0, rm.stderr);
		const third = exec(root, runtime, program(3), ['--keep']);
		assert.equal(third.result.kind, 'ok', JSON.stringify(third));
		n = walk(path.join(root, third.sandbox, 'cache', 'gocache', 'upper'));
		assert.equal(n.whiteouts, 0, JSON.stringify(n));
		assert.ok(n.outputs < 40, `a new sandbox builds from the base (${JSON.stringify(n)})`);
		// the base itself is untouched
		assert.equal(fs.readFileSync(path.join(runtime, 'gocache', 'trim.txt'), 'utf8'), baseTrim);
		assert.equal(walk(path.join(runtime, 'gocache')).actions, base);
	} finally {
		spawnSync(BIN, ['sandboxes', 'rm', '--force', '--sandbox-root', root, ...fs.readdirSync(root).filter((e) => e.startsWith('kg-'))]);
		fs.rmSync(work, { recursive: true, force: true });
	}
});
