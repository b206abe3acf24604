/*
 * churn.test.mjs - session birth and death stay off the other sessions' path (issue 19): the
 * shared server answers a session's requests while another session's sandbox is still being
 * removed, and workers started ahead of need yield the CPU until a session takes them.
 * Run by tests/run.sh (node --test); each test() is one counted result.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import test from 'node:test';

import { callTool, children, cmdline, httpServe, sc, sessionWorker, waitFor } from './lib.mjs';

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

test('http: workers started ahead of need run at a lower priority until a session takes one', { ...T, skip: os.userInfo().uid !== 0 && 'as root only (a normal user cannot give the priority back)' }, async () => {
	const srv = await httpServe(['--workers-min-idle', '2']);
	try {
		const idle = () => children(srv.pid).filter((p) => /^kode-gopher: worker s=- /.test(cmdline(p) || ''));
		await waitFor(() => idle().length === 2, { timeout: 30_000, what: 'two idle workers' });
		for (const p of idle())
			assert.ok(nices(p).every((n) => n === 10), `idle worker ${p}: nice ${nices(p)}`);
		const s = await srv.connect();
		assert.deepEqual(await s.client.ping(), {});
		const w = sessionWorker(srv.pid, s.sessionId);
		assert.ok(w, 'the session\'s worker');
		assert.deepEqual([...new Set(nices(w))], [0], `session worker ${w}`);
	} finally {
		await srv.close();
	}
});
