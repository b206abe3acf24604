#!/usr/bin/env node
/*
 * httpbench.mjs - the shared server's figures (`serve --http`), printed as one markdown table.
 *
 * Called by bench/run.sh (so by `make bench`), or by hand:
 *   node bench/httpbench.mjs [--quick] [--only throughput|rss|open] [--bin PATH] ...
 * (--help lists the options).  Progress goes to stderr, the table alone to stdout.  Three parts:
 *   1. throughput and latency of `ping` and `tools/list` at 1, 16 and 64 concurrent sessions,
 *      against kode-gopher and against the TypeScript SDK's reference server
 *      (@modelcontextprotocol/server-everything, Streamable HTTP), with the same client, cells
 *      of the two servers taking turns so they share the machine's load;
 *   2. the master's RSS with 200 open idle sessions (and the workers' and sandboxes' sums);
 *   3. the time to open a session on a warm pool: initialize -> first tools/call result.
 * The client speaks raw JSON-RPC over keep-alive HTTP/1.1 (undici), not the SDK client, so
 * that its own cost stays small next to the servers'; the table says how much CPU it used.
 * Every process started here is ended here (SIGTERM, then SIGKILL after 60 s), on success,
 * failure and SIGINT/SIGTERM alike.  The exit status is non-zero only when a figure could not be
 * measured; a missed aim is a word in the table.  What it shares with k8sbench.mjs (the client,
 * the children, the numbers and the table) is in lib.mjs.  See bench/README.md.
 */
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import {
	HERE, SNIPPET_UPPER, bench_name, base_options, parse_options, die, progress, sleep, fmt,
	sorted, pct, median, p90, table, proc_read, proc_table, proc_tree, subtree_cpu, track,
	child_stop, stop_all, term_all_now, spawn_logged, wait_line, serving_port, http_target,
	rpc, open_session, close_session, kg_metrics, kg_metric, version_of, work_dir,
	machine_line, run_main, sign_in,
} from './lib.mjs';
import { startProvider } from '../tests/oidc/provider.mjs';

bench_name('httpbench');
const REQ_TIMEOUT_MS = 30000;

/* ------------------------------------------------------------------ options */

const USAGE = `usage: node bench/httpbench.mjs [options]
  --quick               2 s per cell, 1 and 16 sessions, 50 idle sessions for the RSS, 3 opens
  --only PART           throughput, rss or open (default: all three)
  --bin PATH            kode-gopher binary (default $KODE_GOPHER_BIN, else build/kode-gopher)
  --runtime-dir DIR     passed to serve (default $RUNTIME_DIR, else /var/cache/kode-gopher/runtime)
  --everything PATH     server-everything's dist/index.js (default bench/node_modules/...)
  --duration S          seconds per measured cell (default 5)
  --warmup S            unmeasured seconds before each cell (default 0.5)
  --levels LIST         concurrent sessions, comma-separated (default 1,16,64)
  --rss-sessions N      idle sessions for the master's RSS (default 200)
  --open-sessions N     sessions opened one after another (default 10)
  --auth MODE           none (default) or google: kode-gopher with sign-in on (the tests'
                        OpenID provider on loopback; one signed-in user, a bearer token on
                        every request); server-everything has no sign-in either way
`;

