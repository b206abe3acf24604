/*
 * credentials.test.mjs - Google credentials inside the sandbox (docs/credentials.md), end to
 * end: the real `kode-gopher serve`, its worker minting tokens, the agent's metadata-server
 * emulator, and real Google Cloud Go code in the sandbox (cloud.google.com/go/compute/metadata,
 * golang.org/x/oauth2/google, cloud.google.com/go/auth/credentials, cloud.google.com/go/storage).
 *
 * Stand-ins for Google, all on this machine over HTTPS with a certificate made here by openssl
 * (the worker trusts it through SSL_CERT_FILE, the Go programs through an embedded pool):
 *   - the token endpoint: oauth2-mock-server (npm) for the refresh-token grant; the JWT-bearer
 *     grant of a service-account key (made here by openssl) is checked here and its tokens
 *     issued by the same mock;
 *   - IAM Credentials generateAccessToken / generateIdToken, which insist on a bearer the mock
 *     issued;
 *   - a Cloud Storage bucket endpoint that records the bearer it receives;
 *   - a host metadata server (plain HTTP, as on GCE) for --credentials server.
 * The last test searches serve's logs and every result for the test's secrets.
 * Run by tests/run.sh (node --test); each test is a flat top-level test().
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import crypto, { randomUUID } from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import os from 'node:os';
import path from 'node:path';
import test, { after, before } from 'node:test';

import { OAuth2Server } from 'oauth2-mock-server';

import { BIN, callTool, connect, sandboxEntries, sc, text } from './lib.mjs';

const T = { timeout: 300_000 };
const CLOUD = 'https://www.googleapis.com/auth/cloud-platform';

/* the secrets no log line or result may ever show */
const CLIENT_ID = `kg-client-${randomUUID()}.apps.googleusercontent.com`;
const CLIENT_SECRET = `kg-client-secret-${randomUUID()}`;
const REFRESH = `1//kg-refresh-${randomUUID()}`;
const USER_EMAIL = 'alice@example.com';
const SA_EMAIL = 'runner@kg-sa-project.iam.gserviceaccount.com';
const SA_KEY_ID = `kid-${randomUUID()}`;
const TARGET_SA = 'target@kg-target.iam.gserviceaccount.com';

const work = fs.mkdtempSync(path.join(os.tmpdir(), 'kg-creds-'));
const minted = new Set();  /* every access and ID token handed out by the stand-ins */
const seenResults = [];    /* every tool result's text */
const logs = [];           /* every session, to read its stderr at the end */
const jwtScopes = [];      /* the scope claim of each JWT-bearer grant */
const storageBearers = [];
const iamCalls = [];
const hostScopes = [];
let refreshGrants = 0;
let certPem, saKeyPem, tokenServer, hostServer, mock, base;

/* sha - what the Go side reports instead of a token */
const sha = (s) => crypto.createHash('sha256').update(s).digest('hex');

/* body - a request body as text */
const body = (req) => new Promise((resolve) => {
	let b = '';
	req.on('data', (d) => { b += d; });
	req.on('end', () => resolve(b));
});

/* b64json - one decoded JWT part */
const b64json = (s) => JSON.parse(Buffer.from(s, 'base64url').toString());

/* jwtGrant - the JWT-bearer grant, checked as Google checks it, tokens issued by the mock */
async function jwtGrant(req, res) {
	const form = new URLSearchParams(await body(req));
	const send = (code, obj) => {
		res.writeHead(code, { 'Content-Type': 'application/json' });
		res.end(JSON.stringify(obj));
	};
	if (form.get('grant_type') !== 'urn:ietf:params:oauth:grant-type:jwt-bearer')
		return send(400, { error: 'unsupported_grant_type' });
	const [h, c, s] = (form.get('assertion') || '').split('.');
	const header = b64json(h);
	const claims = b64json(c);
	const ok = crypto.verify('RSA-SHA256', Buffer.from(`${h}.${c}`), crypto.createPublicKey(saKeyPem),
		Buffer.from(s, 'base64url'));
	const now = Date.now() / 1000;
	if (!ok || header.alg !== 'RS256' || header.kid !== SA_KEY_ID || claims.iss !== SA_EMAIL ||
	    claims.aud !== `${base}/jwt-token` || Math.abs(claims.iat - now) > 60 || claims.exp - claims.iat !== 3600)
		return send(400, { error: 'invalid_grant', error_description: 'Invalid JWT Signature.' });
	if (claims.target_audience) {
		const idt = await mock.service.buildToken(req, 3600, (_h, p) => {
			Object.assign(p, { aud: claims.target_audience, email: SA_EMAIL, sub: '1234' });
		});
		minted.add(idt);
		return send(200, { id_token: idt });
	}
	jwtScopes.push(claims.scope);
	const at = await mock.service.buildToken(req, 3600, (_h, p) => Object.assign(p, { scope: claims.scope }));
	minted.add(at);
	send(200, { access_token: at, expires_in: 3599, token_type: 'Bearer' });
}

