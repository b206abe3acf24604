/*
 * signin.test.mjs - `serve --http --auth google` against a real OpenID provider (zitadel's,
 * tests/oidc; Google's stand-in through --oidc-issuer), driven by the official TypeScript SDK
 * client's own OAuth support (an OAuthClientProvider and its auth module): discovery from the
 * 401, Dynamic Client Registration and, separately, a Client ID Metadata Document (served over
 * HTTPS by the test), PKCE, the login at the provider (its form filled over plain HTTP, as a
 * browser would), the token, a tool call whose accounting line names the user, refresh with
 * rotation; then what must be refused: bad or unreachable metadata documents (and any on a
 * loopback address without the tests' flag), tokens of another audience, forged ones,
 * a replayed code or refresh token, a PKCE mismatch, redirect URIs that do not match, users
 * outside the allowed domains, a session used by another user, 1000 registrations; per-user
 * quotas, process titles, metrics and accounting lines; and no
 * token, code or secret in any log.
 *
 * One provider and one server for the file. Run by tests/run.sh (node --test).
 */
import assert from 'node:assert/strict';
import { execFile, execFileSync } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import fs from 'node:fs';
import https from 'node:https';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import test, { after, before } from 'node:test';

import { auth, UnauthorizedError } from '@modelcontextprotocol/sdk/client/auth.js';

import {
	BIN, callTool, Client, cmdline, httpRequest, httpServe, sc, sessionWorker, StreamableHTTPClientTransport, waitFor,
} from './lib.mjs';
import { browse, startProvider } from '../oidc/provider.mjs';

const T = { timeout: 180_000 };
const USERS = [
	{ email: 'alice@example.com', password: 'alice-pw-1' },
	{ email: 'bob@example.com', password: 'bob-pw-2' },
	{ email: 'eve@other.test', password: 'eve-pw-3' },          /* a Workspace domain not allowed */
	{ email: 'carol@gmail.test', password: 'carol-pw-4' },      /* consumer account, listed user */
	{ email: 'mallory@gmail.test', password: 'mallory-pw-5' },  /* consumer account, not listed */
	{ email: 'dan@example.com', password: 'dan-pw-6', verified: false },
];
const login = (email) => ({ username: email, password: USERS.find((u) => u.email === email).password });
const CIMD_REDIRECT = 'http://127.0.0.1:53683/callback';
const DOCS = {}; /* path -> the client metadata document served there */
const QUICK = 'package snippet\n\nimport "context"\n\nfunc run(ctx context.Context) (any, error) { return 42, nil }\n';

let idp, srv, acctPath, docs, docsBase;
const secrets = new Set(); /* every code, token and secret the tests saw: no log may show one */

before(async () => {
	idp = await startProvider(USERS, ['example.com', 'other.test']);
	secrets.add(idp.clientSecret);
	const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kg-signin-'));
	acctPath = path.join(dir, 'accounting.jsonl');
	/* the clients' metadata documents, over HTTPS with a certificate made here for 127.0.0.1 */
	execFileSync('openssl', ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes',
		'-keyout', path.join(dir, 'key.pem'), '-out', path.join(dir, 'cert.pem'), '-days', '1', '-subj', '/CN=127.0.0.1',
		'-addext', 'subjectAltName=IP:127.0.0.1'], { stdio: 'ignore' });
	docs = https.createServer({ key: fs.readFileSync(path.join(dir, 'key.pem')), cert: fs.readFileSync(path.join(dir, 'cert.pem')) },
		(req, res) => {
			const doc = DOCS[req.url];
			res.writeHead(doc ? 200 : 404, { 'content-type': 'application/json' });
			res.end(doc ? (typeof doc === 'string' ? doc : JSON.stringify(doc)) : '{}');
		});
	await new Promise((r) => docs.listen(0, '127.0.0.1', r));
	docsBase = `https://127.0.0.1:${docs.address().port}`;
	const cimd = (name, extra = {}) => ({ client_id: `${docsBase}/${name}`, client_name: `cimd ${name}`,
		redirect_uris: [CIMD_REDIRECT], token_endpoint_auth_method: 'none', ...extra });
	Object.assign(DOCS, {
		'/good.json': cimd('good.json'),
		'/other-id.json': cimd('other-id.json', { client_id: `${docsBase}/good.json` }),
		'/secret.json': cimd('secret.json', { token_endpoint_auth_method: 'client_secret_basic', client_secret: 'x' }),
		'/bad-redirect.json': cimd('bad-redirect.json', { redirect_uris: ['http://evil.example/cb'] }),
		'/big.json': JSON.stringify({ ...cimd('big.json'), padding: 'x'.repeat(6000) }),
		'/not-json.json': 'hello',
	});
	srv = await httpServe(['--auth', 'google', '--oidc-issuer', idp.issuer, '--oauth-client-file', idp.clientFile,
		'--allowed-domains', 'example.com', '--allowed-users', 'carol@gmail.test',
		'--oauth-ca-file', path.join(dir, 'cert.pem'), '--client-metadata-loopback',
		'--accounting-log', acctPath, '--workers-min-idle', '1', '--max-sandboxes-per-user', '4'], { keep: true });
});

after(async () => {
	await srv?.close();
	docs?.close();
	await idp?.close();
	if (acctPath)
		fs.rmSync(path.dirname(acctPath), { recursive: true, force: true });
});

/* TestClient - an OAuthClientProvider kept in memory, as an MCP client would implement one;
 * redirectToAuthorization only records the URL, which the test then browses to */
class TestClient {
	constructor(redirect = 'http://127.0.0.1:53682/callback', metadataUrl = undefined) {
		this.redirect = redirect;
		this.clientMetadataUrl = metadataUrl;
		this.authUrl = null;
		this.lastState = null;
	}
	get redirectUrl() { return this.redirect; }
	get clientMetadata() {
		return {
			client_name: 'kode-gopher e2e', redirect_uris: [this.redirect], grant_types: ['authorization_code', 'refresh_token'],
			response_types: ['code'], token_endpoint_auth_method: 'none',
		};
	}
	state() { return (this.lastState = randomBytes(16).toString('hex')); }
	clientInformation() { return this.client; }
	saveClientInformation(c) { this.client = c; }
	tokens() { return this.saved; }
	saveTokens(t) {
		this.saved = t;
		secrets.add(t.access_token);
		if (t.refresh_token)
			secrets.add(t.refresh_token);
	}
	redirectToAuthorization(url) { this.authUrl = url; }
	saveCodeVerifier(v) { this.verifier = v; secrets.add(v); }
	codeVerifier() { return this.verifier; }
}

