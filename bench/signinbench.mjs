#!/usr/bin/env node
/*
 * signinbench.mjs - what sign-in costs (`serve --http --auth google`), printed as one markdown
 * table: the round trip of tools/list in one session with a bearer token against the same
 * server without sign-in (`--auth none`), and the whole sign-in round trip against the tests'
 * OpenID provider (tests/oidc: registration, /authorize, the provider's login form, the
 * callback with the ID token's checks, the token request), with the token request alone.
 *
 * Called by bench/run.sh --only signin, or by hand: node bench/signinbench.mjs [--quick]
 * [--requests N] [--signins N] [--bin PATH]. Progress on stderr, the table on stdout. The two
 * servers take turns in rounds so they share the machine's load. Every process started here
 * is stopped here. The exit status is non-zero only when a figure could not be measured.
 */
import { spawn } from 'node:child_process';
import http from 'node:http';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';

import { startProvider } from '../tests/oidc/provider.mjs';
import { bench_name, sign_in } from './lib.mjs';

bench_name('signinbench');

const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const args = process.argv.slice(2);
const opt = (name, dflt) => {
	const i = args.indexOf(name);
	return i >= 0 ? args[i + 1] : dflt;
};
const quick = args.includes('--quick');
const REQUESTS = Number(opt('--requests', quick ? 500 : 3000)); /* per server, in 10 rounds */
const SIGNINS = Number(opt('--signins', quick ? 5 : 30));
const BIN = opt('--bin', process.env.KODE_GOPHER_BIN || path.join(REPO, 'build', 'kode-gopher'));
const progress = (m) => process.stderr.write(`signinbench: ${m}\n`);
const children = [];

/* serve - start kode-gopher serve --http with these arguments; resolves {port, base} */
function serve(extra) {
	const child = spawn(BIN, ['serve', '--http', '127.0.0.1:0', '--log-level', 'info', '--workers-min-idle', '1', ...extra], {
		stdio: ['ignore', 'ignore', 'pipe'], env: { ...process.env, KODE_GOPHER_RUNTIME_DIR: process.env.RUNTIME_DIR || '/var/cache/kode-gopher/runtime' },
	});
	children.push(child);
	let err = '';
	return new Promise((resolve, reject) => {
		child.stderr.on('data', (d) => {
			err += d;
			const m = /serving MCP on http:\/\/127\.0\.0\.1:(\d+)\/mcp/.exec(err);
			if (m)
				resolve({ port: Number(m[1]), base: `http://127.0.0.1:${m[1]}` });
		});
		child.on('exit', (c) => reject(new Error(`serve exited (${c}): ${err.slice(-2000)}`)));
	});
}

const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });

/* post - one JSON-RPC POST over the kept-alive connection; resolves {status, headers, body} */
function post(port, body, headers = {}) {
	return new Promise((resolve, reject) => {
		const data = JSON.stringify(body);
		const req = http.request({ host: '127.0.0.1', port, path: '/mcp', method: 'POST', agent,
			headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream',
				'content-length': Buffer.byteLength(data), ...headers } }, (res) => {
			let b = '';
			res.on('data', (d) => { b += d; });
			res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, body: b }));
		});
		req.on('error', reject);
		req.end(data);
	});
}

/* session - initialize and initialized; resolves the headers later requests carry */
async function session(port, token) {
	const auth = token ? { authorization: `Bearer ${token}` } : {};
	const init = await post(port, { jsonrpc: '2.0', id: 1, method: 'initialize',
		params: { protocolVersion: '2025-11-25', capabilities: {}, clientInfo: { name: 'signinbench', version: '1' } } }, auth);
	if (init.status !== 200)
		throw new Error(`initialize: HTTP ${init.status} ${init.body}`);
	const h = { ...auth, 'mcp-session-id': init.headers['mcp-session-id'], 'mcp-protocol-version': '2025-11-25' };
	await post(port, { jsonrpc: '2.0', method: 'notifications/initialized' }, h);
	return h;
}

const pct = (xs, p) => {
	const s = [...xs].sort((a, b) => a - b);
	return s[Math.min(s.length - 1, Math.floor(p * s.length))];
};
const ms = (x) => x.toFixed(x < 10 ? 3 : 1);

async function main() {
	progress('starting the test provider (tests/oidc/build.sh builds it the first time)');
	const idp = await startProvider([{ email: 'alice@example.com', password: 'bench-pw' }], ['example.com']);
	try {
		const none = await serve(['--auth', 'none']);
		const google = await serve(['--auth', 'google', '--oidc-issuer', idp.issuer, '--oauth-client-file', idp.clientFile,
			'--allowed-domains', 'example.com']);
		progress(`sign-ins: ${SIGNINS}`);
		const signins = [];
		for (let i = 0; i < SIGNINS; i++)
			signins.push(await sign_in(google.base, idp, 'alice@example.com', 'bench-pw'));
		const hNone = await session(none.port, null);
		const hGoogle = await session(google.port, signins.at(-1).access);
		const list = { jsonrpc: '2.0', id: 2, method: 'tools/list' };
		const lat = { none: [], google: [] };
		progress(`tools/list: ${REQUESTS} per server in 10 rounds`);
		for (let round = 0; round < 10; round++) {
			for (const [name, port, h] of [['none', none.port, hNone], ['google', google.port, hGoogle]]) {
				for (let i = 0; i < REQUESTS / 10; i++) {
					const t = performance.now();
					const r = await post(port, list, h);
					const dt = performance.now() - t;
					if (r.status !== 200)
						throw new Error(`tools/list on ${name}: HTTP ${r.status}`);
					if (i >= 5) /* the first few of a round warm the connection up */
						lat[name].push(dt);
				}
			}
		}
		const mN = pct(lat.none, 0.5), mG = pct(lat.google, 0.5);
		const over = ((mG - mN) / mN) * 100;
		const rows = [
			['tools/list round trip, `--auth none`', `${ms(mN)} ms median, ${ms(pct(lat.none, 0.9))} ms p90`, `${lat.none.length} requests, one session, one kept-alive connection`],
			['tools/list round trip, `--auth google` (bearer checked)', `${ms(mG)} ms median, ${ms(pct(lat.google, 0.9))} ms p90`,
				`${over >= 0 ? '+' : ''}${over.toFixed(1)} % on the median (aim: within 5 %: ${over <= 5 ? 'met' : 'missed'})`],
			['sign-in round trip (register → authorize → provider login → callback → token)',
				`${ms(pct(signins.map((s) => s.total), 0.5))} ms median, ${ms(pct(signins.map((s) => s.total), 0.9))} ms p90`,
				`${SIGNINS} sign-ins against the tests' zitadel provider on loopback; includes its login form and the ID token's checks`],
			['token request alone (code → tokens)', `${ms(pct(signins.map((s) => s.token), 0.5))} ms median`, 'PKCE check, HS256 access token, refresh token'],
		];
		process.stdout.write('| figure | value | note |\n|---|---|---|\n' + rows.map((r) => `| ${r.join(' | ')} |`).join('\n') + '\n');
	} finally {
		for (const c of children)
			if (c.exitCode === null)
				c.kill('SIGTERM');
		await Promise.all(children.map((c) => (c.exitCode === null ? new Promise((r) => c.on('exit', r)) : null)));
		await idp.close();
		agent.destroy();
	}
}

main().catch((e) => {
	process.stderr.write(`signinbench: ${e.stack || e}\n`);
	process.exitCode = 1;
	for (const c of children)
		c.kill('SIGKILL');
});
