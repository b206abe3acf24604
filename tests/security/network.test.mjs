/*
 * network.test.mjs - each local sandbox has a network of its own (issue 13): programs reach the
 * outside through slirp4netns, and nothing of the host's or another sandbox's:
 *   - not the host's loopback (a listener there, the server's own HTTP port);
 *   - not another session's loopback services (what a metadata emulator is), which with
 *     --sandbox-network host the same test reaches, showing what it guards against;
 *   - not the host's own other addresses;
 *   - the outside, yes: a listener in a network namespace this test makes (never a real outside
 *     address), reached through the egress path.
 * Needs root for the test's own network namespace (ip netns), as CI has.
 */
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { randomInt } from 'node:crypto';
import http from 'node:http';
import test from 'node:test';

import { callTool, connect, httpServe, sc, snippet, text, goStr } from '../e2e/lib.mjs';

const T = { timeout: 240_000 };
const root = process.getuid() === 0;

/* show - a result for an assertion message */
const show = (s) => JSON.stringify(s).slice(0, 2000);

/* run - execute_go_code in session s: [result, structured] */
async function run(s, code, extra = {}) {
	const res = await callTool(s.client, 'execute_go_code', { code, ...extra });
	const st = sc(res);
	assert.ok(st, `no structuredContent: ${text(res).slice(0, 1000)}`);
	return [res, st];
}

/* dial - a snippet that connects to addr (retrying up to ms) and says what happened */
const dial = (addr, ms) => snippet(
	`\tdeadline := time.Now().Add(${ms} * time.Millisecond)\n` +
	'\tvar last error\n\tfor time.Now().Before(deadline) {\n' +
	`\t\tc, err := net.DialTimeout("tcp", ${goStr(addr)}, time.Second)\n` +
	'\t\tif err == nil {\n\t\t\tc.Write([]byte("hello\\n"))\n\t\t\tc.Close()\n\t\t\treturn "connected", nil\n\t\t}\n' +
	'\t\tlast = err\n\t\ttime.Sleep(100 * time.Millisecond)\n\t}\n' +
	'\treturn last.Error(), nil', ['net', 'time']);

/* GET - a snippet fetching url: the body, or the error's text */
const GET = (url) => snippet(
	'\tc := &http.Client{Timeout: 5 * time.Second}\n' +
	`\tresp, err := c.Get(${goStr(url)})\n` +
	'\tif err != nil {\n\t\treturn err.Error(), nil\n\t}\n\tdefer resp.Body.Close()\n' +
	'\tb, _ := io.ReadAll(resp.Body)\n\treturn string(b), nil', ['io', 'net/http', 'time']);

/* listenIn - a program that listens on 127.0.0.1:port in its sandbox for up to ms */
const listenIn = (port, ms) => snippet(
	`\tln, err := net.Listen("tcp", "127.0.0.1:${port}")\n\tif err != nil {\n\t\treturn nil, err\n\t}\n` +
	'\tdefer ln.Close()\n' +
	`\tln.(*net.TCPListener).SetDeadline(time.Now().Add(${ms} * time.Millisecond))\n` +
	'\tc, err := ln.Accept()\n\tif err != nil {\n\t\treturn "nobody came", nil\n\t}\n\tc.Close()\n\treturn "accepted", nil',
	['net', 'time']);

/* crossSession - session a listens on its loopback while session b dials it: [a's, b's] */
async function crossSession(args) {
	const a = await connect({ args });
	const b = await connect({ args });
	try {
		const port = randomInt(20000, 30000);
		// warm both (the first call builds), so the overlap below is about the dial only
		await run(a, listenIn(port, 1));
		await run(b, dial(`127.0.0.1:${port}`, 1));
		// generous windows: a's listener must be up within b's dialling on a loaded machine
		const pa = run(a, listenIn(port, 30000));
		const [, sb] = await run(b, dial(`127.0.0.1:${port}`, 25000));
		const [, sa] = await pa;
		return [sa.result.value, sb.result.value];
	} finally {
		await a.close();
		await b.close();
	}
}

test('another session\'s loopback services are out of reach (with --sandbox-network host they are not)', T, async () => {
	const [hostA, hostB] = await crossSession(['--sandbox-network', 'host']);
	assert.equal(hostB, 'connected', 'sharing the host\'s network, one sandbox reaches the other');
	assert.equal(hostA, 'accepted');
	const [ownA, ownB] = await crossSession([]);
	assert.match(ownB, /connection refused/, `a network of its own: ${ownB}`);
	assert.equal(ownA, 'nobody came');
});