/* signIn - the whole flow with the SDK: 401, discovery, registration, authorization at the
 * provider as email, token; returns {provider, client, transport} connected */
async function signIn(email, provider = new TestClient(), server = srv) {
	const first = new StreamableHTTPClientTransport(new URL(server.url), { authProvider: provider });
	await assert.rejects(new Client({ name: 'e2e', version: '1' }).connect(first), UnauthorizedError);
	assert.ok(provider.authUrl, 'the SDK was sent to authorize');
	assert.equal(provider.authUrl.origin + provider.authUrl.pathname, `${server.base}/authorize`);
	const back = await browse(provider.authUrl, login(email), { server: server.base, issuer: idp.issuer });
	assert.ok(back.location, `signed in and sent back (${back.status} ${back.body?.slice(0, 300)})`);
	assert.equal(back.location.origin + back.location.pathname, provider.redirect);
	assert.equal(back.location.searchParams.get('state'), provider.lastState);
	assert.equal(back.location.searchParams.get('iss'), server.base, 'RFC 9207 iss');
	const code = back.location.searchParams.get('code');
	secrets.add(code);
	await first.finishAuth(code);
	const transport = new StreamableHTTPClientTransport(new URL(server.url), { authProvider: provider });
	const client = new Client({ name: 'e2e', version: '1' });
	await client.connect(transport);
	return { provider, client, transport, code };
}

/* pkce - a verifier and its S256 challenge */
function pkce() {
	const verifier = randomBytes(32).toString('base64url');
	return { verifier, challenge: createHash('sha256').update(verifier).digest('base64url') };
}

/* register - a client by raw RFC 7591 */
async function register(redirects) {
	const r = await fetch(`${srv.base}/register`, {
		method: 'POST', headers: { 'content-type': 'application/json' },
		body: JSON.stringify({ client_name: 'raw', redirect_uris: redirects, token_endpoint_auth_method: 'none' }),
	});
	return { status: r.status, json: await r.json() };
}

/* authorizeUrl - /authorize with the usual parameters, any of them replaced or dropped (null) */
function authorizeUrl(params) {
	const u = new URL(`${srv.base}/authorize`);
	const all = { response_type: 'code', code_challenge_method: 'S256', state: 'st', resource: srv.url, ...params };
	for (const [k, v] of Object.entries(all))
		if (v !== null)
			u.searchParams.set(k, v);
	return u;
}

/* rawCode - register, authorize and sign in without the SDK; {client_id, redirect, verifier, code} */
async function rawCode(email, redirect = 'http://127.0.0.1:41111/cb', extra = {}) {
	const reg = await register([redirect]);
	assert.equal(reg.status, 201, JSON.stringify(reg.json));
	const p = pkce();
	const back = await browse(authorizeUrl({ client_id: reg.json.client_id, redirect_uri: redirect, code_challenge: p.challenge, ...extra }),
		login(email), { server: srv.base, issuer: idp.issuer });
	assert.ok(back.location, `sent back (${back.status} ${back.body?.slice(0, 300)})`);
	const code = back.location.searchParams.get('code');
	secrets.add(code);
	return { client_id: reg.json.client_id, redirect, verifier: p.verifier, code };
}

/* token - POST /token */
async function token(form) {
	const r = await fetch(`${srv.base}/token`, {
		method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded' },
		body: new URLSearchParams(Object.entries(form).filter(([, v]) => v !== undefined)),
	});
	const json = await r.json();
	if (json.access_token)
		secrets.add(json.access_token);
	if (json.refresh_token)
		secrets.add(json.refresh_token);
	return { status: r.status, json };
}

/* mcpWith - an initialize with this bearer token */
function mcpWith(tok, headers = {}) {
	return httpRequest(srv.port, {
		method: 'POST', path: '/mcp',
		headers: { accept: 'application/json, text/event-stream', ...(tok ? { authorization: `Bearer ${tok}` } : {}), ...headers },
		body: { jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: '2025-11-25', capabilities: {}, clientInfo: { name: 'raw', version: '1' } } },
	});
}

/* logged - the server's stderr shows re, soon (its pipe may lag behind its HTTP answers) */
function logged(server, re) {
	return waitFor(() => re.test(server.stderr), { what: `the log line ${re}` });
}

function acct() {
	return fs.existsSync(acctPath) ? fs.readFileSync(acctPath, 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l)) : [];
}

let alice; /* alice's signed-in SDK session, shared by the tests after the first */

test('signin: without a token /mcp answers 401 pointing at the protected resource metadata', T, async () => {
	const r = await mcpWith(null);
	assert.equal(r.status, 401);
	const prm = `${srv.base}/.well-known/oauth-protected-resource/mcp`;
	assert.equal(r.headers['www-authenticate'], `Bearer resource_metadata="${prm}", scope="mcp"`);
	for (const p of ['/.well-known/oauth-protected-resource/mcp', '/.well-known/oauth-protected-resource']) {
		const m = await (await fetch(srv.base + p)).json();
		assert.equal(m.resource, srv.url, p);
		assert.deepEqual(m.authorization_servers, [srv.base], p);
		assert.deepEqual(m.scopes_supported, ['mcp'], p);
	}
	const as = await (await fetch(`${srv.base}/.well-known/oauth-authorization-server`)).json();
	assert.equal(as.issuer, srv.base);
	assert.deepEqual(as.code_challenge_methods_supported, ['S256']);
	assert.ok(as.registration_endpoint);
	assert.equal(as.authorization_response_iss_parameter_supported, true);
	assert.deepEqual(as.scopes_supported, ['mcp']);
});

