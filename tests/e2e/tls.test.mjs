/*
 * tls.test.mjs - `serve --http --tls-cert --tls-key` reloads its certificate on SIGHUP: the test
 * swaps the files (certificates made here by openssl, for 127.0.0.1), sends SIGHUP, and a new
 * connection sees the new certificate while the MCP session opened before (and its kept-alive
 * connection) keeps working; a pair that does not fit together, or files that are not PEM, are
 * refused on reload and the server keeps serving the last good pair; SIGHUP does not stop it.
 *
 * The client is node's https module with both certificates as its CAs, so each connection can
 * say which one the server presented. Run by tests/run.sh (node --test).
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import https from 'node:https';
import os from 'node:os';
import path from 'node:path';
import test, { after, before } from 'node:test';

import { httpServe, waitFor } from './lib.mjs';

const T = { timeout: 120_000 };
let dir, srv;
const pem = {};

/* mkcert - a self-signed EC certificate for 127.0.0.1 named cn */
function mkcert(cn) {
	const key = path.join(dir, `${cn}.key`), cert = path.join(dir, `${cn}.crt`);
	execFileSync('openssl', ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes',
		'-keyout', key, '-out', cert, '-days', '1', '-subj', `/CN=${cn}`, '-addext', 'subjectAltName=IP:127.0.0.1'],
	{ stdio: 'ignore' });
	pem[cn] = { key: fs.readFileSync(key), cert: fs.readFileSync(cert) };
}

/* install - put a pair where the server reads it, each file replaced at once (rename) */
function install(cert, key) {
	for (const [name, data] of [['server.crt', cert], ['server.key', key]]) {
		fs.writeFileSync(path.join(dir, `${name}.new`), data, { mode: 0o600 });
		fs.renameSync(path.join(dir, `${name}.new`), path.join(dir, name));
	}
}

/* post - one MCP POST over agent; resolves {status, headers, body, cn (of the server's certificate)} */
function post(agent, body, headers = {}) {
	return new Promise((resolve, reject) => {
		const req = https.request({
			host: '127.0.0.1', port: srv.port, path: '/mcp', method: 'POST', agent,
			ca: [pem.first.cert, pem.second.cert],
			headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', ...headers },
		}, (res) => {
			const cn = res.socket.getPeerCertificate().subject?.CN;
			let b = '';
			res.on('data', (d) => { b += d; });
			res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, body: b, cn }));
		});
		req.on('error', reject);
		req.end(JSON.stringify(body));
	});
}

const INIT = { jsonrpc: '2.0', id: 1, method: 'initialize',
	params: { protocolVersion: '2025-11-25', capabilities: {}, clientInfo: { name: 'tls', version: '1' } } };
const LIST = (id) => ({ jsonrpc: '2.0', id, method: 'tools/list' });

before(async () => {
	dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kg-tls-'));
	mkcert('first');
	mkcert('second');
	install(pem.first.cert, pem.first.key);
	srv = await httpServe(['--tls-cert', path.join(dir, 'server.crt'), '--tls-key', path.join(dir, 'server.key'),
		'--workers-min-idle', '1'], { keep: true });
});

after(async () => {
	await srv?.close();
	fs.rmSync(dir, { recursive: true, force: true });
});

/* hup - SIGHUP, then wait for the log line that says how it went (the n-th of its kind) */
async function hup(re, n) {
	process.kill(srv.pid, 'SIGHUP');
	await waitFor(() => (srv.stderr.match(new RegExp(re.source, 'g')) || []).length >= n, { timeout: 20_000, what: `${re}` });
}

test('tls: SIGHUP reloads the certificate for new connections; the open session and its connection keep working', T, async () => {
	const old = new https.Agent({ keepAlive: true, maxSockets: 1 });
	const init = await post(old, INIT);
	assert.equal(init.status, 200, init.body);
	assert.equal(init.cn, 'first');
	const sid = init.headers['mcp-session-id'];
	assert.ok(sid);
	await post(old, { jsonrpc: '2.0', method: 'notifications/initialized' }, { 'mcp-session-id': sid, 'mcp-protocol-version': '2025-11-25' });

	install(pem.second.cert, pem.second.key);
	await hup(/reloaded the TLS certificate/, 1);

	const fresh = new https.Agent({ keepAlive: false });
	const r = await post(fresh, LIST(2), { 'mcp-session-id': sid, 'mcp-protocol-version': '2025-11-25' });
	assert.equal(r.cn, 'second', 'a new connection gets the new certificate');
	assert.equal(r.status, 200, r.body);
	assert.match(r.body, /execute_go_code/, 'the session opened before the reload goes on');
	/* the connection opened before the reload is still the first certificate's, and works */
	const k = await post(old, LIST(3), { 'mcp-session-id': sid, 'mcp-protocol-version': '2025-11-25' });
	assert.equal(k.status, 200, k.body);
	assert.equal(k.cn, 'first');
	assert.match(k.body, /execute_go_code/);
	old.destroy();
});

test('tls: a reload of a key that is not the certificate\'s, or of files that are not PEM, keeps the last good pair', T, async () => {
	const serving = (await post(new https.Agent({ keepAlive: false }), INIT)).cn;
	for (const [cert, key, why] of [
		[pem.first.cert, pem.second.key, /--tls-key is not the private key of --tls-cert's first certificate/],
		[Buffer.from('not a certificate\n'), pem.first.key, /--tls-cert wants a PEM certificate chain/],
		[pem.first.cert, Buffer.from('-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n'), /--tls-key is not an unencrypted PEM private key/],
	]) {
		const before = (srv.stderr.match(/the TLS certificate was not reloaded/g) || []).length;
		install(cert, key);
		await hup(/the TLS certificate was not reloaded/, before + 1);
		assert.match(srv.stderr, why);
		const r = await post(new https.Agent({ keepAlive: false }), INIT);
		assert.equal(r.status, 200);
		assert.equal(r.cn, serving, 'still the last pair that loaded');
	}
	assert.equal(await Promise.race([srv.exited.then(() => 'exited'), new Promise((r) => setImmediate(() => r('serving')))]), 'serving',
		'SIGHUP does not stop the server');
	/* a good pair again: taken */
	const other = serving === 'first' ? 'second' : 'first';
	install(pem[other].cert, pem[other].key);
	await hup(/reloaded the TLS certificate/, (srv.stderr.match(/reloaded the TLS certificate/g) || []).length + 1);
	const r = await post(new https.Agent({ keepAlive: false }), INIT);
	assert.equal(r.cn, other);
});