/* iam - IAM Credentials generateAccessToken / generateIdToken for TARGET_SA */
async function iam(req, res) {
	const b = JSON.parse(await body(req) || '{}');
	const bearer = (req.headers.authorization || '').replace(/^Bearer /, '');
	const send = (code, obj) => {
		res.writeHead(code, { 'Content-Type': 'application/json' });
		res.end(JSON.stringify(obj));
	};
	const m = /^\/v1\/projects\/-\/serviceAccounts\/([^:]+):(generateAccessToken|generateIdToken)$/.exec(req.url);
	iamCalls.push({ url: req.url, body: b });
	if (!m || !minted.has(bearer))
		return send(403, { error: { code: 403, status: 'PERMISSION_DENIED', message: `Permission denied for ${bearer}` } });
	if (decodeURIComponent(m[1]) !== TARGET_SA)
		return send(404, { error: { code: 404, status: 'NOT_FOUND', message: 'unknown service account' } });
	if (m[2] === 'generateIdToken') {
		const token = await mock.service.buildToken(req, 3600, (_h, p) => Object.assign(p, { aud: b.audience, email: TARGET_SA }));
		minted.add(token);
		return send(200, { token });
	}
	const accessToken = `ya29.iam-${randomUUID()}`;
	minted.add(accessToken);
	send(200, { accessToken, expireTime: new Date(Date.now() + 3600_000).toISOString() });
}

/* hostMetadata - a GCE host's metadata server (plain HTTP, Metadata-Flavor required) */
function hostMetadata(req, res) {
	const u = new URL(req.url, 'http://x');
	const send = (code, type, b) => {
		res.writeHead(code, { 'Content-Type': type, 'Metadata-Flavor': 'Google' });
		res.end(b);
	};
	if (req.headers['metadata-flavor'] !== 'Google')
		return send(403, 'text/plain', 'Missing Metadata-Flavor');
	const p = u.pathname.replace('/computeMetadata/v1/', '');
	if (p === 'project/project-id')
		return send(200, 'application/text', 'kg-host-project');
	if (p === 'project/numeric-project-id')
		return send(200, 'application/text', '424242424242');
	if (p === 'instance/service-accounts/default/email')
		return send(200, 'application/text', 'vm@kg-host-project.iam.gserviceaccount.com');
	if (p === 'universe/universe-domain')
		return send(200, 'application/text', 'googleapis.com');
	if (p === 'instance/service-accounts/default/token') {
		hostScopes.push(u.searchParams.get('scopes'));
		const t = `ya29.host-${randomUUID()}`;
		minted.add(t);
		return send(200, 'application/json', JSON.stringify({ access_token: t, expires_in: 3599, token_type: 'Bearer' }));
	}
	send(404, 'text/plain', 'not found');
}