test('signin: the SDK signs alice in (DCR, PKCE, the provider\'s login) and her tool call is accounted to her', T, async () => {
	alice = await signIn('alice@example.com');
	assert.equal(alice.provider.tokens().scope, 'mcp', 'the SDK asked for the 401\'s scope and got it');
	const res = await callTool(alice.client, 'execute_go_code', { code: QUICK });
	assert.equal(sc(res)?.result?.kind, 'ok', JSON.stringify(res));
	const line = await waitFor(() => acct().find((l) => l.event === 'call' && l.session === alice.transport.sessionId.slice(0, 8)),
		{ what: 'the accounting line of the call' });
	assert.equal(line.user, 'alice@example.com');
	await logged(srv, /signed in: alice@example\.com/);
});

test('signin: refresh gives new tokens and rotates the refresh token; the old one then revokes the sign-in', T, async () => {
	const p = alice.provider;
	const before1 = { ...p.tokens() };
	assert.equal(await auth(p, { serverUrl: new URL(srv.url) }), 'AUTHORIZED');
	const after1 = p.tokens();
	assert.notEqual(after1.access_token, before1.access_token);
	assert.notEqual(after1.refresh_token, before1.refresh_token, 'rotated');
	assert.equal((await mcpWith(after1.access_token)).status, 200, 'the new access token works');
	/* the replaced refresh token comes back: someone copied it; the whole family ends */
	const replay = await token({ grant_type: 'refresh_token', refresh_token: before1.refresh_token, client_id: p.client.client_id });
	assert.equal(replay.status, 400);
	assert.equal(replay.json.error, 'invalid_grant');
	const next = await token({ grant_type: 'refresh_token', refresh_token: after1.refresh_token, client_id: p.client.client_id });
	assert.equal(next.json.error, 'invalid_grant', 'the current refresh token was revoked with it');
});

test('signin: tokens of another audience, forged or malformed ones are refused with invalid_token', T, async () => {
	/* a real, valid token of the provider for kode-gopher's own OAuth client: not for /mcp */
	const p = pkce();
	const u = new URL('/auth', idp.issuer);
	const cb = 'http://127.0.0.1:1/oauth/callback';
	Object.entries({ client_id: idp.clientId, response_type: 'code', scope: 'openid email', redirect_uri: cb, state: 's',
		nonce: 'n', code_challenge: p.challenge, code_challenge_method: 'S256' }).forEach(([k, v]) => u.searchParams.set(k, v));
	const back = await browse(u, login('alice@example.com'), { server: srv.base, issuer: idp.issuer });
	const r = await fetch(new URL('/oauth/token', idp.issuer), {
		method: 'POST', body: new URLSearchParams({ grant_type: 'authorization_code', code: back.location.searchParams.get('code'),
			redirect_uri: cb, code_verifier: p.verifier }),
		headers: { authorization: `Basic ${Buffer.from(`${idp.clientId}:${idp.clientSecret}`).toString('base64')}` },
	});
	const upstream = await r.json();
	assert.ok(upstream.id_token && upstream.access_token, JSON.stringify(upstream));
	secrets.add(upstream.id_token);
	secrets.add(upstream.access_token);
	const good = alice.provider.tokens().access_token;
	const [h, payload] = good.split('.');
	const claims = JSON.parse(Buffer.from(payload, 'base64url'));
	const forged = `${h}.${Buffer.from(JSON.stringify({ ...claims, sub: 'bob@example.com' })).toString('base64url')}.${good.split('.')[2]}`;
	const none = `${Buffer.from('{"alg":"none","typ":"at+jwt"}').toString('base64url')}.${payload}.`;
	for (const [what, tok] of [['the provider\'s ID token', upstream.id_token], ['the provider\'s access token', upstream.access_token],
		['a forged subject', forged], ['alg none', none], ['no signature', `${h}.${payload}`], ['garbage', 'x'.repeat(5000)]]) {
		const res = await mcpWith(tok);
		assert.equal(res.status, 401, what);
		assert.match(res.headers['www-authenticate'], /error="invalid_token"/, what);
	}
	assert.equal((await mcpWith(good)).status, 200, 'the real token still works');
});

test('signin: whatever scopes a client asks for, the token carries mcp, which /mcp needs (RFC 6749 3.3)', T, async () => {
	const c = await rawCode('bob@example.com', 'http://127.0.0.1:41112/cb', { scope: 'openid profile' });
	const r = await token({ grant_type: 'authorization_code', code: c.code, redirect_uri: c.redirect, client_id: c.client_id,
		code_verifier: c.verifier, resource: srv.url });
	assert.equal(r.status, 200, JSON.stringify(r.json));
	assert.equal(r.json.scope, 'mcp');
	assert.equal((await mcpWith(r.json.access_token)).status, 200);
	const refreshed = await token({ grant_type: 'refresh_token', refresh_token: r.json.refresh_token, client_id: c.client_id });
	assert.equal(refreshed.json.scope, 'mcp');
});

test('signin: a code works once; its replay is refused and revokes what it gave', T, async () => {
	const c = await rawCode('bob@example.com');
	const form = { grant_type: 'authorization_code', code: c.code, redirect_uri: c.redirect, client_id: c.client_id, code_verifier: c.verifier, resource: srv.url };
	const first = await token(form);
	assert.equal(first.status, 200, JSON.stringify(first.json));
	assert.equal(first.json.token_type, 'Bearer');
	assert.ok(first.json.expires_in > 0 && first.json.expires_in <= 3600, 'short-lived');
	const again = await token(form);
	assert.equal(again.status, 400);
	assert.equal(again.json.error, 'invalid_grant');
	const refresh = await token({ grant_type: 'refresh_token', refresh_token: first.json.refresh_token, client_id: c.client_id });
	assert.equal(refresh.json.error, 'invalid_grant', 'the refresh token from the replayed code is revoked');
});

