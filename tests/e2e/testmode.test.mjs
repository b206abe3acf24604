/*
 * testmode.test.mjs - issue 16 end to end with the SDK client and the real serve, agent and Go
 * toolchain: go test through execute_go_code (pass, fail, skip, panic, subtests, a benchmark,
 * fuzz seeds, coverage, a test file that does not compile, race refused), artifacts under
 * /app/out (a PNG drawn with image/png that decodes, a sniffed media type, a 100 MB file that
 * is capped and named, symlinks, hard links and FIFOs never read), and the session's files as
 * MCP resources (list, read, pieces, list_changed, nothing of another session, paths that try
 * to leave /app).
 *
 * One session serves most tests, as one model would use it. Run by tests/run.sh (node --test).
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import test from 'node:test';
import zlib from 'node:zlib';

import { ResourceListChangedNotificationSchema, ResourceUpdatedNotificationSchema } from '@modelcontextprotocol/sdk/types.js';

import { calcLib } from './gofixtures.mjs';
import { BIN, connect, execGo, McpError, sharedSession } from './lib.mjs';

const T = { timeout: 600_000 };
let changes = 0;
const live = sharedSession({ onFresh: () => watch() });
let watched;
/* watch - count notifications/resources/list_changed on the shared session */
async function watch() {
	const s = await live();
	if (watched === s)
		return;
	watched = s;
	s.client.setNotificationHandler(ResourceListChangedNotificationSchema, () => {
		changes++;
	});
}

const exec = async (args, session) => execGo(session || (await live()), args);

const show = (s) => JSON.stringify(s, (k, v) => (typeof v === 'string' && v.length > 300 ? v.slice(0, 300) + '…' : v)).slice(0, 3000);

const LIB = calcLib();

const TESTS = `package calc

import (
	"fmt"
	"testing"
)

func TestAdd(t *testing.T) {
	if Add(2, 3) != 5 {
		t.Fatal("2+3")
	}
	t.Log("adding works")
}

func TestFails(t *testing.T) {
	fmt.Println("printed by TestFails")
	t.Errorf("want %d, got %d", 4, Add(2, 3))
}

func TestSkipped(t *testing.T) { t.Skip("not on this machine") }

func TestTable(t *testing.T) {
	for _, c := range []struct {
		name string
		in, want int
	}{{"negative", -5, -1}, {"zero", 0, 0}, {"wrong on purpose", 7, 0}} {
		t.Run(c.name, func(t *testing.T) {
			if got := Sign(c.in); got != c.want {
				t.Errorf("Sign(%d) = %d, want %d", c.in, got, c.want)
			}
		})
	}
}

func BenchmarkAdd(b *testing.B) {
	s := 0
	for i := 0; i < b.N; i++ {
		s = Add(s, i)
	}
	_ = fmt.Sprint(s)
}

func FuzzAdd(f *testing.F) {
	f.Add(1, 2)
	f.Add(-3, 3)
	f.Fuzz(func(t *testing.T, a, b int) {
		if Add(a, b) != Add(b, a) {
			t.Fatal("not commutative")
		}
	})
}
`;

const PANICS = `package boom

import "testing"

func TestBefore(t *testing.T) {}

func TestPanics(t *testing.T) {
	var m map[string]int
	m["x"] = 1
}

func TestAfter(t *testing.T) {}
`;