/* parse_args - options into a settings object; exits on --help or a bad option */
function parse_args(argv) {
	const o = {
		...base_options(), duration: 5, warmup: 0.5, levels: [1, 16, 64], rss: 200, opens: 10, auth: 'none',
		everything: path.join(HERE, 'node_modules/@modelcontextprotocol/server-everything/dist/index.js'),
	};
	const set = {}; /* given explicitly: wins over --quick's */
	parse_options(argv, USAGE, o, (a, val) => {
		switch (a) {
		case '--everything': o.everything = val(); break;
		case '--duration': set.duration = Number(val()); break;
		case '--warmup': set.warmup = Number(val()); break;
		case '--levels': set.levels = val().split(',').map(Number); break;
		case '--rss-sessions': set.rss = Number(val()); break;
		case '--open-sessions': set.opens = Number(val()); break;
		case '--auth': o.auth = val(); break;
		default: return false;
		}
		return true;
	});
	if (o.quick)
		Object.assign(o, { duration: 2, warmup: 0.3, levels: [1, 16], rss: 50, opens: 3 });
	Object.assign(o, set);
	if (!['none', 'google'].includes(o.auth))
		die(`--auth takes none or google, not ${o.auth}`);
	if (o.only && !['throughput', 'rss', 'open'].includes(o.only))
		die(`--only takes throughput, rss or open, not ${o.only}`);
	for (const [k, v] of [['duration', o.duration], ['warmup', o.warmup], ['rss-sessions', o.rss], ['open-sessions', o.opens]])
		if (!(v >= 0) || (k !== 'warmup' && !(v > 0)))
			die(`--${k} needs a positive number`);
	if (!o.levels.length || o.levels.some((n) => !Number.isInteger(n) || n < 1))
		die('--levels needs positive whole numbers, like 1,16,64');
	return o;
}

/* ------------------------------------------------------------------ /proc */

/* proc_kib - a "Vm...:   N kB" field of /proc/PID/status in KiB (NaN if gone) */
function proc_kib(pid, field) {
	const s = proc_read(pid, 'status');
	const m = s && s.match(new RegExp(`^${field}:\\s+(\\d+) kB`, 'm'));
	return m ? Number(m[1]) : NaN;
}

/* tree_cpu - CPU seconds used so far by a process tree (the living members) */
const tree_cpu = (root) => subtree_cpu(proc_table(), root);

/* ------------------------------------------------------------------ servers */

/* free_port - a loopback port nobody listens on right now (for a server that wants a number) */
function free_port() {
	return new Promise((resolve, reject) => {
		const s = net.createServer();
		s.on('error', reject);
		s.listen(0, '127.0.0.1', () => {
			const port = s.address().port;
			s.close(() => resolve(port));
		});
	});
}

/* SIGNIN_USER - who signs in with --auth google (the provider's only user) */
const SIGNIN_USER = { email: 'alice@example.com', password: 'httpbench-pw' };

/* start_kg - `kode-gopher serve --http 127.0.0.1:0` with its own sandbox root; its log to a file.
 * With --auth google it signs in once, and every request of its target carries the token */
async function start_kg(o, tmp, tag, args) {
	const root = path.join(tmp, `sandboxes-${tag}`);
	fs.mkdirSync(root, { mode: 0o711 });
	const auth = o.idp ? ['--auth', 'google', '--oidc-issuer', o.idp.issuer, '--oauth-client-file', o.idp.clientFile,
		'--allowed-domains', 'example.com'] : [];
	const argv = ['serve', '--http', '127.0.0.1:0', '--runtime-dir', o.runtime, ...auth, ...args];
	const c = spawn_logged(`kode-gopher (${tag})`, o.run_bin, argv, { ...process.env, KODE_GOPHER_SANDBOX_ROOT: root },
		path.join(tmp, `kode-gopher-${tag}.log`));
	const port = await serving_port(c);
	c.target = target(port);
	c.user = 'local';
	if (o.idp) {
		c.target.token = (await sign_in(`http://127.0.0.1:${port}`, o.idp, SIGNIN_USER.email, SIGNIN_USER.password)).access;
		c.user = SIGNIN_USER.email;
	}
	progress(`kode-gopher (${tag}) pid ${c.proc.pid} on port ${port}${o.idp ? `, signed in as ${c.user}` : ''}: ${argv.join(' ')}`);
	return c;
}