test('signin: PKCE is required and checked; a token for another resource is refused', T, async () => {
	const c = await rawCode('bob@example.com');
	const base = { grant_type: 'authorization_code', code: c.code, redirect_uri: c.redirect, client_id: c.client_id };
	const wrong = await token({ ...base, code_verifier: pkce().verifier });
	assert.equal(wrong.json.error, 'invalid_grant');
	assert.match(wrong.json.error_description, /PKCE/);
	const burnt = await token({ ...base, code_verifier: c.verifier });
	assert.equal(burnt.json.error, 'invalid_grant', 'a failed verifier burns the code');
	const none = await token({ ...base, code_verifier: undefined });
	assert.equal(none.json.error, 'invalid_request');
	const other = await rawCode('bob@example.com');
	const target = await token({ grant_type: 'authorization_code', code: other.code, redirect_uri: other.redirect,
		client_id: other.client_id, code_verifier: other.verifier, resource: 'https://other.example/mcp' });
	assert.equal(target.json.error, 'invalid_target');
	/* at /authorize: no challenge, or the plain method, is sent back as invalid_request */
	const reg = await register(['http://127.0.0.1:41112/cb']);
	for (const params of [{ code_challenge: null }, { code_challenge: pkce().verifier, code_challenge_method: 'plain' }]) {
		const r = await fetch(authorizeUrl({ client_id: reg.json.client_id, redirect_uri: 'http://127.0.0.1:41112/cb', code_challenge: pkce().challenge, ...params }), { redirect: 'manual' });
		assert.equal(r.status, 302);
		const loc = new URL(r.headers.get('location'));
		assert.equal(loc.origin + loc.pathname, 'http://127.0.0.1:41112/cb');
		assert.equal(loc.searchParams.get('error'), 'invalid_request');
		assert.equal(loc.searchParams.get('iss'), srv.base);
	}
	const r = await fetch(authorizeUrl({ client_id: reg.json.client_id, redirect_uri: 'http://127.0.0.1:41112/cb', code_challenge: pkce().challenge, resource: 'https://other.example/mcp' }), { redirect: 'manual' });
	assert.equal(new URL(r.headers.get('location')).searchParams.get('error'), 'invalid_target');
});

test('signin: redirect URIs match exactly (loopback on any port); others get a page, not a redirect', T, async () => {
	for (const bad of ['http://evil.example/cb', 'javascript:alert(1)', 'https://ok.example/cb#frag', 'x'.repeat(600)]) {
		const r = await register([bad]);
		assert.equal(r.status, 400, bad);
		assert.equal(r.json.error, 'invalid_redirect_uri', bad);
	}
	const reg = await register(['http://127.0.0.1/cb', 'https://app.example/cb']);
	assert.equal(reg.status, 201);
	const go = (redirect_uri) => fetch(authorizeUrl({ client_id: reg.json.client_id, redirect_uri, code_challenge: pkce().challenge }), { redirect: 'manual' });
	for (const ok of ['http://127.0.0.1:5555/cb', 'http://127.0.0.1/cb', 'https://app.example/cb']) {
		const r = await go(ok);
		assert.equal(r.status, 302, ok);
		assert.ok(r.headers.get('location').startsWith(idp.issuer), `${ok} goes on to the provider`);
	}
	for (const bad of ['http://127.0.0.1:5555/cb2', 'http://localhost:5555/cb', 'https://app.example/cb/', 'https://app.example:444/cb',
		'http://127.0.0.1:65536/cb', `http://127.0.0.1:${'9'.repeat(600)}/cb`, 'http://127.0.0.1:0/cb', 'http://127.0.0.1:/cb',
		'https://app.example/cb?x=1', 'http://127.0.0.1.evil.example/cb']) {
		const r = await go(bad);
		assert.equal(r.status, 400, bad);
		assert.equal(r.headers.get('location'), null, `${bad}: no redirect to it`);
		assert.match(await r.text(), /Wrong return address/);
	}
	const unknown = await fetch(authorizeUrl({ client_id: 'f'.repeat(32), redirect_uri: 'http://127.0.0.1/cb', code_challenge: pkce().challenge }), { redirect: 'manual' });
	assert.equal(unknown.status, 400);
	assert.match(await unknown.text(), /not registered/);
});

test('signin: people outside the allowed domains and users get a page that says why', T, async () => {
	const reg = await register(['http://127.0.0.1:41113/cb']);
	const go = (email) => browse(authorizeUrl({ client_id: reg.json.client_id, redirect_uri: 'http://127.0.0.1:41113/cb', code_challenge: pkce().challenge }),
		login(email), { server: srv.base, issuer: idp.issuer });
	const eve = await go('eve@other.test');
	assert.equal(eve.status, 403);
	assert.match(eve.body, /eve@other\.test may not use this server/);
	assert.match(eve.body, /example\.com/);
	const mallory = await go('mallory@gmail.test');
	assert.equal(mallory.status, 403);
	assert.match(mallory.body, /not a Workspace account/);
	const dan = await go('dan@example.com');
	assert.equal(dan.status, 403);
	assert.match(dan.body, /not verified/);
	const carol = await go('carol@gmail.test');
	assert.ok(carol.location?.searchParams.get('code'), 'a listed consumer account may sign in');
	secrets.add(carol.location.searchParams.get('code'));
	await logged(srv, /sign-in refused for eve@other\.test/);
});

test('signin: a session answers only the user who opened it', T, async () => {
	const sid = alice.transport.sessionId;
	const c = await rawCode('bob@example.com');
	const bob = await token({ grant_type: 'authorization_code', code: c.code, redirect_uri: c.redirect, client_id: c.client_id, code_verifier: c.verifier });
	const ping = (tok) => httpRequest(srv.port, {
		method: 'POST', path: '/mcp', body: { jsonrpc: '2.0', id: 9, method: 'ping' },
		headers: { accept: 'application/json, text/event-stream', authorization: `Bearer ${tok}`, 'mcp-session-id': sid, 'mcp-protocol-version': '2025-11-25' },
	});
	assert.equal((await ping(bob.json.access_token)).status, 404, 'bob cannot use alice\'s session');
	const del = await httpRequest(srv.port, { method: 'DELETE', path: '/mcp', headers: { authorization: `Bearer ${bob.json.access_token}`, 'mcp-session-id': sid } });
	assert.equal(del.status, 404, 'nor end it');
	await alice.client.ping();
	const own = await mcpWith(bob.json.access_token);
	assert.equal(own.status, 200);
	assert.ok(own.headers['mcp-session-id']);
});