before(async () => {
	const keyPem = path.join(work, 'tls.key');
	const crt = path.join(work, 'tls.crt');
	execFileSync('openssl', ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', keyPem, '-out', crt,
		'-days', '1', '-subj', '/CN=localhost', '-addext', 'subjectAltName=DNS:localhost,DNS:kg-token.test,IP:127.0.0.1'],
	{ stdio: 'ignore' });
	certPem = fs.readFileSync(crt, 'utf8');
	const saKey = path.join(work, 'sa.pem');
	execFileSync('openssl', ['genpkey', '-algorithm', 'RSA', '-pkeyopt', 'rsa_keygen_bits:2048', '-out', saKey],
		{ stdio: 'ignore' });
	saKeyPem = fs.readFileSync(saKey, 'utf8');

	mock = new OAuth2Server();
	await mock.issuer.keys.generate('RS256');
	mock.service.on('beforeTokenSigning', (token) => {
		if (token.payload.aud === CLIENT_ID)
			token.payload.email = USER_EMAIL; /* the refresh answer's id_token names the user */
	});
	mock.service.on('beforeResponse', (resp, req) => {
		if (req.body.grant_type !== 'refresh_token')
			return;
		if (req.body.refresh_token !== REFRESH || req.body.client_id !== CLIENT_ID ||
		    req.body.client_secret !== CLIENT_SECRET) {
			resp.statusCode = 400;
			/* echoes what it got, as careless servers do: the worker must scrub it */
			resp.body = { error: 'invalid_grant', error_description: `Token ${req.body.refresh_token} has been expired or revoked.` };
			return;
		}
		refreshGrants++;
		minted.add(resp.body.access_token);
		minted.add(resp.body.id_token);
	});
	tokenServer = https.createServer({ key: fs.readFileSync(keyPem), cert: certPem }, (req, res) => {
		if (req.url === '/jwt-token')
			return jwtGrant(req, res);
		if (req.url.startsWith('/v1/projects/'))
			return iam(req, res);
		if (req.url.startsWith('/storage/v1/')) {
			storageBearers.push(req.headers.authorization || '');
			res.writeHead(200, { 'Content-Type': 'application/json' });
			return res.end(JSON.stringify({ kind: 'storage#bucket', name: 'kg-bucket', location: 'EU' }));
		}
		mock.service.requestHandler(req, res);
	});
	await new Promise((r) => tokenServer.listen(0, '127.0.0.1', r));
	/* KG_E2E_TOKEN_HOST=kg-token.test, with that name given two addresses in /etc/hosts (in a
	 * private mount namespace), takes the worker through glibc's multi-address resolution */
	base = `https://${process.env.KG_E2E_TOKEN_HOST || 'localhost'}:${tokenServer.address().port}`;
	mock.issuer.url = base;
	hostServer = http.createServer(hostMetadata);
	await new Promise((r) => hostServer.listen(0, '127.0.0.1', r));
});

after(async () => {
	tokenServer?.close();
	hostServer?.close();
	fs.rmSync(work, { recursive: true, force: true });
});

/* adcFile - write an ADC file in a fresh directory; returns its path */
function adcFile(obj) {
	const dir = fs.mkdtempSync(path.join(work, 'adc-'));
	const p = path.join(dir, 'adc.json');
	fs.writeFileSync(p, JSON.stringify(obj), { mode: 0o600 });
	return p;
}

const userAdc = (extra = {}) => adcFile({
	type: 'authorized_user', client_id: CLIENT_ID, client_secret: CLIENT_SECRET, refresh_token: REFRESH,
	quota_project_id: 'kg-quota-project', ...extra,
});

const saAdc = () => adcFile({
	type: 'service_account', project_id: 'kg-sa-project', private_key_id: SA_KEY_ID, private_key: saKeyPem,
	client_email: SA_EMAIL, client_id: '1234567890', token_uri: `${base}/jwt-token`,
});

/* session - serve with these arguments and environment; the worker trusts our certificate */
async function session(args, env = {}) {
	const home = fs.mkdtempSync(path.join(work, 'home-')); /* no gcloud well-known file here */
	const s = await connect({
		args,
		env: { HOME: home, SSL_CERT_FILE: path.join(work, 'tls.crt'), GOOGLE_CLOUD_PROJECT: '', ...env },
	});
	logs.push(s);
	return s;
}

/* run - one execute_go_code; returns structuredContent (and remembers the text) */
async function run(s, code) {
	const res = await callTool(s.client, 'execute_go_code', { code });
	seenResults.push(text(res));
	const r = sc(res);
	assert.ok(r, `no structuredContent: ${text(res).slice(0, 800)}`);
	return r;
}

const show = (r) => JSON.stringify(r).slice(0, 3000);

/* ok - the value of a run that must have succeeded */
function ok(r) {
	assert.equal(r.result?.kind, 'ok', show(r));
	return r.result.value;
}