/* start_everything - server-everything in Streamable HTTP mode on a free port */
async function start_everything(o) {
	const port = await free_port();
	/* it logs every request on stdout: to /dev/null, which costs it a write per request, as it
	 * would anywhere its output is not read */
	const proc = spawn(process.execPath, [o.everything, 'streamableHttp'], {
		env: { ...process.env, PORT: String(port) },
		stdio: ['ignore', 'ignore', 'pipe'],
	});
	const c = track('server-everything', proc);
	c.log = '(its stderr)';
	proc.stderr.setEncoding('utf8');
	let tail = '';
	proc.stderr.on('data', (d) => (tail = (tail + d).slice(-2000)));
	proc.on('exit', (code) => code && progress(`server-everything exited ${code}: ${tail}`));
	await wait_line(c, /listening on port (\d+)/, 'its "listening on port" line', 20000);
	c.target = target(port);
	progress(`server-everything pid ${proc.pid} on port ${port}`);
	return c;
}

/* ------------------------------------------------------------------ HTTP client */

/* target - where this bench's requests go (lib.mjs's http_target) */
const target = (port) => http_target(port, REQ_TIMEOUT_MS, 'kode-gopher-httpbench');

/* open_many - n sessions, `par` at a time (each of ours costs a worker and a jail) */
async function open_many(t, n, par, what) {
	const out = [];
	const t0 = performance.now();
	let next = 0;
	async function lane() {
		while (next < n) {
			next++;
			out.push(await open_session(t));
			if (out.length % 50 === 0) progress(`${what}: ${out.length}/${n} sessions open`);
		}
	}
	await Promise.all(Array.from({ length: Math.min(par, n) }, lane));
	progress(`${what}: ${n} sessions opened in ${((performance.now() - t0) / 1000).toFixed(1)} s`);
	return out;
}

/* close_many - DELETE them all, `par` at a time; the first failure is returned (not thrown) */
async function close_many(t, sessions, par) {
	let next = 0;
	let err = null;
	async function lane() {
		while (next < sessions.length) {
			const s = sessions[next++];
			try {
				await close_session(t, s);
			} catch (e) {
				err = err || e;
			}
		}
	}
	await Promise.all(Array.from({ length: par }, lane));
	return err;
}

/* ------------------------------------------------------------------ 1. throughput */

/* cell - `level` sessions each in a closed loop of `method` for warmup + duration seconds;
 * with churn, one more lane opens a session and DELETEs it, over and over, meanwhile */
async function cell(srv, sessions, method, level, o, churn = false) {
	const tStart = performance.now() + o.warmup * 1000;
	const tEnd = tStart + o.duration * 1000;
	const lat = [];
	let errors = 0;
	let first_error = null;
	let bytes = 0;
	let cpu0 = null, srv0 = 0, wall0 = 0;
	const mark = setTimeout(() => {
		cpu0 = process.cpuUsage();
		srv0 = tree_cpu(srv.proc.pid);
		wall0 = performance.now();
	}, o.warmup * 1000);
	async function loop(sess) {
		while (performance.now() < tEnd) {
			const t0 = performance.now();
			let ok = true;
			try {
				await rpc(srv.target, sess, method);
				bytes = sess.bytes;
			} catch (e) {
				ok = false;
				first_error = first_error || e.message;
			}
			const t1 = performance.now();
			if (t0 >= tStart && t1 <= tEnd) {
				if (ok) lat.push(t1 - t0);
				else errors++;
			}
		}
	}
	let churned = 0;
	async function churner() {
		while (performance.now() < tEnd) {
			const t0 = performance.now();
			try {
				await close_session(srv.target, await open_session(srv.target));
				if (t0 >= tStart && performance.now() <= tEnd) churned++;
			} catch (e) {
				errors++;
				first_error = first_error || `churn: ${e.message}`;
			}
		}
	}
	await Promise.all([...sessions.slice(0, level).map(loop), ...(churn ? [churner()] : [])]);
	clearTimeout(mark);
	const wall = (performance.now() - wall0) / 1000;
	const cpu = process.cpuUsage(cpu0);
	const srv_cpu = tree_cpu(srv.proc.pid) - srv0;
	const s = sorted(lat);
	return {
		rps: lat.length / o.duration, p50: pct(s, 50), p99: pct(s, 99), max: s[s.length - 1], n: lat.length, errors, first_error,
		churned,
		client_cpu: (cpu.user + cpu.system) / 1e6 / wall, srv_us: (srv_cpu * 1e6) / Math.max(lat.length, 1),
		srv_cores: srv_cpu / wall, bytes,
	};
}