test('signin: 1000 registrations stay bounded, and clients already used keep working', T, async () => {
	const c = await rawCode('bob@example.com');
	const first = await token({ grant_type: 'authorization_code', code: c.code, redirect_uri: c.redirect, client_id: c.client_id, code_verifier: c.verifier });
	assert.equal(first.status, 200);
	let ok = 0;
	const early = [];
	for (let i = 0; i < 1000; i++) {
		const r = await register([`http://127.0.0.1/cb${i}`]);
		if (r.status === 201) {
			ok++;
			if (i < 5)
				early.push(r.json.client_id);
		} else {
			assert.equal(r.json.error, 'temporarily_unavailable');
		}
	}
	assert.ok(ok >= 256, `${ok} registrations answered`);
	const m = await (await fetch(`${srv.base}/metrics`)).text();
	assert.equal(Number(/^kode_gopher_oauth_clients (\d+)$/m.exec(m)?.[1]), 256, 'the registry is full, not over');
	assert.ok(Number(/^kode_gopher_oauth_registrations_total (\d+)$/m.exec(m)?.[1]) >= 1000);
	assert.ok(Number(/^kode_gopher_signins_total\{result="ok"\} (\d+)$/m.exec(m)?.[1]) >= 3);
	assert.ok(Number(/^kode_gopher_signins_total\{result="refused"\} (\d+)$/m.exec(m)?.[1]) >= 3);
	assert.ok(Number(/^kode_gopher_bearer_refused_total (\d+)$/m.exec(m)?.[1]) >= 6);
	/* the oldest unused registrations made room: the first of the flood is gone */
	const gone = await token({ grant_type: 'refresh_token', refresh_token: 'x'.repeat(64), client_id: early[0] });
	assert.equal(gone.json.error, 'invalid_client');
	const refreshed = await token({ grant_type: 'refresh_token', refresh_token: first.json.refresh_token, client_id: c.client_id });
	assert.equal(refreshed.status, 200, `a client someone signed in through survives the flood: ${JSON.stringify(refreshed.json)}`);
	await alice.client.ping();
});

test('signin: a client known by its metadata document (CIMD) signs in without registering', T, async () => {
	const url = `${docsBase}/good.json`;
	const carol = await signIn('carol@gmail.test', new TestClient(CIMD_REDIRECT, url));
	assert.equal(carol.provider.client.client_id, url, 'the URL is the client_id');
	await carol.client.ping();
	await logged(srv, /client metadata document read: https:\/\/127\.0\.0\.1:\d+\/good\.json "cimd good\.json"/);
	assert.equal(await auth(carol.provider, { serverUrl: new URL(srv.url) }), 'AUTHORIZED', 'and refreshes');
	await carol.transport.close();
});

test('signin: unknown, oversized or inconsistent client metadata documents are refused', T, async () => {
	const go = (doc, redirect = CIMD_REDIRECT) => fetch(authorizeUrl({ client_id: `${docsBase}/${doc}`, redirect_uri: redirect,
		code_challenge: pkce().challenge }), { redirect: 'manual' });
	for (const [doc, why] of [['missing.json', /could not be read/], ['big.json', /larger than 5 KiB/],
		['other-id.json', /another client_id/], ['secret.json', /client secret/], ['bad-redirect.json', /redirect URI/],
		['not-json.json', /another client_id/]]) {
		const r = await go(doc);
		assert.equal(r.status, 400, doc);
		assert.equal(r.headers.get('location'), null, doc);
		assert.match(await r.text(), why, doc);
	}
	const wrong = await go('good.json', 'http://127.0.0.1:53683/elsewhere');
	assert.equal(wrong.status, 400);
	assert.match(await wrong.text(), /Wrong return address/);
	for (const id of ['http://127.0.0.1/x.json', 'https://127.0.0.1/', 'https://user@127.0.0.1/x.json', `${docsBase}/../good.json`]) {
		const r = await fetch(authorizeUrl({ client_id: id, redirect_uri: CIMD_REDIRECT, code_challenge: pkce().challenge }), { redirect: 'manual' });
		assert.equal(r.status, 400, id);
	}
});

test('signin: without --client-metadata-loopback a metadata document on this machine is never fetched (SSRF)', T, async () => {
	const other = await httpServe(['--auth', 'google', '--oidc-issuer', idp.issuer, '--oauth-client-file', idp.clientFile,
		'--allowed-domains', 'example.com', '--oauth-ca-file', path.join(path.dirname(acctPath), 'cert.pem'),
		'--workers-min-idle', '0']);
	try {
		let hits = 0;
		const count = () => { hits++; };
		docs.on('request', count);
		const r = await fetch(new URL(authorizeUrl({ client_id: `${docsBase}/good.json`, redirect_uri: CIMD_REDIRECT,
			code_challenge: pkce().challenge }).search, `${other.base}/authorize`), { redirect: 'manual' });
		docs.off('request', count);
		assert.equal(r.status, 400);
		assert.match(await r.text(), /could not be read/);
		assert.equal(hits, 0, 'no request reached the loopback server');
		await logged(other, /refused to fetch from a non-public address/);
	} finally {
		await other.close();
	}
});