test('go test: pass, fail, skip, subtests, fuzz seeds, a benchmark and a panic in another package', T, async () => {
	await watch();
	const [res, s] = await exec({
		files: [
			{ path: 'calc.go', content: LIB },
			{ path: 'calc_test.go', content: TESTS },
			{ path: 'boom/boom.go', content: 'package boom\n' },
			{ path: 'boom/boom_test.go', content: PANICS },
		],
		test: { bench: '.', benchtime: '200x' },
	});
	assert.equal(s.phase, 'test', show(s));
	assert.equal(s.mode, 'test');
	assert.equal(res.isError, true);
	assert.equal(s.result.kind, 'test_failure', show(s));
	const by = Object.fromEntries(s.tests.map((t) => [`${t.package} ${t.name}`, t]));
	const st = (k) => by[k]?.status;
	assert.equal(st('app TestAdd'), 'pass', show(s.tests));
	assert.match(by['app TestAdd'].output, /adding works/);
	assert.equal(st('app TestFails'), 'fail');
	assert.match(by['app TestFails'].output, /printed by TestFails[\s\S]*want 4, got 5/);
	assert.equal(st('app TestSkipped'), 'skip');
	assert.match(by['app TestSkipped'].output, /not on this machine/);
	assert.equal(st('app TestTable'), 'fail');
	assert.equal(st('app TestTable/negative'), 'pass');
	assert.equal(st('app TestTable/zero'), 'pass');
	assert.equal(st('app TestTable/wrong_on_purpose'), 'fail');
	assert.match(by['app TestTable/wrong_on_purpose'].output, /Sign\(7\) = 1, want 0/);
	// fuzz targets run their seed corpus, nothing more
	assert.equal(st('app FuzzAdd'), 'pass');
	assert.equal(st('app FuzzAdd/seed#0'), 'pass');
	assert.equal(st('app FuzzAdd/seed#1'), 'pass');
	assert.equal(s.tests.filter((t) => t.name.startsWith('FuzzAdd/')).length, 2);
	// as with go test, benchmarks run only when the tests passed
	assert.equal(by['app BenchmarkAdd'], undefined);
	// a panic ends its package's binary: the test that panicked fails with its stack, the
	// ones after it never run, the other package is unaffected
	assert.equal(st('app/boom TestBefore'), 'pass');
	assert.equal(st('app/boom TestPanics'), 'fail');
	assert.match(by['app/boom TestPanics'].output, /panic: assignment to entry in nil map[\s\S]*boom_test.go:9/);
	assert.equal(by['app/boom TestAfter'], undefined);
	const pk = Object.fromEntries(s.packages.map((p) => [p.package, p]));
	assert.equal(pk.app.status, 'fail');
	assert.equal(pk['app/boom'].status, 'fail');
	assert.equal(s.test_totals.packages, 2);
	assert.equal(s.test_totals.skipped, 1);
	assert.equal(s.test_totals.failed, 4, show(s.test_totals)); // TestFails, TestTable, its subtest, TestPanics
	assert.equal(s.test_totals.tests, s.test_totals.passed + s.test_totals.failed + s.test_totals.skipped);
	assert.match(s.result.message, /^4 of \d+ tests failed: .*TestFails/);
	// stdout reads like go test -v
	assert.match(s.stdout, /=== RUN {3}TestAdd[\s\S]*--- FAIL: TestFails/);
});

test('go test -run, -cover and -bench: only the chosen tests, the coverage, ns/op, isError false', T, async () => {
	const [res, s] = await exec({
		files: [{ path: 'calc.go', content: LIB }, { path: 'calc_test.go', content: TESTS }],
		test: { run: '^TestAdd$|^TestTable$/^(negative|zero)$', cover: true, bench: 'Add', benchtime: '200x' },
	});
	assert.equal(s.phase, 'test', show(s));
	assert.equal(res.isError, false, show(s));
	assert.equal(s.result.kind, 'ok');
	assert.deepEqual(s.tests.map((t) => t.name).sort(), ['BenchmarkAdd', 'TestAdd', 'TestTable', 'TestTable/negative', 'TestTable/zero']);
	// the benchmark ran the asked 200 iterations and measured them
	const b = s.tests.find((t) => t.name === 'BenchmarkAdd');
	assert.equal(b.status, 'pass');
	assert.equal(b.iterations, 200);
	assert.equal(typeof b.ns_per_op, 'number');
	assert.ok(b.ns_per_op > 0);
	assert.equal(b.allocs_per_op >= 0, true);
	assert.equal(typeof b.bytes_per_op, 'number');
	assert.equal(s.test_totals.benchmarks, 1);
	assert.equal(s.packages[0].status, 'pass');
	assert.equal(typeof s.packages[0].coverage, 'number');
	assert.ok(s.packages[0].coverage > 50 && s.packages[0].coverage <= 100, show(s.packages));
});