/* a snippet that asks the metadata server and both auth libraries, reporting token digests */
const inspect = `package snippet

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"

	"cloud.google.com/go/auth/credentials"
	"cloud.google.com/go/compute/metadata"
	"golang.org/x/oauth2/google"
)

func h(s string) string { x := sha256.Sum256([]byte(s)); return hex.EncodeToString(x[:]) }

func run(ctx context.Context) (any, error) {
	out := map[string]any{
		"onGCE": metadata.OnGCEWithContext(ctx),
		"host":  os.Getenv("GCE_METADATA_HOST"),
		"ip":    os.Getenv("GCE_METADATA_IP"),
		"root":  os.Getenv("GCE_METADATA_ROOT"),
		"gac":   os.Getenv("GOOGLE_APPLICATION_CREDENTIALS"),
	}
	var err error
	if out["project"], err = metadata.ProjectIDWithContext(ctx); err != nil {
		return nil, err
	}
	if n, err := metadata.NumericProjectIDWithContext(ctx); err == nil {
		out["numeric"] = n
	}
	if out["email"], err = metadata.EmailWithContext(ctx, ""); err != nil {
		return nil, err
	}
	if out["universe"], err = metadata.GetWithContext(ctx, "universe/universe-domain"); err != nil {
		return nil, err
	}
	if out["scopes"], err = metadata.ScopesWithContext(ctx, ""); err != nil {
		return nil, err
	}
	gc, err := google.FindDefaultCredentials(ctx, "${CLOUD}")
	if err != nil {
		return nil, err
	}
	t1, err := gc.TokenSource.Token()
	if err != nil {
		return nil, err
	}
	out["oauth2"], out["oauth2Project"] = h(t1.AccessToken), gc.ProjectID
	c, err := credentials.DetectDefault(&credentials.DetectOptions{Scopes: []string{"${CLOUD}"}})
	if err != nil {
		return nil, err
	}
	t2, err := c.Token(ctx)
	if err != nil {
		return nil, err
	}
	out["auth"], out["authType"] = h(t2.Value), t2.Type
	ents, _ := os.ReadDir("/kg/state/credentials")
	out["stateCreds"] = len(ents)
	_, werr := os.Stat(os.Getenv("HOME") + "/.config/gcloud/application_default_credentials.json")
	out["wellKnown"] = werr == nil
	return out, nil
}
`;

/* raw HTTP against the emulator: what it refuses, and what it answers */
const raw = `package snippet

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"os"
)

type answer struct {
	Status int    \`json:"status"\`
	Flavor string \`json:"flavor"\`
	Type   string \`json:"type"\`
	Body   string \`json:"body"\`
}

func get(path string, hdr map[string]string) answer {
	req, _ := http.NewRequest("GET", "http://"+os.Getenv("GCE_METADATA_HOST")+path, nil)
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return answer{Status: -1, Body: err.Error()}
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return answer{res.StatusCode, res.Header.Get("Metadata-Flavor"), res.Header.Get("Content-Type"), string(b)}
}

func run(ctx context.Context) (any, error) {
	g := map[string]string{"Metadata-Flavor": "Google"}
	out := map[string]answer{
		"noFlavor":  get("/computeMetadata/v1/project/project-id", nil),
		"forwarded": get("/computeMetadata/v1/project/project-id", map[string]string{"Metadata-Flavor": "Google", "X-Forwarded-For": "10.0.0.1"}),
		"unknown":   get("/computeMetadata/v1/instance/zone", g),
		"root":      get("/", g),
		"list":      get("/computeMetadata/v1/instance/service-accounts/", g),
		"recursive": get("/computeMetadata/v1/instance/service-accounts/?recursive=true", g),
		"underscore": get("/computeMetadata/v1/universe/universe_domain", g),
	}
	tok := get("/computeMetadata/v1/instance/service-accounts/default/token?scopes=https%3A%2F%2Fwww.googleapis.com%2Fauth%2Fdevstorage.read_only", g)
	var t struct {
		AccessToken string \`json:"access_token"\`
		ExpiresIn   int    \`json:"expires_in"\`
		TokenType   string \`json:"token_type"\`
	}
	json.Unmarshal([]byte(tok.Body), &t)
	x := sha256.Sum256([]byte(t.AccessToken))
	tok.Body = hex.EncodeToString(x[:])
	out["scopedToken"] = tok
	out["scopedTokenType"] = answer{Status: t.ExpiresIn, Body: t.TokenType}
	id := get("/computeMetadata/v1/instance/service-accounts/default/identity?audience=https%3A%2F%2Fkg.example.com&format=full", g)
	if id.Status == 200 {
		y := sha256.Sum256([]byte(id.Body))
		id.Body = hex.EncodeToString(y[:])
	}
	out["identity"] = id
	return out, nil
}
`;

