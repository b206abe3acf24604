/*
 * kept.test.mjs - a sandbox belongs to one session at a time (issue 13 item 4): a kept sandbox
 * in use is locked, so a second attach is refused with a sentence naming the holder and
 * `sandboxes rm` refuses it without --force; `serve --http` refuses --claim and --persistent; a
 * session killed before it could release leaves a sandbox that the next start removes, while
 * kept sandboxes stay.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import test from 'node:test';

import { BIN, callTool, connect, isAlive, descendants, sc, snippet, waitFor } from '../e2e/lib.mjs';

const T = { timeout: 240_000 };
const QUICK = snippet('\treturn 7, nil');

/* kg - run a kode-gopher command on root; {status, stdout, stderr} */
function kg(root, args, input) {
	const r = spawnSync(BIN, args, {
		encoding: 'utf8', input, timeout: 180_000,
		env: { ...process.env, KODE_GOPHER_SANDBOX_ROOT: root },
	});
	return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

/* keptSandbox - a fresh root with one sandbox kept by exec --keep: [root, name] */
function keptSandbox() {
	const root = fs.mkdtempSync(path.join(os.tmpdir(), 'kg-kept-'));
	fs.chmodSync(root, 0o711);
	const file = path.join(root, 'snippet.go');
	fs.writeFileSync(file, QUICK);
	const r = kg(root, ['exec', '--keep', '--credentials', 'none', file]);
	assert.equal(r.status, 0, r.stderr);
	fs.rmSync(file);
	const names = fs.readdirSync(root).filter((n) => n.startsWith('kg-'));
	assert.equal(names.length, 1, `one kept sandbox: ${names}`);
	return [root, names[0]];
}

test('a kept sandbox in use is locked: a second attach is refused naming the holder, rm refuses without --force', T, async () => {
	const [root, name] = keptSandbox();
	try {
		const s = await connect({ args: ['--claim', name, '--persistent'], env: { KODE_GOPHER_SANDBOX_ROOT: root } });
		try {
			const res = await callTool(s.client, 'execute_go_code', { code: QUICK });
			assert.equal(sc(res).result.value, 7);
			assert.equal(sc(res).sandbox, name);
			assert.match(kg(root, ['sandboxes', 'list']).stdout, new RegExp(`^${name}\\t\\S+\\tin-use\\t`, 'm'));
			// a second session on the same sandbox
			const file = path.join(os.tmpdir(), `kg-kept-${process.pid}.go`);
			fs.writeFileSync(file, QUICK);
			const second = kg(root, ['exec', '--claim', name, '--credentials', 'none', file]);
			fs.rmSync(file);
			assert.notEqual(second.status, 0);
			assert.match(second.stderr, new RegExp(`sandbox ${name} is in use by another session \\(kode-gopher pid ${s.pid}\\)`), second.stderr);
			// removal while in use
			const rm = kg(root, ['sandboxes', 'rm', name]);
			assert.equal(rm.status, 1);
			assert.match(rm.stderr, /is in use by a session .*--force/, rm.stderr);
			assert.ok(fs.existsSync(path.join(root, name)));
			// the first session is unharmed
			const again = await callTool(s.client, 'execute_go_code', { code: QUICK });
			assert.equal(sc(again).result.value, 7);
		} finally {
			await s.close();
		}
		// kept, and free again
		assert.match(kg(root, ['sandboxes', 'list']).stdout, new RegExp(`^${name}\\t\\S+\\tidle\\t`, 'm'));
		const rm = kg(root, ['sandboxes', 'rm', name]);
		assert.equal(rm.status, 0, rm.stderr);
		assert.equal(fs.existsSync(path.join(root, name)), false);
	} finally {
		fs.rmSync(root, { recursive: true, force: true });
	}
});

test('serve --http refuses --claim and --persistent (they would share one sandbox between sessions)', T, async () => {
	for (const args of [['--claim', 'kg-anything'], ['--persistent']]) {
		const r = spawnSync(BIN, ['serve', '--http', '127.0.0.1:0', ...args], { encoding: 'utf8', timeout: 30_000 });
		assert.equal(r.status, 2, r.stderr);
		assert.match(r.stderr, /every client's session gets a sandbox of its own/, r.stderr);
	}
});

test('a stdio session killed with SIGKILL leaves its sandbox; the next start removes it and keeps the kept ones', T, async () => {
	const [root, kept] = keptSandbox();
	try {
		const s = await connect({ env: { KODE_GOPHER_SANDBOX_ROOT: root } });
		const res = await callTool(s.client, 'execute_go_code', { code: QUICK });
		const name = sc(res).sandbox;
		assert.ok(fs.existsSync(path.join(root, name)));
		const procs = [s.pid, ...descendants(s.pid)];
		for (const p of procs)
			try { process.kill(p, 'SIGKILL'); } catch { /* gone */ }
		await waitFor(() => procs.every((p) => !isAlive(p)), { timeout: 10_000, what: 'the session to die' });
		assert.ok(fs.existsSync(path.join(root, name)), 'SIGKILL left the sandbox behind');
		// any command on that root sweeps it
		const list = kg(root, ['sandboxes', 'list']);
		assert.equal(list.status, 0, list.stderr);
		assert.match(list.stderr, new RegExp(`removed sandbox ${name}`), list.stderr);
		assert.equal(fs.existsSync(path.join(root, name)), false);
		assert.ok(fs.existsSync(path.join(root, kept)), 'the kept sandbox stays');
		assert.match(list.stdout, new RegExp(`^${kept}\\t`, 'm'));
		await s.close();
	} finally {
		fs.rmSync(root, { recursive: true, force: true });
	}
});
