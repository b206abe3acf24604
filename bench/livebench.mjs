#!/usr/bin/env node
/*
 * livebench.mjs - what watching and stopping a call costs (issue 15), over stdio against one
 * real `kode-gopher serve` session, as one markdown table:
 *   - cancel -> next result: from notifications/cancelled for a running program (it printed
 *     "started", then sleeps 60 s) to the result of the next call, a stdlib snippet, cached
 *     (the same snippet again) and fresh (a new constant: a real build); beside it the same next
 *     call without a cancel before it, interleaved, as the reference (aim <= 300 ms);
 *   - live logs on an output flood (a program printing 200,000 lines): the call with
 *     logging/setLevel info (lines streamed, capped) against logging/setLevel error (nothing
 *     streamed, the capped result alone), interleaved (aim <= 10 % more).
 *
 * Called by bench/run.sh --only live, or by hand: node bench/livebench.mjs [--quick]
 * [--rounds N] [--bin PATH]. Progress on stderr, the table on stdout. Every process started
 * here is stopped here; the exit status is non-zero only when a figure could not be measured.
 */
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { performance } from 'node:perf_hooks';

import {
	base_options, bench_name, fmt, machine_line, median, p90, parse_options, progress, run_main, table,
	version_of, work_dir,
} from './lib.mjs';

bench_name('livebench');
const USAGE = 'usage: node bench/livebench.mjs [--quick] [--rounds N] [--bin PATH] [--runtime-dir DIR]\n';
const o = { ...base_options(), rounds: 0 };
parse_options(process.argv.slice(2), USAGE, o, (a, val) => {
	if (a === '--rounds') o.rounds = Number(val());
	else return false;
	return true;
});
const ROUNDS = o.rounds || (o.quick ? 3 : 9);

const snip = (body, imports = []) => `package snippet\n\nimport (\n${['context', ...imports].map((i) => `\t"${i}"`).join('\n')}\n)\n\n` +
	`func run(ctx context.Context) (any, error) {\n${body}\n}\n`;
const SLEEPER = (i) => snip(`\tfmt.Println("started ${i}")\n\ttime.Sleep(60 * time.Second)\n\treturn nil, nil`, ['fmt', 'time']);
const CACHED = snip('\treturn strings.ToUpper("hello, gopher"), nil', ['strings']);
const FRESH = (i) => snip(`\treturn strings.Repeat("x", ${i + 1}), nil`, ['strings']);
const FLOOD = snip('\tfor i := 0; i < 200000; i++ {\n\t\tfmt.Println("line", i)\n\t}\n\treturn 0, nil', ['fmt']);

/* Session - one stdio serve, raw JSON-RPC lines */
class Session {
	constructor(bin, root) {
		this.child = spawn(bin, ['serve', '--log-level', 'warn'], {
			stdio: ['pipe', 'pipe', 'pipe'],
			env: { ...process.env, KODE_GOPHER_SANDBOX_ROOT: root, KODE_GOPHER_RUNTIME_DIR: o.runtime },
		});
		this.next = 1;
		this.waiters = [];
		this.stderr = '';
		let buf = '';
		this.child.stderr.on('data', (d) => { this.stderr = (this.stderr + d).slice(-20000); });
		this.child.stdout.on('data', (d) => {
			buf += d;
			let nl;
			while ((nl = buf.indexOf('\n')) >= 0) {
				const m = JSON.parse(buf.slice(0, nl));
				buf = buf.slice(nl + 1);
				this.waiters = this.waiters.filter((w) => !w(m));
			}
		});
	}
	send(m) {
		this.child.stdin.write(JSON.stringify(m) + '\n');
	}
	wait(pred, ms = 300_000) {
		return new Promise((resolve, reject) => {
			const t = setTimeout(() => reject(new Error(`no answer within ${ms} ms\n${this.stderr}`)), ms);
			this.waiters.push((m) => {
				if (!pred(m))
					return false;
				clearTimeout(t);
				resolve(m);
				return true;
			});
		});
	}
	request(method, params) {
		const id = this.next++;
		const p = this.wait((m) => m.id === id);
		this.send({ jsonrpc: '2.0', id, method, params });
		return p;
	}
	call(code) {
		return this.request('tools/call', { name: 'execute_go_code', arguments: { code } });
	}
	async close() {
		this.child.stdin.end();
		await new Promise((r) => this.child.on('exit', r));
	}
}