/* storage - the Cloud Storage client against the local bucket endpoint */
const storage = (endpoint) => `package snippet

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net/http"

	"cloud.google.com/go/storage"
	"google.golang.org/api/option"
)

const ca = \`${certPem}\`

func run(ctx context.Context) (any, error) {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM([]byte(ca))
	http.DefaultTransport.(*http.Transport).TLSClientConfig = &tls.Config{RootCAs: pool}
	c, err := storage.NewClient(ctx, option.WithEndpoint("${endpoint}/storage/v1/"))
	if err != nil {
		return nil, err
	}
	defer c.Close()
	attrs, err := c.Bucket("kg-bucket").Attrs(ctx)
	if err != nil {
		return nil, err
	}
	return attrs.Name, nil
}
`;

test('metadata mode, user ADC: the refresh-token grant outside, Go libraries find the token inside', T, async () => {
	const s = await session(['--credentials', 'metadata', '--token-endpoint', `${base}/token`],
		{ GOOGLE_APPLICATION_CREDENTIALS: userAdc() });
	const before = refreshGrants;
	const v = ok(await run(s, inspect));
	assert.equal(v.onGCE, true);
	assert.match(v.host, /^127\.\d+\.\d+\.\d+:\d+$/);
	assert.equal(v.ip, v.host);
	assert.equal(v.root, v.host);
	assert.equal(v.gac, '', 'no ADC file in metadata mode');
	assert.equal(v.stateCreds, 0, 'nothing written to the state directory');
	assert.equal(v.wellKnown, false);
	assert.equal(v.project, 'kg-quota-project');
	assert.equal(v.oauth2Project, 'kg-quota-project');
	assert.equal(v.email, USER_EMAIL, 'the email comes from the refresh answer\'s id_token');
	assert.equal(v.universe, 'googleapis.com');
	assert.deepEqual(v.scopes, [CLOUD]);
	assert.equal(v.authType, 'Bearer');
	assert.equal(refreshGrants, before + 1, 'one refresh for the call, cached after');
	const digests = new Set([...minted].map(sha));
	assert.ok(digests.has(v.oauth2), 'golang.org/x/oauth2 got a token the token endpoint minted');
	assert.equal(v.auth, v.oauth2, 'cloud.google.com/go/auth got the same token');

	/* the refresh token never enters the sandbox: not in the result, and not in the emulator */
	const r = await run(s, raw);
	const a = ok(r);
	assert.equal(a.noFlavor.status, 403);
	assert.equal(a.forwarded.status, 403);
	assert.equal(a.unknown.status, 404);
	for (const [k, x] of Object.entries(a))
		if (k !== 'scopedTokenType')
			assert.equal(x.flavor, 'Google', `${k} carries Metadata-Flavor`);
	assert.equal(a.root.status, 200);
	assert.equal(a.list.body, `default/\n${USER_EMAIL}/\n`);
	const rec = JSON.parse(a.recursive.body);
	assert.equal(a.recursive.type, 'application/json');
	assert.deepEqual(rec.default, { aliases: ['default'], email: USER_EMAIL, scopes: [CLOUD] });
	assert.equal(a.underscore.body, 'googleapis.com');
	assert.equal(a.scopedToken.status, 200);
	assert.equal(a.scopedToken.type, 'application/json');
	assert.ok(digests.has(a.scopedToken.body) || new Set([...minted].map(sha)).has(a.scopedToken.body));
	assert.equal(a.scopedTokenType.body, 'Bearer');
	assert.ok(a.scopedTokenType.status > 3000 && a.scopedTokenType.status <= 3600, 'expires_in counts down from an hour');
	assert.equal(a.identity.status, 404, 'user credentials mint no ID tokens');
	assert.ok(!JSON.stringify(r).includes(REFRESH));
});