/* part_throughput - figure 1: both servers, 64 sessions each opened first, cells taking turns */
async function part_throughput(o, tmp, rows, info) {
	const maxLevel = Math.max(...o.levels);
	const kg = await start_kg(o, tmp, 'throughput', ['--max-workers', String(Math.max(80, maxLevel + 16)), '--workers-min-idle', '4',
		/* every bench session comes from 127.0.0.1: the per-address limits must not be what is
		 * measured (a session's lane keeps a connection, the churn lane and the opens a few more) */
		'--max-sessions-per-peer', String(Math.max(80, maxLevel + 16)),
		'--max-connections-per-peer', String(Math.min(512, Math.max(80, 2 * maxLevel + 16)))]);
	const ev = await start_everything(o);
	const kgS = await open_many(kg.target, maxLevel, 4, 'kode-gopher');
	const evS = await open_many(ev.target, maxLevel, 4, 'server-everything');
	await sleep(1000);
	info.push(['RSS kode-gopher master, ' + maxLevel + ' idle sessions (MiB)', proc_kib(kg.proc.pid, 'VmRSS') / 1024, '-', String(maxLevel),
		'for information: the serve process alone (each session has its own worker and sandbox)']);
	info.push(['RSS server-everything, ' + maxLevel + ' idle sessions (MiB)', proc_kib(ev.proc.pid, 'VmRSS') / 1024, '-', String(maxLevel),
		'for information: its one process holds all its sessions']);
	const crashes0 = await kg_metric(kg.target.port, 'kode_gopher_worker_crashes_total');
	const cells = [];
	for (const method of ['ping', 'tools/list'])
		for (const level of o.levels) cells.push({ method, level, churn: false });
	/* the same pings while other sessions come and go: what session churn costs everyone else */
	const churnLevels = o.levels.filter((l) => l >= 16);
	if (!churnLevels.length)
		churnLevels.push(Math.max(...o.levels));
	for (const level of churnLevels)
		cells.push({ method: 'ping', level, churn: true });
	for (const { method, level, churn } of cells) {
		const what = churn ? `${method} + churn` : method;
		progress(`${what} x ${level}: kode-gopher, then server-everything (${o.warmup} + ${o.duration} s each)`);
		const a = await cell(kg, kgS, method, level, o, churn);
		const b = await cell(ev, evS, method, level, o, churn);
		const rr = a.rps / b.rps, pr = a.p99 / b.p99;
		const notes = [];
		if (churn)
			notes.push(`while one more client opens a session and DELETEs it, over and over: ${a.churned} / ${b.churned} sessions in the window; ` +
				(level === 16 ? `aim ≥ 3× req/s and p99 ≤ 10 ms (issue 19): ${rr >= 3 && a.p99 <= 10 ? 'met' : 'MISSED'}` : 'for information'));
		else
			notes.push(`aim ≥ 3× req/s at ≤ p99: ${rr >= 3 && pr <= 1 ? 'met' : 'MISSED'}`);
		if (a.errors || b.errors)
			notes.push(`errors: kode-gopher ${a.errors}${a.first_error ? ` (${a.first_error})` : ''}, everything ${b.errors}${b.first_error ? ` (${b.first_error})` : ''}`);
		notes.push(`max ${fmt(a.max)} / ${fmt(b.max)} ms`);
		notes.push(`server CPU per request ${fmt(a.srv_us)} / ${fmt(b.srv_us)} µs (${fmt(a.srv_cores * 100)} / ${fmt(b.srv_cores * 100)} % of a core)`);
		notes.push(`client CPU ${fmt(a.client_cpu * 100)} / ${fmt(b.client_cpu * 100)} % of a core`);
		if (level === o.levels[0]) notes.push(`answer ${a.bytes} / ${b.bytes} bytes`);
		rows.push([what, String(level), a.rps, a.p50, a.p99, b.rps, b.p50, b.p99, rr, pr, notes.join('; ')]);
		if (a.errors || !a.n)
			progress(`kode-gopher: ${a.errors} failed requests in ${what} at ${level} sessions; first: ${a.first_error}`);
	}
	const crashes1 = await kg_metric(kg.target.port, 'kode_gopher_worker_crashes_total');
	const alive = kg_alive(kg, kgS.length);
	const e1 = await close_many(kg.target, kgS, 4);
	const e2 = await close_many(ev.target, evS, 4);
	if (e1) progress(`kode-gopher: closing a session failed: ${e1.message}`);
	if (e2) progress(`server-everything: closing a session failed: ${e2.message}`);
	await Promise.all([child_stop(kg), child_stop(ev)]);
	const problems = kg.problems.length ? `; its log has ${kg.problems.length} warn/error lines, first: ${kg.problems[0].replace(/^\S+ /, '')}` : '';
	info.push(['kode-gopher during the runs', alive, '-', '-',
		`worker crashes ${crashes1 - crashes0} (kode_gopher_worker_crashes_total); serve ${kg.status} after SIGTERM${problems}`]);
	if (rows.some((r) => !(r[2] > 0) || !(r[5] > 0)))
		throw new Error('a throughput cell completed no request (see the errors above)');
}