async function main() {
	const load0 = os.loadavg()[0];
	const { tmp, run_bin } = work_dir('kg-livebench-', o.bin);
	const root = path.join(tmp, 'sandboxes');
	fs.mkdirSync(root);
	fs.chmodSync(root, 0o711);
	const s = new Session(run_bin, root);
	try {
		await s.request('initialize', { protocolVersion: '2025-11-25', capabilities: {}, clientInfo: { name: 'livebench', version: '1' } });
		s.send({ jsonrpc: '2.0', method: 'notifications/initialized' });
		await s.request('logging/setLevel', { level: 'info' });
		progress('warming up');
		await s.call(CACHED);
		await s.call(SLEEPER(-1).replace('time.Sleep(60', 'time.Sleep(0'));
		const cancelCached = [], cancelFresh = [], refCached = [], refFresh = [], logsOn = [], logsOff = [];
		let k = 0;
		/* cancelNext - cancel a running sleeper, time until the next call's result */
		const cancelNext = async (code) => {
			const i = k++;
			const id = s.next++;
			const started = s.wait((m) => m.method === 'notifications/message' && m.params?.data?.text === `started ${i}`);
			const dropped = s.wait((m) => m.id === id, 600_000).then(() => { throw new Error('the cancelled call was answered'); });
			dropped.catch(() => {});
			s.send({ jsonrpc: '2.0', id, method: 'tools/call', params: { name: 'execute_go_code', arguments: { code: SLEEPER(i) } } });
			await started;
			const t0 = performance.now();
			s.send({ jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: id } });
			const r = await s.call(code);
			const ms = performance.now() - t0;
			if (r.result?.structuredContent?.result?.kind !== 'ok')
				throw new Error(`the next call failed: ${JSON.stringify(r).slice(0, 500)}`);
			return ms;
		};
		const timed = async (code) => {
			const t0 = performance.now();
			const r = await s.call(code);
			if (r.result?.structuredContent?.phase !== 'run')
				throw new Error(`the call failed: ${JSON.stringify(r).slice(0, 500)}`);
			return performance.now() - t0;
		};
		for (let round = 0; round < ROUNDS; round++) {
			progress(`round ${round + 1} of ${ROUNDS}`);
			cancelCached.push(await cancelNext(CACHED));
			refCached.push(await timed(CACHED));
			cancelFresh.push(await cancelNext(FRESH(2 * round)));
			refFresh.push(await timed(FRESH(2 * round + 1)));
			await s.request('logging/setLevel', { level: 'info' });
			logsOn.push(await timed(FLOOD));
			await s.request('logging/setLevel', { level: 'error' });
			logsOff.push(await timed(FLOOD));
			await s.request('logging/setLevel', { level: 'info' });
		}
		const load1 = os.loadavg()[0];
		const rows = [
			['cancel -> next result, cached stdlib snippet', median(cancelCached), p90(cancelCached), median(refCached), `${fmt(median(cancelCached) - median(refCached))} ms`, '<= 300 ms', median(cancelCached) <= 300 ? 'met' : 'missed'],
			['cancel -> next result, fresh stdlib snippet (a build)', median(cancelFresh), p90(cancelFresh), median(refFresh), `${fmt(median(cancelFresh) - median(refFresh))} ms`, '<= 300 ms', median(cancelFresh) <= 300 ? 'met' : 'missed'],
			['output flood (200,000 lines): logs info vs error', median(logsOn), p90(logsOn), median(logsOff), `x ${(median(logsOn) / median(logsOff)).toFixed(3)}`, '<= x 1.10', median(logsOn) / median(logsOff) <= 1.10 ? 'met' : 'missed'],
		];
		process.stdout.write(`### Watching and stopping a call (stdio, ${ROUNDS} rounds, interleaved)\n\n` +
			`${machine_line(load0, load1, o.bin, version_of(o.bin, ['version']))}\n\n` +
			table(['what', 'median ms', 'p90 ms', 'reference median ms', 'difference', 'aim', ''], rows,
				[false, true, true, true, true, false, false]) +
			'\nreference: the same next call without a cancel before it; for the flood, the call with ' +
			'logging/setLevel error (nothing streamed, the capped result alone).\n');
	} finally {
		await s.close();
		fs.rmSync(tmp, { recursive: true, force: true });
	}
}

run_main(main);