test('a test file that does not compile is phase build with diagnostics; race is refused', T, async () => {
	const [res, s] = await exec({
		files: [
			{ path: 'calc.go', content: LIB },
			{ path: 'calc_test.go', content: 'package calc\n\nimport "testing"\n\nfunc TestX(t *testing.T) {\n\tundefinedThing()\n}\n' },
		],
	});
	assert.equal(res.isError, true);
	assert.equal(s.phase, 'build', show(s));
	assert.equal(s.mode, 'test');
	assert.equal(s.result.kind, 'build_error');
	assert.deepEqual(s.diagnostics[0], { file: 'calc_test.go', line: 6, column: 2, message: 'undefined: undefinedThing' });

	const [r2, s2] = await exec({ files: [{ path: 'calc.go', content: LIB }, { path: 'calc_test.go', content: TESTS }], test: { race: true } });
	assert.equal(r2.isError, true);
	assert.equal(s2.result.kind, 'invalid_arguments');
	assert.match(s2.result.message, /race detector needs cgo/);
});

const CHART = `package main

import (
	"image"
	"image/color"
	"image/png"
	"os"
)

func main() {
	// a bar chart: five bars of rising height on white
	const w, h = 320, 200
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	for y := 0; y < h; y++ {
		for x := 0; x < w; x++ {
			img.Set(x, y, color.White)
		}
	}
	for i, v := range []int{40, 80, 120, 160, 190} {
		for x := 20 + i*60; x < 60+i*60; x++ {
			for y := h - v; y < h; y++ {
				img.Set(x, y, color.RGBA{30, 90, 200, 255})
			}
		}
	}
	f, err := os.Create("out/chart.png")
	if err != nil {
		panic(err)
	}
	if err := png.Encode(f, img); err != nil {
		panic(err)
	}
	f.Close()
	// text that claims to be a picture by its name: the type comes from the content
	os.WriteFile(os.Getenv("KODE_GOPHER_OUT")+"/notes.png", []byte("just text\\n"), 0o644)
	os.WriteFile("out/plot.svg", []byte("<svg xmlns=\\"http://www.w3.org/2000/svg\\" width=\\"10\\" height=\\"10\\"/>"), 0o644)
}
`;

/* pngSize - width and height from a PNG's IHDR, after checking the signature and that it inflates */
function pngSize(buf) {
	assert.deepEqual([...buf.subarray(0, 8)], [0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]);
	assert.equal(buf.toString('latin1', 12, 16), 'IHDR');
	const idat = [];
	for (let off = 8; off < buf.length;) {
		const len = buf.readUInt32BE(off);
		const type = buf.toString('latin1', off + 4, off + 8);
		if (type === 'IDAT')
			idat.push(buf.subarray(off + 8, off + 8 + len));
		off += 12 + len;
	}
	const raw = zlib.inflateSync(Buffer.concat(idat));
	const w = buf.readUInt32BE(16), h = buf.readUInt32BE(20);
	assert.equal(buf[24], 8, 'bit depth');
	const channels = { 2: 3, 6: 4 }[buf[25]]; // RGB (an opaque image) or RGBA
	assert.ok(channels, `colour type ${buf[25]}`);
	assert.equal(raw.length, h * (1 + channels * w)); // rows, each with its filter byte
	return [w, h];
}

test('a chart drawn with image/png comes back as image content that decodes', T, async () => {
	const [res, s] = await exec({ code: CHART });
	assert.equal(res.isError, false, show(s));
	const imgs = res.content.filter((c) => c.type === 'image');
	assert.equal(imgs.length, 2, show(res.content));
	const png = imgs.find((c) => c.mimeType === 'image/png');
	assert.deepEqual(pngSize(Buffer.from(png.data, 'base64')), [320, 200]);
	assert.ok(imgs.find((c) => c.mimeType === 'image/svg+xml'));
	const by = Object.fromEntries(s.artifacts.map((a) => [a.name, a]));
	assert.equal(by['chart.png'].media_type, 'image/png');
	assert.equal(by['chart.png'].embedded, true);
	assert.equal(by['chart.png'].size, Buffer.from(png.data, 'base64').length);
	assert.equal(by['chart.png'].path, '/app/out/chart.png');
	assert.equal(by['notes.png'].media_type, 'text/plain');
	// the bytes are in the content blocks, not twice in structuredContent
	assert.equal(by['chart.png'].data, undefined);
	const notes = res.content.find((c) => c.type === 'resource' && c.resource.uri.endsWith('/notes.png'));
	assert.equal(notes.resource.text, 'just text\n');
	assert.equal(s.artifacts_note, undefined);
});