/* kg_alive - "ok" when serve and a worker per session were alive after the runs */
function kg_alive(kg, n) {
	if (kg.exited) return `serve ${kg.status}`;
	const workers = proc_tree(proc_table(), kg.proc.pid).filter((p) => (proc_read(p, 'cmdline') || '').startsWith(`kode-gopher: worker ${kg.user} `)).length;
	return workers >= n ? 'ok' : `${workers}/${n} workers`;
}

/* ------------------------------------------------------------------ 2. RSS */

/* part_rss - figure 2: the master's VmRSS with N idle sessions, workers and sandboxes summed */
async function part_rss(o, tmp, rows) {
	const n = o.rss;
	const kg = await start_kg(o, tmp, 'rss', ['--max-workers', String(n + 10), '--workers-min-idle', '2', '--max-sessions-per-peer', String(n + 10),
		'--max-connections-per-peer', String(Math.min(512, n + 16))]);
	await sleep(1500);
	const before = proc_kib(kg.proc.pid, 'VmRSS') / 1024;
	const sessions = await open_many(kg.target, n, 4, `kode-gopher, ${n} idle sessions`);
	await sleep(2000);
	const pid = kg.proc.pid;
	const rss = proc_kib(pid, 'VmRSS') / 1024, hwm = proc_kib(pid, 'VmHWM') / 1024;
	let workers = [], sandboxes = 0, nsand = 0;
	for (const p of proc_tree(proc_table(), pid).slice(1)) {
		const kib = proc_kib(p, 'VmRSS');
		if (Number.isNaN(kib)) continue;
		if ((proc_read(p, 'cmdline') || '').startsWith('kode-gopher: worker')) workers.push(kib / 1024);
		else { sandboxes += kib / 1024; nsand++; }
	}
	const open = await kg_metric(kg.target.port, 'kode_gopher_sessions_open');
	progress(`RSS: master ${rss.toFixed(1)} MiB with ${open} sessions open; closing them`);
	const t0 = performance.now();
	const err = await close_many(kg.target, sessions, 4);
	const closeS = (performance.now() - t0) / 1000;
	if (err) progress(`kode-gopher: closing a session failed: ${err.message}`);
	await sleep(500);
	const after = proc_kib(pid, 'VmRSS') / 1024;
	const t1 = performance.now();
	await child_stop(kg);
	const stopS = (performance.now() - t1) / 1000;
	const sum = workers.reduce((x, y) => x + y, 0);
	rows.push([`RSS master, ${n} idle sessions open (MiB)`, rss, '-', String(n),
		`aim ≤ 20 MiB${n === 200 ? '' : ' (at 200 sessions)'}: ${rss <= 20 ? 'met' : 'MISSED'}; VmHWM ${fmt(hwm)} MiB; ` +
		`${fmt(before)} MiB before the sessions, ${fmt(after)} MiB after closing them; /metrics said ${open} open; pid ${pid}`]);
	rows.push([`RSS workers, sum over the ${workers.length} (MiB)`, sum, '-', String(workers.length),
		`for information: median ${fmt(median(workers))} MiB per worker (${n} sessions + idle ones kept ready); RSS counts the shared binary and libraries in each`]);
	rows.push([`RSS sandboxes, sum (MiB)`, sandboxes, '-', String(nsand),
		`for information: every other descendant of serve (per sandbox the jail's two processes and the agent); shared pages counted in each`]);
	rows.push([`closing ${n} sessions (s)`, closeS, '-', String(n),
		`for information: DELETE each, 4 at a time${err ? `; a DELETE failed: ${err.message}` : ''}; then SIGTERM: serve ${kg.status} after ${fmt(stopS)} s`]);
}