test('signin: each user has their own quota, process titles, metrics and accounting', T, async () => {
	const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kg-signin-quota-'));
	const acctFile = path.join(dir, 'accounting.jsonl');
	const one = await httpServe(['--auth', 'google', '--oidc-issuer', idp.issuer, '--oauth-client-file', idp.clientFile,
		'--allowed-domains', 'example.com', '--max-sandboxes-per-user', '1', '--workers-min-idle', '2',
		'--accounting-log', acctFile]);
	try {
		const a1 = await signIn('alice@example.com', new TestClient(), one);
		assert.equal(sc(await callTool(a1.client, 'execute_go_code', { code: QUICK }))?.result?.kind, 'ok');
		/* alice's second session is over her limit of 1; bob's first is not */
		const a2 = await signIn('alice@example.com', new TestClient('http://127.0.0.1:53684/callback'), one);
		const refused = await callTool(a2.client, 'execute_go_code', { code: QUICK });
		assert.equal(refused.isError, true);
		assert.match(JSON.stringify(refused), /too many open sandboxes for this user/);
		const b1 = await signIn('bob@example.com', new TestClient('http://127.0.0.1:53685/callback'), one);
		assert.equal(sc(await callTool(b1.client, 'execute_go_code', { code: QUICK }))?.result?.kind, 'ok', 'bob is not counted as alice');
		const title = (t) => cmdline(sessionWorker(one.pid, t.transport.sessionId));
		assert.match(title(a1), /^kode-gopher: worker alice@example\.com s=/);
		assert.match(title(b1), /^kode-gopher: worker bob@example\.com s=/);
		const m = await (await fetch(`${one.base}/metrics`)).text();
		assert.match(m, /kode_gopher_sandboxes\{user="alice@example\.com"\} 1/);
		assert.match(m, /kode_gopher_sandboxes\{user="bob@example\.com"\} 1/);
		const sid = a1.transport.sessionId;
		await a1.transport.terminateSession();
		const lines = () => fs.readFileSync(acctFile, 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l));
		const end = await waitFor(() => lines().find((l) => l.event === 'session_end' && l.session === sid.slice(0, 8)),
			{ what: 'the session_end line' });
		assert.equal(end.user, 'alice@example.com');
		assert.deepEqual(new Set(lines().filter((l) => l.event === 'call').map((l) => l.user)), new Set(['alice@example.com', 'bob@example.com']));
		for (const s of [a2, b1]) {
			secrets.add(s.provider.tokens().access_token);
			secrets.add(s.provider.tokens().refresh_token);
		}
		const log = one.stderr + fs.readFileSync(acctFile, 'utf8');
		for (const t of [a1, a2, b1])
			assert.ok(!log.includes(t.provider.tokens().access_token) && !log.includes(t.code), 'no token in this server\'s log');
	} finally {
		await one.close();
		fs.rmSync(dir, { recursive: true, force: true });
	}
});

/* what a program sees through the metadata emulator: the token answer and the email */
const TOKEN_SNIPPET = (query = '') => `package snippet

import (
	"context"
	"encoding/json"

	"cloud.google.com/go/compute/metadata"
)

func run(ctx context.Context) (any, error) {
	body, err := metadata.GetWithContext(ctx, "instance/service-accounts/default/token${query}")
	if err != nil {
		return nil, err
	}
	var tok struct {
		AccessToken string \`json:"access_token"\`
		ExpiresIn   int    \`json:"expires_in"\`
	}
	if err := json.Unmarshal([]byte(body), &tok); err != nil {
		return nil, err
	}
	email, err := metadata.EmailWithContext(ctx, "default")
	return map[string]any{"token": tok.AccessToken, "expires_in": tok.ExpiresIn, "email": email}, err
}
`;
const STORAGE_RO = 'https://www.googleapis.com/auth/devstorage.read_only';

test('signin: --credentials user: a program gets its own signed-in user\'s Google token from the master; a scope not granted and a revoked grant get a sentence', T, async () => {
	const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kg-usertok-'));
	const acctFile = path.join(dir, 'acct.jsonl');
	const one = await httpServe(['--auth', 'google', '--oidc-issuer', idp.issuer, '--oauth-client-file', idp.clientFile,
		'--allowed-domains', 'example.com', '--credentials', 'user', '--scopes', STORAGE_RO, '--workers-min-idle', '2',
		'--accounting-log', acctFile]);
	const conf = await (await fetch(`${idp.issuer}/.well-known/openid-configuration`)).json();
	/* whose token is it? the provider's own userinfo endpoint says */
	const owner = async (tok) => {
		const r = await fetch(conf.userinfo_endpoint, { headers: { authorization: `Bearer ${tok}` } });
		return r.status === 200 ? (await r.json()).email : `HTTP ${r.status}`;
	};
	const tokens = [];
	const run = async (who, query) => {
		const r = sc(await callTool(who.client, 'execute_go_code', { code: TOKEN_SNIPPET(query) }));
		if (r?.result?.kind === 'ok')
			tokens.push(r.result.value.token);
		return r;
	};
	try {
		const a = await signIn('alice@example.com', new TestClient('http://127.0.0.1:53686/callback'), one);
		const b = await signIn('bob@example.com', new TestClient('http://127.0.0.1:53687/callback'), one);
		const ra = await run(a);
		assert.equal(ra?.result?.kind, 'ok', JSON.stringify(ra));
		assert.equal(ra.result.value.email, 'alice@example.com');
		assert.ok(ra.result.value.expires_in > 0);
		assert.equal(await owner(ra.result.value.token), 'alice@example.com', 'the token is alice\'s, minted by the provider');
		const rb = await run(b);
		assert.equal(rb?.result?.kind, 'ok', JSON.stringify(rb));
		assert.equal(rb.result.value.email, 'bob@example.com');
		assert.equal(await owner(rb.result.value.token), 'bob@example.com', 'another session\'s user gets their own');
		assert.notEqual(ra.result.value.token, rb.result.value.token);
		/* the token the MCP client sent is not what the program got */
		assert.notEqual(ra.result.value.token, a.provider.tokens().access_token);
		/* a scope the user did not grant (only --scopes was asked for): refused with a sentence */
		const rs = await run(a, '?scopes=https://www.googleapis.com/auth/bigquery');
		assert.equal(rs?.result?.kind, 'error', JSON.stringify(rs));
		assert.match(rs.result.message, /does not include the scope https:\/\/www\.googleapis\.com\/auth\/bigquery/);
		assert.match(rs.result.message, /--scopes/);
		/* alice removes the app's access at the provider: her program is told to sign in again */
		assert.equal((await fetch(`${idp.issuer}/test/revoke?user=alice@example.com`, { method: 'POST' })).status, 204);
		const rr = await run(a);
		assert.equal(rr?.result?.kind, 'error', JSON.stringify(rr));
		assert.match(rr.result.message, /expired or was revoked/);
		assert.match(rr.result.message, /Sign in to the server again/);
		await waitFor(() => one.stderr.includes('the Google grant of alice@example.com was revoked'), { what: 'the revocation log line' });
		/* ... and her MCP client's token no longer opens /mcp, so it asks her to sign in */
		const r401 = await httpRequest(one.port, {
			method: 'POST', path: '/mcp',
			headers: { accept: 'application/json, text/event-stream', authorization: `Bearer ${a.provider.tokens().access_token}` },
			body: { jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: '2025-11-25', capabilities: {}, clientInfo: { name: 'raw', version: '1' } } },
		});
		assert.equal(r401.status, 401);
		const refreshed = await fetch(`${one.base}/token`, {
			method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded' },
			body: new URLSearchParams({ grant_type: 'refresh_token', refresh_token: a.provider.tokens().refresh_token,
				client_id: a.provider.clientInformation().client_id }),
		});
		assert.equal(refreshed.status, 400, 'her refresh token is gone too');
		/* bob is not touched */
		const rb2 = await run(b);
		assert.equal(rb2?.result?.kind, 'ok', JSON.stringify(rb2));
		assert.equal(await owner(rb2.result.value.token), 'bob@example.com');
		/* she signs in again, and her programs have her token again */
		const a2 = await signIn('alice@example.com', new TestClient('http://127.0.0.1:53688/callback'), one);
		const ra2 = await run(a2);
		assert.equal(ra2?.result?.kind, 'ok', JSON.stringify(ra2));
		assert.equal(await owner(ra2.result.value.token), 'alice@example.com');
		/* no Google token, refresh token (zitadel's are UUIDs) or secret in the server's log */
		const log = one.stderr + fs.readFileSync(acctFile, 'utf8');
		assert.ok(tokens.length >= 4);
		for (const t of tokens)
			assert.ok(!log.includes(t), 'a Google access token is in the log');
		assert.doesNotMatch(log, /[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/, 'something like a refresh token is in the log');
		assert.ok(!log.includes(idp.clientSecret));
		for (const s of [a, b, a2])
			assert.ok(!log.includes(s.provider.tokens().access_token) && !log.includes(s.code));
	} finally {
		await one.close();
		fs.rmSync(dir, { recursive: true, force: true });
	}
});