test('metadata mode: a Cloud Storage client sends the minted token to its endpoint', T, async () => {
	/* the bucket endpoint is this test's server on the host's loopback, which a sandbox with a
	 * network of its own cannot reach (tests/security/network.test.mjs): share the host's */
	const s = await session(['--credentials', 'metadata', '--token-endpoint', `${base}/token`,
		'--sandbox-network', 'host'],
		{ GOOGLE_APPLICATION_CREDENTIALS: userAdc() });
	const n = storageBearers.length;
	assert.equal(ok(await run(s, storage(`https://127.0.0.1:${tokenServer.address().port}`))), 'kg-bucket');
	assert.ok(storageBearers.length > n, 'the bucket endpoint was called');
	const bearer = storageBearers.at(-1).replace(/^Bearer /, '');
	assert.ok(minted.has(bearer), `the bucket saw a token the token endpoint minted (${bearer.slice(0, 12)}…)`);
});

test('metadata mode, service-account key: JWT-bearer grant signed RS256, ?scopes= and ID tokens', T, async () => {
	const s = await session(['--credentials', 'metadata', '--sandbox-network', 'none'],
		{ GOOGLE_APPLICATION_CREDENTIALS: saAdc() });
	const v = ok(await run(s, inspect));
	assert.equal(v.email, SA_EMAIL);
	assert.equal(v.project, 'kg-sa-project');
	const digests = new Set([...minted].map(sha));
	assert.ok(digests.has(v.oauth2));
	assert.equal(v.auth, v.oauth2);
	assert.ok(jwtScopes.includes(CLOUD), `the grant asked for cloud-platform: ${jwtScopes}`);

	const a = ok(await run(s, raw));
	assert.equal(a.scopedToken.status, 200, show(a));
	assert.ok(jwtScopes.includes('https://www.googleapis.com/auth/devstorage.read_only'),
		`?scopes= reached the grant: ${jwtScopes}`);
	assert.ok(new Set([...minted].map(sha)).has(a.scopedToken.body));
	assert.notEqual(a.scopedToken.body, v.oauth2, 'other scopes, another token');
	assert.equal(a.identity.status, 200, show(a.identity));
	assert.ok(new Set([...minted].map(sha)).has(a.identity.body), 'the ID token came from the grant');
	assert.equal(a.list.body, `default/\n${SA_EMAIL}/\n`);
});

test('adc mode: the ADC file is in the sandbox for the run only', T, async () => {
	const adc = userAdc();
	// --sandbox-disk off: the state directory is then on the host's disk, where the test looks
	// (with the limit it is inside the sandbox's disk image)
	const s = await session(['--credentials', 'adc', '--sandbox-disk', 'off'], { GOOGLE_APPLICATION_CREDENTIALS: adc });
	const first = ok(await run(s, `package snippet

import (
	"context"
	"encoding/json"
	"os"
)

func run(ctx context.Context) (any, error) {
	p := os.Getenv("GOOGLE_APPLICATION_CREDENTIALS")
	st, err := os.Stat(p)
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, err
	}
	var f struct{ Type string \`json:"type"\` }
	json.Unmarshal(b, &f)
	return map[string]any{"path": p, "mode": st.Mode().Perm().String(), "type": f.Type,
		"same": len(b), "metadata": os.Getenv("GCE_METADATA_HOST")}, nil
}
`));
	assert.equal(first.type, 'authorized_user');
	assert.equal(first.mode, '-rw-------');
	assert.equal(first.same, fs.statSync(adc).size);
	assert.ok(first.path.startsWith('/kg/state/credentials/'), first.path);
	assert.ok(!first.path.startsWith('/app'), 'never under /app');
	assert.equal(first.metadata, '', 'no emulator in adc mode');
	const second = ok(await run(s, `package snippet

import (
	"context"
	"errors"
	"io/fs"
	"os"
)

func run(ctx context.Context) (any, error) {
	_, err := os.Stat(${JSON.stringify(first.path)})
	return map[string]any{"gone": errors.Is(err, fs.ErrNotExist), "now": os.Getenv("GOOGLE_APPLICATION_CREDENTIALS")}, nil
}
`));
	assert.equal(second.gone, true, 'the first run\'s copy was deleted');
	assert.notEqual(second.now, first.path, 'each run gets a fresh name');
	assert.equal(fs.readdirSync(path.join(s.sandboxRoot, sandboxEntries(s.sandboxRoot)[0], 'state', 'credentials')).length, 0,
		'nothing left on the host after the run');
});