/* ------------------------------------------------------------------ 3. session open */

/* wait_idle - until /metrics shows `want` idle workers (the pool refilled), or throw */
async function wait_idle(port, want, ms) {
	const end = performance.now() + ms;
	while (performance.now() < end) {
		const m = (await kg_metrics(port)).match(/^kode_gopher_workers\{state="idle"\} (\d+)/m);
		if (m && Number(m[1]) >= want) return;
		await sleep(20);
	}
	throw new Error(`the pool did not get back to ${want} idle workers within ${ms / 1000} s`);
}

/* part_open - figure 3: initialize -> first tools/call result on a warm pool, one after another */
async function part_open(o, tmp, rows) {
	const kg = await start_kg(o, tmp, 'open', ['--max-workers', '16', '--workers-min-idle', '2']);
	const total = [], init = [], call = [], build = [], claim = [];
	for (let i = 0; i < o.opens; i++) {
		/* a warm pool is idle workers whose sandboxes answer: the metrics count the first, and a
		 * fixed 0.3 s more leaves their jails (about 0.15 s to ready) time for the second */
		await wait_idle(kg.target.port, 2, 30000);
		await sleep(300);
		const t0 = performance.now();
		const sess = await open_session(kg.target);
		const t1 = performance.now();
		const res = await rpc(kg.target, sess, 'tools/call', { name: 'execute_go_code', arguments: { code: SNIPPET_UPPER } });
		const t2 = performance.now();
		const sc = res.structuredContent || {};
		if (res.isError || !sc.result || sc.result.kind !== 'ok')
			throw new Error(`the first tools/call did not run the snippet: ${JSON.stringify(res).slice(0, 400)}`);
		total.push(t2 - t0);
		init.push(t1 - t0);
		call.push(t2 - t1);
		build.push(sc.build_ms);
		if (sc.timings && sc.timings.claim_ms !== undefined) claim.push(sc.timings.claim_ms);
		await close_session(kg.target, sess);
	}
	await child_stop(kg);
	rows.push(['session open on a warm pool: initialize → first result (ms)', median(total), p90(total), String(total.length),
		'--workers-min-idle 2, the pool back at 2 idle workers before each; a stdlib snippet (strings.ToUpper), the same each time: a new sandbox builds it once']);
	rows.push(['  initialize + notifications/initialized (ms)', median(init), p90(init), String(init.length), 'until the Mcp-Session-Id is in hand']);
	rows.push(['  first tools/call (ms)', median(call), p90(call), String(call.length),
		`build_ms ${fmt(median(build))}, claim_ms ${fmt(median(claim))} (medians, as the result reports them)`]);
}