/* freePort - a loopback port nobody listens on now (a server restarted on it keeps its URL) */
function freePort() {
	return new Promise((resolve, reject) => {
		const l = net.createServer();
		l.on('error', reject);
		l.listen(0, '127.0.0.1', () => {
			const { port } = l.address();
			l.close(() => resolve(port));
		});
	});
}

/* serveFails - serve with these arguments must not start; resolves its exit code and stderr */
function serveFails(args) {
	return new Promise((resolve) => execFile(BIN, ['serve', '--log-level', 'info', ...args], { timeout: 30_000 },
		(err, stdout, stderr) => resolve({ code: err?.code ?? 0, stderr })));
}

test('signin: --token-store keeps sign-ins and Google grants across a restart, encrypted; a wrong key, a changed byte, an open or bad key file stop the start with a sentence and leave the file as it is', T, async () => {
	const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kg-tstore-'));
	const store = path.join(dir, 'tokens.kgts'), key = path.join(dir, 'key');
	fs.writeFileSync(key, `${randomBytes(32).toString('hex')}\n`, { mode: 0o600 });
	const port = await freePort();
	const args = ({ k = key, st = store, p = port } = {}) => ['--http', `127.0.0.1:${p}`, '--auth', 'google',
		'--oidc-issuer', idp.issuer, '--oauth-client-file', idp.clientFile, '--allowed-domains', 'example.com',
		'--credentials', 'user', '--scopes', STORAGE_RO, '--workers-min-idle', '1',
		'--token-store', st, '--token-store-key-file', k];
	const conf = await (await fetch(`${idp.issuer}/.well-known/openid-configuration`)).json();
	const owner = async (tok) => {
		const r = await fetch(conf.userinfo_endpoint, { headers: { authorization: `Bearer ${tok}` } });
		return r.status === 200 ? (await r.json()).email : `HTTP ${r.status}`;
	};
	let one = await httpServe(args());
	try {
		assert.match(one.stderr, /token store \S+tokens\.kgts: new/);
		const a = await signIn('alice@example.com', new TestClient('http://127.0.0.1:53691/callback'), one);
		const r1 = sc(await callTool(a.client, 'execute_go_code', { code: TOKEN_SNIPPET() }));
		assert.equal(r1?.result?.kind, 'ok', JSON.stringify(r1));
		await a.transport.close();
		/* the file: its owner's only, and nothing in it readable */
		assert.equal(fs.statSync(store).mode & 0o777, 0o600);
		const raw = fs.readFileSync(store);
		for (const s of ['alice@example.com', 'example.com', a.provider.tokens().refresh_token, a.provider.clientInformation().client_id,
			r1.result.value.token, idp.issuer])
			assert.ok(!raw.includes(Buffer.from(s)), `the store shows ${s.slice(0, 12)}…`);
		assert.doesNotMatch(raw.toString('latin1'), /[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}/, 'something like a refresh token is in the store');
		assert.deepEqual([...fs.readdirSync(dir)].sort(), ['key', 'tokens.kgts'], 'no temporary file is left');
		await one.close();

		/* restarted on the same URL: alice's client goes on without signing in again */
		one = await httpServe(args());
		assert.match(one.stderr, /token store \S+: \d+ entries read/);
		const t2 = new StreamableHTTPClientTransport(new URL(one.url), { authProvider: a.provider });
		const c2 = new Client({ name: 'e2e', version: '1' });
		await c2.connect(t2); /* her access token of before the restart is still good */
		const r2 = sc(await callTool(c2, 'execute_go_code', { code: TOKEN_SNIPPET() }));
		assert.equal(r2?.result?.kind, 'ok', JSON.stringify(r2));
		assert.equal(r2.result.value.email, 'alice@example.com');
		assert.equal(await owner(r2.result.value.token), 'alice@example.com', 'minted from her kept Google grant');
		await t2.close();
		const rf = await fetch(`${one.base}/token`, {
			method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded' },
			body: new URLSearchParams({ grant_type: 'refresh_token', refresh_token: a.provider.tokens().refresh_token,
				client_id: a.provider.clientInformation().client_id }),
		});
		const rfj = await rf.json();
		assert.equal(rf.status, 200, `her refresh token was kept: ${JSON.stringify(rfj)}`);
		secrets.add(rfj.access_token);
		secrets.add(rfj.refresh_token);
		await one.close();
		assert.ok(!one.stderr.includes(rfj.refresh_token) && !one.stderr.includes(a.provider.tokens().access_token));

		/* what must stop the start, each leaving the file as it was */
		const kept = fs.readFileSync(store);
		const key2 = path.join(dir, 'key2');
		fs.writeFileSync(key2, randomBytes(32).toString('base64'), { mode: 0o600 });
		let r = await serveFails(args({ k: key2 }));
		assert.notEqual(r.code, 0);
		assert.match(r.stderr, /does not decrypt with the key in \S+key2: it was written with another key, or changed since/);
		assert.ok(fs.readFileSync(store).equals(kept), 'a wrong key leaves the store alone');
		const changed = Buffer.from(kept);
		changed[changed.length - 40] ^= 1;
		fs.writeFileSync(store, changed);
		r = await serveFails(args());
		assert.match(r.stderr, /does not decrypt with the key/);
		assert.ok(fs.readFileSync(store).equals(changed));
		fs.writeFileSync(store, 'not a store\n');
		r = await serveFails(args());
		assert.match(r.stderr, /is not a kode-gopher token store; name another file/);
		fs.writeFileSync(store, kept);
		fs.chmodSync(key, 0o644);
		r = await serveFails(args());
		assert.match(r.stderr, /can be read by every user of this machine \(mode 0644\): make it readable by this server's user only/);
		fs.chmodSync(key, 0o600);
		fs.writeFileSync(key2, 'hunter2\n', { mode: 0o600 });
		r = await serveFails(args({ k: key2 }));
		assert.match(r.stderr, /does not hold a key: it wants 32 random bytes/);
		fs.symlinkSync(store, path.join(dir, 'link.kgts'));
		r = await serveFails(args({ st: path.join(dir, 'link.kgts') }));
		assert.match(r.stderr, /cannot be read: it is a symbolic link/);
		r = await serveFails(['--http', '127.0.0.1:0', '--auth', 'google', '--oidc-issuer', idp.issuer, '--oauth-client-file', idp.clientFile,
			'--allowed-domains', 'example.com', '--token-store', store]);
		assert.equal(r.code, 2);
		assert.match(r.stderr, /--token-store FILE and --token-store-key-file KEY go together/);
		r = await serveFails(['--http', '127.0.0.1:0', '--token-store', store, '--token-store-key-file', key]);
		assert.equal(r.code, 2);
		assert.match(r.stderr, /--token-store keeps sign-ins across restarts: it needs serve --http --auth google/);
		assert.ok(fs.readFileSync(store).equals(kept));

		/* a store of another server (here: another URL) signs nobody in there */
		const other = await httpServe(args({ p: await freePort() }));
		try {
			assert.match(other.stderr, /was written for another server .* nobody is signed in/);
			const old = await httpRequest(other.port, {
				method: 'POST', path: '/mcp',
				headers: { accept: 'application/json, text/event-stream', authorization: `Bearer ${rfj.access_token}` },
				body: { jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: '2025-11-25', capabilities: {}, clientInfo: { name: 'raw', version: '1' } } },
			});
			assert.equal(old.status, 401);
		} finally {
			await other.close();
		}
	} finally {
		await one.close();
		fs.rmSync(dir, { recursive: true, force: true });
	}
});