test('the server\'s own HTTP port on the host\'s loopback, the gateway to it and link-local metadata are out of reach', T, async () => {
	const srv = await httpServe();
	const s = await connect();
	try {
		const [res, st] = await run(s, GET(`${srv.base}/mcp`));
		assert.equal(res.isError, false, show(st));
		assert.match(st.result.value, /connection refused/, show(st));
		// the gateway slirp4netns maps to the host's loopback is closed too
		const [, st2] = await run(s, GET(`http://10.0.2.2:${srv.port}/mcp`));
		assert.match(st2.result.value, /network is unreachable|connection refused|no route/, show(st2));
		// a cloud VM's own metadata server (the server's identity): no route, no packet sent
		const [, st3] = await run(s, GET('http://169.254.169.254/computeMetadata/v1/'));
		assert.match(st3.result.value, /no route to host|network is unreachable/, show(st3));
	} finally {
		await s.close();
		await srv.close();
	}
});

/* testNetns - a network namespace with a veth pair: the host side and the far side's addresses */
function testNetns() {
	const id = randomInt(1000, 9999);
	const ns = `kgt-${id}`, vh = `kgvh${id}`, vn = `kgvn${id}`;
	const o = id % 250;
	const hostIp = `10.213.${o}.1`, farIp = `10.213.${o}.2`;
	const ip = (...a) => {
		const r = spawnSync('ip', a, { encoding: 'utf8' });
		assert.equal(r.status, 0, `ip ${a.join(' ')}: ${r.stderr}`);
	};
	ip('netns', 'add', ns);
	ip('link', 'add', vh, 'type', 'veth', 'peer', 'name', vn);
	ip('link', 'set', vn, 'netns', ns);
	ip('addr', 'add', `${hostIp}/30`, 'dev', vh);
	ip('link', 'set', vh, 'up');
	ip('netns', 'exec', ns, 'ip', 'addr', 'add', `${farIp}/30`, 'dev', vn);
	ip('netns', 'exec', ns, 'ip', 'link', 'set', vn, 'up');
	ip('netns', 'exec', ns, 'ip', 'link', 'set', 'lo', 'up');
	return {
		ns, hostIp, farIp,
		remove: () => spawnSync('ip', ['netns', 'del', ns]),
	};
}

/* farServer - an HTTP server inside the test's namespace; resolves to {hits, stop} */
async function farServer(net, port) {
	const js = `require('http').createServer((q, r) => { console.log(q.url); r.end('hello from the far side'); })` +
		`.listen(${port}, '${net.farIp}', () => console.log('listening'));`;
	const child = spawn('ip', ['netns', 'exec', net.ns, process.execPath, '-e', js], { stdio: ['ignore', 'pipe', 'inherit'] });
	const hits = [];
	await new Promise((resolve, reject) => {
		child.stdout.on('data', (d) => {
			for (const l of d.toString().split('\n').filter(Boolean)) {
				if (l === 'listening')
					resolve();
				else
					hits.push(l);
			}
		});
		child.on('exit', (c) => reject(new Error(`the far server ended (${c})`)));
	});
	return { hits, stop: () => child.kill('SIGKILL') };
}

test('egress: a listener outside the host (in the test\'s own namespace) is reached; the host\'s own address on that link is not', T, async (t) => {
	if (!root)
		return t.skip('needs root for ip netns');
	const net = testNetns();
	let far, near;
	try {
		far = await farServer(net, 18088);
		// a listener on the host's own side of the link: a host address like any other
		const nearHits = [];
		near = http.createServer((q, r) => { nearHits.push(q.url); r.end('the host'); });
		await new Promise((r) => near.listen(18089, net.hostIp, r));
		// serve starts after the link exists, so its sandboxes know that address is the host's
		const s = await connect();
		try {
			const [, st] = await run(s, GET(`http://${net.farIp}:18088/through-the-egress`));
			assert.equal(st.result.value, 'hello from the far side', show(st));
			assert.deepEqual(far.hits, ['/through-the-egress']);
			const [, st2] = await run(s, GET(`http://${net.hostIp}:18089/the-host`));
			assert.match(st2.result.value, /no route to host|network is unreachable/, show(st2));
			assert.deepEqual(nearHits, []);
		} finally {
			await s.close();
		}
	} finally {
		far?.stop();
		if (near)
			await new Promise((r) => near.close(r));
		net.remove();
	}
});