/* ------------------------------------------------------------------ main */

/* main - the parts asked for, then the tables; servers and the temporary directory go in every case */
async function main() {
	const o = parse_args(process.argv.slice(2));
	const want = (p) => !o.only || o.only === p;
	if (!fs.existsSync(o.bin)) die(`${o.bin} does not exist: build it first (make)`);
	if (want('throughput') && !fs.existsSync(o.everything))
		die(`${o.everything} is missing: run \`npm install\` in bench/ (bench/run.sh does it)`);
	let evVersion = '?';
	try {
		evVersion = JSON.parse(fs.readFileSync(path.join(path.dirname(o.everything), '..', 'package.json'), 'utf8')).version;
	} catch { /* reported as ? */ }
	/* serve runs from a copy: a serve whose binary was replaced can no longer start sandboxes */
	const { tmp, run_bin } = work_dir('httpbench-', o.bin);
	o.run_bin = run_bin;
	const kgVersion = version_of(o.run_bin, ['--version']);
	let interrupted = false;
	const onsig = (sig) => {
		if (interrupted) return;
		interrupted = true;
		progress(`${sig}: stopping the servers`);
		stop_all().finally(() => {
			fs.rmSync(tmp, { recursive: true, force: true });
			process.exit(130);
		});
	};
	process.on('SIGINT', onsig);
	process.on('SIGTERM', onsig);
	process.on('exit', () => {
		term_all_now(); /* last resort: nothing async runs now */
	});

	const load0 = os.loadavg()[0];
	const date = new Date().toISOString().slice(0, 16).replace('T', ' ');
	const tput = [], info = [], other = [];
	let failed = null;
	try {
		if (o.auth === 'google') {
			progress('starting the test provider (tests/oidc/build.sh builds it the first time)');
			o.idp = await startProvider([SIGNIN_USER], ['example.com']);
		}
		if (want('throughput')) await part_throughput(o, tmp, tput, info);
		if (want('rss')) await part_rss(o, tmp, other);
		if (want('open')) await part_open(o, tmp, other);
	} catch (e) {
		failed = e;
	} finally {
		await stop_all();
		if (o.idp) await o.idp.close();
		if (!failed && !process.env.HTTPBENCH_KEEP) fs.rmSync(tmp, { recursive: true, force: true });
		else progress(`its files and the servers' logs are in ${tmp}`);
	}
	const load1 = os.loadavg()[0];
	let out = `kode-gopher shared-server benchmarks, ${date} UTC: ${machine_line(load0, load1, o.bin, kgVersion)}; ` +
		`@modelcontextprotocol/server-everything ${evVersion}; ` +
		`${o.duration} s per cell after ${o.warmup} s unmeasured` +
		(o.auth === 'google' ? '; kode-gopher with sign-in on (`--auth google`, a bearer token checked on every request)' : '') + '\n\n';
	if (tput.length)
		out += table(['method', 'sessions', 'kode-gopher req/s', 'p50 ms', 'p99 ms', 'everything req/s', 'p50 ms', 'p99 ms',
			'× req/s', '× p99', 'note'], tput, [0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0]) + '\n';
	const rest = [...other, ...info];
	if (rest.length)
		out += table(['figure', 'median', 'p90', 'n', 'note'], rest, [0, 1, 1, 1, 0]);
	process.stdout.write(out);
	if (failed) {
		progress(`a figure could not be measured: ${failed.message}`);
		progress(`the servers' logs are kept in ${tmp}`);
		process.exit(1);
	}
}

run_main(main);