test('service-account:EMAIL mode: IAM generateAccessToken with the server\'s own credentials', T, async () => {
	const s = await session(['--credentials', `service-account:${TARGET_SA}`, '--token-endpoint', `${base}/token`,
		'--iam-endpoint', base], { GOOGLE_APPLICATION_CREDENTIALS: userAdc() });
	const calls = iamCalls.length;
	const v = ok(await run(s, inspect));
	assert.equal(v.email, TARGET_SA);
	assert.equal(v.project, 'kg-quota-project', 'the project of the ADC when nothing else says');
	const gen = iamCalls.slice(calls).find((c) => c.url.endsWith(':generateAccessToken'));
	assert.ok(gen, 'generateAccessToken was called');
	assert.deepEqual(gen.body.scope, [CLOUD]);
	assert.ok(new Set([...minted].filter((t) => t.startsWith('ya29.iam-')).map(sha)).has(v.oauth2));
	const a = ok(await run(s, raw));
	assert.equal(a.identity.status, 200, show(a.identity));
	assert.ok(iamCalls.some((c) => c.url.endsWith(':generateIdToken') && c.body.audience === 'https://kg.example.com'));
});

test('server mode without ADC: the host\'s metadata server is the source', T, async () => {
	const s = await session(['--credentials', 'server', '--metadata-host', `127.0.0.1:${hostServer.address().port}`]);
	const v = ok(await run(s, inspect));
	assert.equal(v.project, 'kg-host-project');
	assert.equal(v.numeric, '424242424242');
	assert.equal(v.email, 'vm@kg-host-project.iam.gserviceaccount.com');
	assert.ok(new Set([...minted].filter((t) => t.startsWith('ya29.host-')).map(sha)).has(v.oauth2));
	assert.ok(hostScopes.includes(CLOUD), `${hostScopes}`);
});

test('a revoked refresh token: the program gets the OAuth error, scrubbed, and no token', T, async () => {
	const s = await session(['--credentials', 'metadata', '--token-endpoint', `${base}/token`],
		{ GOOGLE_APPLICATION_CREDENTIALS: userAdc({ refresh_token: `${REFRESH}-revoked` }) });
	const r = await run(s, inspect);
	assert.equal(r.result.kind, 'error', show(r));
	assert.match(r.result.message, /invalid_grant/);
	assert.match(r.result.message, /gcloud auth application-default login/);
	assert.ok(!r.result.message.includes(`${REFRESH}-revoked`), r.result.message);
	assert.ok(!s.stderr.includes(`${REFRESH}-revoked`), 'nor in the logs');
});

test('user mode without a signed-in user: refused at start-up with a sentence, not run without a token', T, async () => {
	/* stdio serve and exec have no signed-in user; signin.test.mjs runs user mode for real */
	const prog = path.join(work, 'main.go');
	fs.writeFileSync(prog, 'package main\n\nfunc main() {}\n');
	for (const args of [['serve', '--credentials', 'user'], ['exec', '--credentials', 'user', prog]]) {
		let code = 0, stderr = '';
		try {
			execFileSync(BIN, args, { stdio: ['ignore', 'ignore', 'pipe'], timeout: 30_000 });
		} catch (e) {
			code = e.status;
			stderr = String(e.stderr);
		}
		assert.equal(code, 2, `${args.join(' ')}: ${stderr}`);
		assert.match(stderr, /--credentials user runs programs as the signed-in Google user: it needs serve --http --auth google/);
	}
});

test('no secret in any log line or result', T, async () => {
	const all = [...logs.map((s) => s.stderr), ...seenResults].join('\n');
	assert.ok(all.length > 1000, 'there is something to search');
	assert.ok(!all.includes(REFRESH), 'the refresh token');
	assert.ok(!all.includes(CLIENT_SECRET), 'the client secret');
	for (const line of saKeyPem.split('\n').filter((l) => l.length > 20 && !l.startsWith('-')))
		assert.ok(!all.includes(line), 'a line of the private key');
	for (const t of minted)
		assert.ok(!all.includes(t), `a minted token (${t.slice(0, 16)}…)`);
});
