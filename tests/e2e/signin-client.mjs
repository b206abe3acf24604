#!/usr/bin/env node
/*
 * signin-client.mjs - a small MCP client program that signs in the way an MCP client with OAuth
 * support does (the official SDK's auth module and an OAuthClientProvider kept in memory, the
 * provider's login form filled by tests/oidc/provider.mjs's browse), then lists the tools and
 * prints one JSON line: {"tools": [names], "sessionId": ...}.
 *
 *   node tests/e2e/signin-client.mjs SERVER_URL ISSUER EMAIL PASSWORD
 *
 * Run as its own process by signin.test.mjs for the HTTPS server, with NODE_EXTRA_CA_CERTS
 * naming the test's certificate (Node reads it only when it starts).
 */
import { UnauthorizedError } from '@modelcontextprotocol/sdk/client/auth.js';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

import { browse } from '../oidc/provider.mjs';

const [url, issuer, email, password] = process.argv.slice(2);
const redirect = 'http://127.0.0.1:53690/callback';
const p = {
	get redirectUrl() { return redirect; },
	get clientMetadata() { return { client_name: 'signin-client', redirect_uris: [redirect], token_endpoint_auth_method: 'none' }; },
	clientInformation() { return this.client; },
	saveClientInformation(c) { this.client = c; },
	tokens() { return this.saved; },
	saveTokens(t) { this.saved = t; },
	redirectToAuthorization(u) { this.authUrl = u; },
	saveCodeVerifier(v) { this.verifier = v; },
	codeVerifier() { return this.verifier; },
};
const first = new StreamableHTTPClientTransport(new URL(url), { authProvider: p });
try {
	await new Client({ name: 'signin-client', version: '1' }).connect(first);
	throw new Error('connected without signing in');
} catch (e) {
	if (!(e instanceof UnauthorizedError))
		throw e;
}
const back = await browse(p.authUrl, { username: email, password }, { server: new URL(url).origin, issuer });
if (!back.location)
	throw new Error(`not sent back: ${back.status} ${back.body?.slice(0, 300)}`);
await first.finishAuth(back.location.searchParams.get('code'));
const transport = new StreamableHTTPClientTransport(new URL(url), { authProvider: p });
const client = new Client({ name: 'signin-client', version: '1' });
await client.connect(transport);
const tools = (await client.listTools()).tools.map((t) => t.name);
process.stdout.write(`${JSON.stringify({ tools, sessionId: transport.sessionId })}\n`);
await client.close();
