/*
 * signin-browser.test.mjs - the sign-in's browser leg as a person goes through it: headless
 * Chromium (Debian's chromium, driven by playwright-core with executablePath) opens the URL the
 * official SDK client asks its user to open, shows the provider's login form (zitadel's, the
 * tests' Google stand-in, tests/oidc), has the name and password typed and Login pressed,
 * and lands on the MCP client's own loopback callback page, as Claude Code's would; the SDK then
 * finishes with the code and calls a tool. A person who may not sign in sees kode-gopher's page
 * saying why. Screenshots of both pages go to $KG_SCREENSHOT_DIR when it is set.
 *
 * Chromium reaches nothing but this machine: every host name but 127.0.0.1 fails to resolve
 * and every request that is not to loopback goes to a proxy on 127.0.0.1:9, where nothing
 * listens. Run by tests/run.sh (node --test); skipped with a reason when chromium is missing.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';
import test, { after, before } from 'node:test';

import { UnauthorizedError } from '@modelcontextprotocol/sdk/client/auth.js';
import { chromium } from 'playwright-core';

import { callTool, Client, httpServe, StreamableHTTPClientTransport } from './lib.mjs';
import { startProvider } from '../oidc/provider.mjs';

const CHROMIUM = process.env.KG_CHROMIUM || '/usr/bin/chromium';
const T = { timeout: 180_000, skip: fs.existsSync(CHROMIUM) ? false : `no ${CHROMIUM} (packaging/install-deps.sh installs it)` };
const USERS = [
	{ email: 'alice@example.com', password: 'alice-browser-pw' },
	{ email: 'eve@other.test', password: 'eve-browser-pw' },
];

let idp, srv, browser, callback, callbackUrl;
let codes = []; /* what the callback page received */

before(async () => {
	if (T.skip)
		return;
	idp = await startProvider(USERS, ['example.com', 'other.test']);
	srv = await httpServe(['--auth', 'google', '--oidc-issuer', idp.issuer, '--oauth-client-file', idp.clientFile,
		'--allowed-domains', 'example.com', '--workers-min-idle', '1'], { keep: true });
	/* the MCP client's redirect URI, a loopback page like the one Claude Code serves */
	callback = http.createServer((req, res) => {
		const u = new URL(req.url, 'http://127.0.0.1');
		if (u.pathname !== '/callback') { /* the browser's /favicon.ico */
			res.writeHead(404);
			res.end();
			return;
		}
		codes.push({ code: u.searchParams.get('code'), state: u.searchParams.get('state'), iss: u.searchParams.get('iss') });
		res.writeHead(200, { 'content-type': 'text/html' });
		res.end('<!doctype html><title>Signed in</title><p>Signed in. You may close this window.</p>');
	});
	await new Promise((r) => callback.listen(0, '127.0.0.1', r));
	callbackUrl = `http://127.0.0.1:${callback.address().port}/callback`;
	browser = await chromium.launch({
		executablePath: CHROMIUM, headless: true,
		args: ['--no-sandbox', '--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1',
			'--proxy-server=http://127.0.0.1:9', '--proxy-bypass-list=<-loopback>;127.0.0.1',
			'--disable-background-networking', '--disable-component-update', '--no-first-run'],
	});
});

after(async () => {
	await browser?.close();
	callback?.close();
	await srv?.close();
	await idp?.close();
});

/* Person - the SDK's OAuthClientProvider of a client whose user has a browser */
class Person {
	constructor() { this.authUrl = null; }
	get redirectUrl() { return callbackUrl; }
	get clientMetadata() {
		return { client_name: 'browser e2e', redirect_uris: [callbackUrl], token_endpoint_auth_method: 'none',
			grant_types: ['authorization_code', 'refresh_token'], response_types: ['code'] };
	}
	state() { return (this.lastState = `st-${Date.now()}`); }
	clientInformation() { return this.client; }
	saveClientInformation(c) { this.client = c; }
	tokens() { return this.saved; }
	saveTokens(t) { this.saved = t; }
	redirectToAuthorization(url) { this.authUrl = url; }
	saveCodeVerifier(v) { this.verifier = v; }
	codeVerifier() { return this.verifier; }
}

/* openSignIn - the SDK meets the 401 and asks for the browser; the page is at the provider's form */
async function openSignIn(person) {
	const t = new StreamableHTTPClientTransport(new URL(srv.url), { authProvider: person });
	await assert.rejects(new Client({ name: 'browser-e2e', version: '1' }).connect(t), UnauthorizedError);
	const page = await browser.newPage();
	await page.goto(String(person.authUrl));
	await page.waitForSelector('#username');
	assert.ok(page.url().startsWith(idp.issuer), `at the provider's login: ${page.url()}`);
	return { page, transport: t };
}

async function shot(page, name) {
	if (process.env.KG_SCREENSHOT_DIR)
		await page.screenshot({ path: path.join(process.env.KG_SCREENSHOT_DIR, `${name}.png`) });
}

test('signin-browser: a person signs in in Chromium and the client calls a tool', T, async () => {
	const person = new Person();
	const { page, transport } = await openSignIn(person);
	await page.fill('#username', USERS[0].email);
	await page.fill('#password', USERS[0].password);
	codes = [];
	await Promise.all([page.waitForURL(`${callbackUrl}**`), page.click('button[type=submit]')]);
	await page.waitForSelector('text=You may close this window');
	await shot(page, 'signin-done');
	assert.equal(codes.length, 1);
	assert.equal(codes[0].state, person.lastState);
	assert.equal(codes[0].iss, srv.base);
	await page.close();
	await transport.finishAuth(codes[0].code);
	const client = new Client({ name: 'browser-e2e', version: '1' });
	await client.connect(new StreamableHTTPClientTransport(new URL(srv.url), { authProvider: person }));
	const tools = await client.listTools();
	assert.ok(tools.tools.some((t) => t.name === 'execute_go_code'));
	const res = await callTool(client, 'lookup_package_docs', { package: 'strings', symbol: 'Cut' });
	assert.ok(!res.isError, JSON.stringify(res));
	await client.close();
});

test('signin-browser: a person outside the allowed domains sees a page that says why', T, async () => {
	const person = new Person();
	const { page } = await openSignIn(person);
	await page.fill('#username', USERS[1].email);
	await page.fill('#password', USERS[1].password);
	codes = [];
	await Promise.all([page.waitForURL(`${srv.base}/oauth/callback**`), page.click('button[type=submit]')]);
	await page.waitForSelector('h1');
	await shot(page, 'signin-refused');
	assert.equal(await page.textContent('h1'), 'You may not use this server');
	assert.match(await page.textContent('p'), /eve@other\.test may not use this server: it accepts the Google Workspace accounts of example\.com/);
	assert.equal(codes.length, 0, 'the client got no code');
	await page.close();
});