test('signin: --credentials user without --auth google is refused at start-up', T, async () => {
	const r = await new Promise((resolve) => execFile(BIN, ['serve', '--http', '127.0.0.1:0',
		'--credentials', 'user'], { timeout: 20_000 }, (err, stdout, stderr) => resolve({ code: err?.code ?? 0, stderr })));
	assert.equal(r.code, 2);
	assert.match(r.stderr, /--credentials user runs programs as the signed-in Google user: it needs serve --http --auth google/);
});

test('signin: --tls-cert/--tls-key serve HTTPS, and an MCP client signs in over it', T, async () => {
	const dir = path.dirname(acctPath);
	const tls = await httpServe(['--auth', 'google', '--oidc-issuer', idp.issuer, '--oauth-client-file', idp.clientFile,
		'--allowed-domains', 'example.com', '--tls-cert', path.join(dir, 'cert.pem'), '--tls-key', path.join(dir, 'key.pem'),
		'--workers-min-idle', '1']);
	try {
		const base = `https://127.0.0.1:${tls.port}`;
		assert.match(tls.stderr, new RegExp(`serving MCP on ${base}/mcp`));
		const ca = fs.readFileSync(path.join(dir, 'cert.pem'));
		const get = (p) => new Promise((resolve, reject) => {
			https.get(`${base}${p}`, { ca }, (res) => {
				let b = '';
				res.on('data', (d) => { b += d; });
				res.on('end', () => resolve({ status: res.statusCode, body: b }));
			}).on('error', reject);
		});
		assert.equal((await get('/healthz')).body, 'ok\n');
		assert.equal(JSON.parse((await get('/.well-known/oauth-protected-resource/mcp')).body).resource, `${base}/mcp`);
		/* plain HTTP to the HTTPS port gets no HTTP answer */
		await assert.rejects(fetch(`http://127.0.0.1:${tls.port}/healthz`));
		const out = await new Promise((resolve, reject) => execFile(process.execPath,
			[path.join(path.dirname(new URL(import.meta.url).pathname), 'signin-client.mjs'), `${base}/mcp`, idp.issuer,
				'alice@example.com', login('alice@example.com').password],
			{ env: { ...process.env, NODE_EXTRA_CA_CERTS: path.join(dir, 'cert.pem') }, timeout: 60_000 },
			(err, stdout, stderr) => (err ? reject(new Error(`${err.message}\n${stderr}`)) : resolve(stdout))));
		const r = JSON.parse(out);
		assert.ok(r.tools.includes('execute_go_code'), out);
		await waitFor(() => tls.stderr.includes('signed in: alice@example.com'), { what: 'the sign-in log line' });
	} finally {
		await tls.close();
	}
});

test('signin: no token, code or secret in any log or accounting line', T, async () => {
	const all = [srv.stderr, fs.existsSync(acctPath) ? fs.readFileSync(acctPath, 'utf8') : ''].join('\n');
	assert.ok(all.length > 1000, 'there is something to search');
	assert.ok(secrets.size > 20, `${secrets.size} secrets seen`);
	for (const s of secrets)
		assert.ok(!all.includes(s), `a secret (${String(s).slice(0, 12)}…) is in the log`);
});
