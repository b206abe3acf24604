/*
 * provider.mjs - the sign-in tests' OpenID provider (Google's stand-in) and a person at its login
 * form. The provider is zitadel's, built from the Go module proxy by tests/oidc/build.sh (about
 * 40 s the first time, cached in /var/cache/kode-gopher/oidc-bin); nothing of it is written here.
 *
 *   startProvider(users)   build if needed, start it on 127.0.0.1, resolve {issuer, clientFile,
 *                          clientId, clientSecret, stderr, close()}
 *   browse(url, login)     follow redirects as a browser would, filling the provider's login
 *                          form with login = {username, password}; resolves at the first
 *                          redirect that leaves both the kode-gopher server and the provider
 *                          ({location: URL}) or at the first page that is not a redirect
 *                          ({status, body})
 *
 * Imported by tests/e2e/signin*.test.mjs and bench/signinbench.mjs; it needs nothing but Node
 * (no test harness), so both can.
 */
import { execFileSync, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { fileURLToPath } from 'node:url';

const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');

/* waitFor - poll fn until it returns a truthy value */
async function waitFor(fn, { timeout, what }) {
	const end = Date.now() + timeout;
	for (;;) {
		const v = fn();
		if (v)
			return v;
		if (Date.now() > end)
			throw new Error(`timed out waiting for ${what}`);
		await new Promise((r) => setTimeout(r, 50));
	}
}

/* startProvider - users: [{email, password, verified = true}]; workspace: the domains that
 * get Google's hd claim */
export async function startProvider(users, workspace) {
	const bin = execFileSync(path.join(REPO, 'tests', 'oidc', 'build.sh'), {
		encoding: 'utf8', timeout: 15 * 60_000, stdio: ['ignore', 'pipe', 'inherit'],
	}).trim();
	const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kg-oidc-'));
	const clientId = 'kode-gopher-e2e.apps.example';
	const clientSecret = `GOCSPX-${randomBytes(18).toString('base64url')}`;
	const table = {};
	users.forEach((u, i) => {
		table[`u${i}`] = {
			ID: `u${i}`, Username: u.email, Password: u.password, FirstName: 'Test', LastName: `User${i}`,
			Email: u.email, EmailVerified: u.verified !== false, PreferredLanguage: 'en',
		};
	});
	fs.writeFileSync(path.join(dir, 'users.json'), JSON.stringify(table));
	fs.writeFileSync(path.join(dir, 'secret'), clientSecret, { mode: 0o600 });
	const clientFile = path.join(dir, 'client.json');
	fs.writeFileSync(clientFile, JSON.stringify({
		web: {
			client_id: clientId, project_id: 'kg-e2e', client_secret: clientSecret,
			auth_uri: 'unused: kode-gopher reads the discovery document', redirect_uris: [],
		},
	}), { mode: 0o600 });
	const child = spawn(bin, ['-addr', '127.0.0.1:0', '-users', path.join(dir, 'users.json'),
		'-client-id', clientId, '-client-secret-file', path.join(dir, 'secret'),
		'-redirect-glob', 'http://127.0.0.1:*/oauth/callback,https://127.0.0.1:*/oauth/callback', '-workspace-domains', workspace.join(',')],
	{ stdio: ['ignore', 'pipe', 'pipe'] });
	let out = '', stderr = '';
	child.stdout.on('data', (d) => { out += d; });
	child.stderr.on('data', (d) => { stderr = (stderr + d).slice(-(1 << 20)); });
	const exited = new Promise((r) => child.on('exit', r));
	const issuer = await waitFor(() => {
		if (child.exitCode !== null)
			throw new Error(`the OpenID provider exited: ${stderr.slice(-2000)}`);
		return /^issuer (\S+)$/m.exec(out)?.[1];
	}, { timeout: 20_000, what: 'the OpenID provider to listen' });
	return {
		issuer, clientFile, clientId, clientSecret,
		get stderr() { return stderr; },
		async close() {
			if (child.exitCode === null) {
				child.kill('SIGTERM');
				await exited;
			}
			fs.rmSync(dir, { recursive: true, force: true });
		},
	};
}

/* browse - see the file's opening comment; stops after 12 hops */
export async function browse(url, login, { server, issuer }) {
	const ours = (u) => u.startsWith(server) || u.startsWith(issuer);
	let next = String(url), method = 'GET', body;
	for (let hop = 0; hop < 12; hop++) {
		const res = await fetch(next, {
			method, body, redirect: 'manual',
			headers: body ? { 'content-type': 'application/x-www-form-urlencoded' } : {},
		});
		method = 'GET';
		body = undefined;
		const loc = res.headers.get('location');
		if (res.status >= 300 && res.status < 400 && loc) {
			const abs = new URL(loc, next).href;
			await res.arrayBuffer();
			if (!ours(abs))
				return { location: new URL(abs) };
			next = abs;
			continue;
		}
		const text = await res.text();
		const form = /<form method="POST" action="([^"]+)"/.exec(text);
		const id = /name="id" value="([^"]+)"/.exec(text);
		if (res.status === 200 && form && id && next.startsWith(issuer) && login) {
			/* the provider's login page: type the name and password, press Login */
			next = new URL(form[1], next).href;
			method = 'POST';
			body = new URLSearchParams({ id: id[1], username: login.username, password: login.password }).toString();
			login = null; /* once: a wrong password shows the form again */
			continue;
		}
		return { status: res.status, body: text, url: next };
	}
	throw new Error(`more than 12 redirects from ${url}`);
}