test('the caps hold with 40 files: 32 listed, 2 MiB embedded in name order, bytes exact; output that imitates the server\'s placeholders passes through', T, async () => {
	// a00..a02: 900 KiB of gzip-signed bytes each (blobs); a03..a39: a line of text each
	const [res, s] = await exec({
		code: `package main

import (
	"fmt"
	"os"
)

func main() {
	for i := 0; i < 40; i++ {
		name := fmt.Sprintf("out/a%02d", i)
		if i < 3 {
			b := make([]byte, 900<<10)
			for j := range b {
				b[j] = byte(j*7 + i)
			}
			b[0], b[1] = 0x1f, 0x8b
			os.WriteFile(name, b, 0o644)
			continue
		}
		os.WriteFile(name, []byte(fmt.Sprintf("file %d\\n", i)), 0o644)
	}
	// what a placeholder for spliced base64 looks like, as a value, inside a string, at its end
	fmt.Printf("%q\\n", "kg-splice-0123456789abcdef0123456789abcdef-0")
	fmt.Println("[\\"kg-splice-00000000000000000000000000000000-1\\"]")
	fmt.Print("end \\"kg-splice-ffffffffffffffffffffffffffffffff-2")
}
`,
	});
	assert.equal(res.isError, false, show(s));
	assert.equal(s.artifacts.length, 32);
	assert.match(s.artifacts_note, /8 more entries in \/app\/out were not listed: a result lists at most 32 artifacts \(artifact count cap\)/);
	assert.match(s.artifacts_note, /1 artifact was not embedded: the result's artifact bytes cap is 2 MiB/);
	const by = Object.fromEntries(s.artifacts.map((a) => [a.name, a]));
	assert.equal(by.a00.embedded, true);
	assert.equal(by.a01.embedded, true);
	assert.equal(by.a02.embedded, false);
	assert.match(by.a02.note, /artifact bytes cap/);
	assert.equal(by.a31.embedded, true);
	assert.equal(by.a32, undefined);
	for (const i of [0, 1]) {
		const blob = res.content.find((c) => c.type === 'resource' && c.resource.uri === `sandbox:///app/out/a0${i}`);
		assert.equal(blob.resource.mimeType, 'application/gzip');
		const b = Buffer.from(blob.resource.blob, 'base64');
		assert.equal(b.length, 900 << 10);
		const want = Buffer.alloc(900 << 10);
		for (let j = 0; j < want.length; j++)
			want[j] = (j * 7 + i) & 255;
		want[0] = 0x1f;
		want[1] = 0x8b;
		assert.ok(b.equals(want), `a0${i} came back byte for byte`);
	}
	const texts = res.content.filter((c) => c.type === 'resource' && c.resource.text !== undefined);
	assert.equal(texts.length, 29);
	assert.equal(texts.find((c) => c.resource.uri.endsWith('/a31')).resource.text, 'file 31\n');
	assert.ok(res.content.find((c) => c.type === 'resource_link' && c.uri === 'sandbox:///app/out/a02'));
	assert.equal(s.stdout, '"kg-splice-0123456789abcdef0123456789abcdef-0"\n' +
		'["kg-splice-00000000000000000000000000000000-1"]\n' +
		'end "kg-splice-ffffffffffffffffffffffffffffffff-2');
	// the JSON text block says the same as structuredContent
	assert.deepEqual(JSON.parse(res.content[0].text), s);
});

test('a 100 MB artifact is listed, not embedded, and the cap is named; it reads in pieces', T, async () => {
	const [res, s] = await exec({
		code: `package main

import "os"

func main() {
	f, _ := os.Create("out/big.bin")
	f.Write([]byte("BIG!"))
	f.Truncate(100 << 20)
	f.Close()
	os.WriteFile("out/small.txt", []byte("small"), 0o644)
}
`,
	});
	assert.equal(res.isError, false, show(s));
	const big = s.artifacts.find((a) => a.name === 'big.bin');
	assert.equal(big.size, 100 << 20);
	assert.equal(big.embedded, false);
	assert.match(big.note, /artifact bytes cap/);
	assert.match(s.artifacts_note, /1 artifact was not embedded: the result's artifact bytes cap is 2 MiB/);
	const link = res.content.find((c) => c.type === 'resource_link');
	assert.equal(link.uri, 'sandbox:///app/out/big.bin');
	assert.equal(link.mimeType, 'application/octet-stream');
	assert.ok(JSON.stringify(res).length < 1 << 20, 'the response stays small');
	// a read returns the first MiB and where the next piece starts
	const client = (await live()).client;
	const r = await client.readResource({ uri: link.uri });
	const c = r.contents[0];
	assert.equal(Buffer.from(c.blob, 'base64').length, 1 << 20);
	assert.equal(Buffer.from(c.blob, 'base64').subarray(0, 4).toString(), 'BIG!');
	assert.equal(r._meta['kode-gopher/size'], 100 << 20);
	assert.equal(r._meta['kode-gopher/next'], `${link.uri}?offset=${1 << 20}`);
	const last = await client.readResource({ uri: `${link.uri}?offset=${(100 << 20) - 10}` });
	assert.equal(Buffer.from(last.contents[0].blob, 'base64').length, 10);
	assert.equal(last._meta['kode-gopher/eof'], true);
});

test('symlinks, hard links, FIFOs and a linked out/ are never followed or read', T, async () => {
	const [res, s] = await exec({
		code: `package main

import (
	"os"
	"syscall"
)

func main() {
	os.WriteFile("persist/secret.txt", []byte("SECRET-IN-PERSIST"), 0o644)
	os.Symlink("/etc/passwd", "out/passwd.txt")
	os.Symlink("../persist/secret.txt", "out/secret.txt")
	os.Symlink("/etc", "out/etcdir")
	os.Link("persist/secret.txt", "out/hard.txt")
	syscall.Mkfifo("out/fifo", 0o644)
	os.WriteFile("out/fine.txt", []byte("fine"), 0o644)
}
`,
	});
	assert.equal(res.isError, false, show(s));
	const by = Object.fromEntries(s.artifacts.map((a) => [a.name, a]));
	for (const n of ['passwd.txt', 'secret.txt', 'etcdir'])
		assert.match(by[n].note, /symbolic link/, n);
	assert.match(by['hard.txt'].note, /hard link/);
	assert.match(by.fifo.note, /FIFO/);
	assert.equal(by['fine.txt'].embedded, true);
	const all = JSON.stringify(res);
	assert.doesNotMatch(all, /root:x:0:0|SECRET-IN-PERSIST/);
	const client = (await live()).client;
	for (const uri of ['sandbox:///app/out/passwd.txt', 'sandbox:///app/out/secret.txt',
		'sandbox:///app/out/etcdir/passwd', 'sandbox:///app/out/hard.txt', 'sandbox:///app/out/fifo',
		'sandbox:///app/persist/../../etc/passwd', 'sandbox:///app/persist/%2e%2e/%2e%2e/etc/passwd',
		'sandbox:///app/out/%00x', 'sandbox:///app/state/bin', 'file:///etc/passwd', 'sandbox:///etc/passwd']) {
		await assert.rejects(client.readResource({ uri }), (e) => e instanceof McpError && e.code === -32002, uri);
	}
	// /app/out itself replaced by a link: nothing is listed through it
	const [r2, s2] = await exec({ code: 'package main\n\nimport "os"\n\nfunc main() {\n\tos.Remove("out")\n\tos.Symlink("/etc", "out")\n}\n' });
	assert.equal(r2.isError, false, show(s2));
	assert.deepEqual(s2.artifacts, []);
	assert.doesNotMatch(JSON.stringify(r2), /root:x:0:0/);
});

test('a persisted file is a resource in the next call of the session, and of no other session', T, async () => {
	const session = await live();
	await watch();
	const before = changes;
	const [r1, s1] = await exec({
		code: 'package main\n\nimport "os"\n\nfunc main() {\n\tos.WriteFile("persist/rows.json", []byte(`[{"n":1},{"n":2}]`), 0o644)\n}\n',
	});
	assert.equal(r1.isError, false, show(s1));
	assert.ok(changes > before, 'notifications/resources/list_changed after the call wrote a file');
	// the next call changes nothing there: no notification
	const [, s2] = await exec({ code: 'package main\n\nfunc main() {}\n' });
	assert.equal(s2.result.kind, 'ok');
	const n = changes;
	await exec({ code: 'package main\n\nfunc main() {}\n' });
	assert.equal(changes, n, 'no notification when nothing changed');

	const list = await session.client.listResources();
	const rows = list.resources.find((r) => r.uri === 'sandbox:///app/persist/rows.json');
	assert.ok(rows, JSON.stringify(list));
	assert.equal(rows.mimeType, 'application/json');
	const read = await session.client.readResource({ uri: rows.uri });
	assert.equal(read.contents[0].text, '[{"n":1},{"n":2}]');
	assert.equal(read.contents[0].mimeType, 'application/json');
	const tmpl = await session.client.listResourceTemplates();
	assert.deepEqual(tmpl.resourceTemplates.map((t) => t.uriTemplate).sort(),
		['sandbox:///app/out/{+path}', 'sandbox:///app/persist/{+path}']);

	// another session: its own (empty) files, before and after its first call
	const other = await connect();
	assert.deepEqual((await other.client.listResources()).resources, []);
	await assert.rejects(other.client.readResource({ uri: rows.uri }), /run no code yet/);
	const [ro] = await exec({ code: 'package main\n\nfunc main() {}\n' }, other);
	assert.equal(ro.isError, false);
	assert.deepEqual((await other.client.listResources()).resources, []);
	await assert.rejects(other.client.readResource({ uri: rows.uri }), /does not exist/);
	await other.close();
});

test('resources/subscribe: updated when a watched file changes in a call, not otherwise; unsubscribe stops it; only this server\'s files', T, async () => {
	const s = await connect();
	try {
		assert.equal(s.client.getServerCapabilities().resources?.subscribe, true);
		const updated = [];
		s.client.setNotificationHandler(ResourceUpdatedNotificationSchema, (n) => updated.push(n.params.uri));
		const kept = 'sandbox:///app/persist/w.txt', art = 'sandbox:///app/out/o.txt';
		// before the first call (no sandbox yet): watched from the first call on
		await s.client.subscribeResource({ uri: kept });
		await s.client.subscribeResource({ uri: art });
		const write = (files) => `package main\n\nimport "os"\n\nfunc main() {\n\t_ = os.Args\n${files.map((f) =>
			`\tos.WriteFile(${JSON.stringify(f[0])}, []byte(${JSON.stringify(f[1])}), 0o644)\n`).join('')}}\n`;
		const step = async (files, want, why) => {
			updated.length = 0;
			const [res, out] = await exec({ code: write(files) }, s);
			assert.equal(res.isError, false, show(out));
			assert.deepEqual(updated.sort(), want.sort(), why);
			assert.equal(out.watch_changed, undefined, 'the agent\'s list stays inside the server');
		};
		await step([['persist/w.txt', 'one']], [kept], 'created');
		await step([], [], 'nothing touched');
		await step([['persist/w.txt', 'two'], ['persist/other.txt', 'x']], [kept], 'rewritten (an unwatched file changes too)');
		await step([['out/o.txt', 'a']], [art], 'an artifact written');
		await step([], [art], 'the artifact wiped by the next call');
		await s.client.unsubscribeResource({ uri: kept });
		await step([['persist/w.txt', 'three']], [], 'unsubscribed');
		const rejected = async (uri, code) => assert.rejects(s.client.subscribeResource({ uri }),
			(e) => e instanceof McpError && e.code === code, uri);
		for (const uri of ['file:///etc/passwd', 'sandbox:///app/persist/../../etc/passwd',
			'sandbox:///app/persist/%2e%2e/x', 'sandbox:///app/state/bin', 'sandbox:///app/persist/w.txt?offset=5',
			'sandbox:///app/persist//w.txt', 'test://watched-resource'])
			await rejected(uri, -32002);
		await assert.rejects(s.client.request({ method: 'resources/subscribe', params: {} },
			(await import('@modelcontextprotocol/sdk/types.js')).EmptyResultSchema), (e) => e.code === -32602);
		// at most 32 files watched
		for (let i = 0; i < 31; i++)
			await s.client.subscribeResource({ uri: `sandbox:///app/persist/f${i}` });
		await rejected('sandbox:///app/persist/one-too-many', -32602);
		await s.client.subscribeResource({ uri: 'sandbox:///app/persist/f0' }); // again: still 32
	} finally {
		await s.close();
	}
});

test('the capability is advertised; reads are read-only (no write method)', T, async () => {
	const session = await live();
	const caps = session.client.getServerCapabilities();
	assert.equal(caps.resources?.listChanged, true);
	await assert.rejects(session.client.request({ method: 'resources/write', params: { uri: 'sandbox:///app/persist/x' } },
		(await import('@modelcontextprotocol/sdk/types.js')).EmptyResultSchema), /Method not found/);
});

/* kgExec - kode-gopher exec with args in a sandbox root of its own; resolves {code, stdout, stderr} */
function kgExec(args) {
	const root = fs.mkdtempSync(path.join(os.tmpdir(), 'kg-e2e-exec-'));
	return new Promise((resolve, reject) => {
		const env = { ...process.env, KODE_GOPHER_SANDBOX_ROOT: root };
		for (const k of ['NODE_TEST_CONTEXT', 'NODE_OPTIONS', 'NODE_CHANNEL_FD'])
			delete env[k];
		const child = spawn(BIN, ['exec', '--credentials', 'none', ...args], { env, stdio: ['ignore', 'pipe', 'pipe'] });
		let stdout = '', stderr = '';
		child.stdout.on('data', (d) => (stdout += d));
		child.stderr.on('data', (d) => (stderr += d));
		child.on('error', reject);
		child.on('close', (code) => {
			fs.rmSync(root, { recursive: true, force: true });
			resolve({ code, stdout, stderr });
		});
	});
}

test('exec: a go test summary with the failing tests\' output, --out writes the artifacts, --json carries them', T, async () => {
	const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kg-e2e-exec-src-'));
	const out = fs.mkdtempSync(path.join(os.tmpdir(), 'kg-e2e-exec-out-'));
	fs.writeFileSync(path.join(dir, 'calc.go'), LIB);
	fs.writeFileSync(path.join(dir, 'calc_test.go'), `package calc

import (
	"os"
	"testing"
)

func TestAdd(t *testing.T) {
	if Add(2, 3) != 5 {
		t.Fatal("2+3")
	}
}

func TestWrong(t *testing.T) {
	t.Log("about to fail")
	t.Errorf("Sign(3) = %d, want 0", Sign(3))
}

func TestWrites(t *testing.T) {
	big := make([]byte, 3<<20) // over the 2 MiB a result embeds: --out reads it in pieces
	big[len(big)-1] = 'Z'
	dir := os.Getenv("KODE_GOPHER_OUT")
	os.MkdirAll(dir+"/sub", 0o755)
	os.WriteFile(dir+"/sub/report.txt", []byte("hello from a test\\n"), 0o644)
	os.WriteFile(dir+"/big.bin", big, 0o644)
}
`);
	try {
		const r = await kgExec(['--out', out, dir]);
		assert.equal(r.code, 1, r.stderr);
		assert.match(r.stdout, /=== RUN {3}TestWrong\n {4}calc_test.go:\d+: about to fail\n {4}calc_test.go:\d+: Sign\(3\) = 1, want 0\n--- FAIL: TestWrong/, r.stderr);
		assert.doesNotMatch(r.stdout, /TestAdd/, 'passing tests are not shown, as with go test');
		assert.match(r.stdout, /^FAIL\tapp\t\d+\.\d{3}s$/m);
		assert.match(r.stderr, /2 passed, 1 failed, 0 skipped of 3 tests in 1 package/);
		assert.match(r.stderr, /test_failure \(test\): 1 of 3 tests failed: TestWrong/);
		assert.equal(fs.readFileSync(path.join(out, 'sub', 'report.txt'), 'utf8'), 'hello from a test\n');
		const big = fs.readFileSync(path.join(out, 'big.bin'));
		assert.equal(big.length, 3 << 20);
		assert.equal(big[big.length - 1], 'Z'.charCodeAt(0));

		const j = await kgExec(['--json', '--run', 'Add|Writes', '--cover', dir]);
		assert.equal(j.code, 0, j.stderr);
		const s = JSON.parse(j.stdout);
		assert.equal(s.phase, 'test');
		assert.equal(typeof s.packages[0].coverage, 'number');
		const rep = s.artifacts.find((a) => a.name === 'sub/report.txt');
		assert.equal(rep.text, 'hello from a test\n');
		assert.equal(s.artifacts.find((a) => a.name === 'big.bin').embedded, false);
	} finally {
		fs.rmSync(dir, { recursive: true, force: true });
		fs.rmSync(out, { recursive: true, force: true });
	}
});
