/*
 * directbuild.test.mjs - the direct build path (agent/fastbuild.c) through the real server, the
 * local sandbox and the real Go toolchain: the first call with an import set is built by go
 * build, later calls with the same imports by compile and link directly (build_path "direct");
 * a standard-library import set is direct from the first call, from the runtime's plan
 * (runtime/stdplan.sh, agent/stdplan.c; its refusals are in test_pipeline's test_seeded_plan),
 * and each kind of change a call can bring (new imports, helper packages, a build constraint, a
 * GOOS file suffix, embed, code that does not compile) goes back to go build with its reason.
 * The byte-for-byte comparison with go build, and the changes a call cannot bring (a changed
 * go.mod, cache file or toolchain), are in tests/unit/test_pipeline.c (test_direct_build).
 *
 * One session for the file, as a model would use it. Run by tests/run.sh (node --test).
 */
import assert from 'node:assert/strict';
import crypto from 'node:crypto';
import test from 'node:test';

import { execGo, sharedSession, show, snippet } from './lib.mjs';

const T = { timeout: 300_000 };
const live = sharedSession();
/* no two runs share a main package in the base build cache */
const nonce = crypto.randomBytes(4).toString('hex');

/* exec - execute_go_code in the shared session; returns [result, structuredContent] */
const exec = async (args) => execGo(await live(), args);

/* std - a standard-library snippet returning its tag */
const std = (tag, imports = ['fmt']) => snippet(`\treturn fmt.Sprint(${JSON.stringify(`${nonce} ${tag}`)}), nil`, imports);

/* ok - a call that must run to kind ok with value, built by path (and, for go build, why) */
async function ok(args, value, path, why) {
	const [res, s] = await exec(args);
	assert.equal(res.isError, false, show(s));
	assert.equal(s.result.kind, 'ok', show(s));
	assert.equal(s.result.value, value, show(s));
	assert.equal(s.build_path, path, show(s));
	if (why)
		assert.match(s.build_path_reason, why, show(s));
	if (path === 'direct')
		assert.equal(s.build_path_reason, undefined, show(s));
	return s;
}

test('a standard-library import set is direct from its first call (the runtime\'s plan)', T, async () => {
	await ok({ code: std('a1') }, `${nonce} a1`, 'direct');
	await ok({ code: std('a2') }, `${nonce} a2`, 'direct');
	// the same files again: the binary cache
	const s = await ok({ code: std('a2') }, `${nonce} a2`, 'cached');
	assert.equal(s.cached_build, true);
	// a program with the same imports as the generated main is another import set
	const prog = (n) => `package main\n\nimport "fmt"\n\nfunc main() { fmt.Print(${JSON.stringify(`${nonce} p${n}`)}) }\n`;
	const [, p1] = await exec({ code: prog(1) });
	assert.equal(p1.result.kind, 'ok', show(p1));
	assert.equal(p1.build_path, 'direct', show(p1));
	const [, p2] = await exec({ code: prog(2) });
	assert.equal(p2.stdout, `${nonce} p2`, show(p2));
	assert.equal(p2.build_path, 'direct', show(p2));
});

test('a new standard import set is direct at once too', T, async () => {
	const code = (tag) => snippet(`\treturn strings.ToUpper(fmt.Sprint(${JSON.stringify(`${nonce} ${tag}`)})), nil`, ['fmt', 'strings']);
	await ok({ code: code('b1') }, `${nonce} B1`.toUpperCase(), 'direct');
	await ok({ code: code('b2') }, `${nonce} B2`.toUpperCase(), 'direct');
	// the first set is still known
	await ok({ code: std('b3') }, `${nonce} b3`, 'direct');
});

test('what the direct path does not build goes to go build, with the reason', T, async () => {
	await ok({ code: std('c0') }, `${nonce} c0`, 'direct');
	await ok({
		files: [
			{ path: 'main.go', content: snippet('\treturn fmt.Sprint(h.N), nil', ['fmt', 'app/h']) },
			{ path: 'h/h.go', content: 'package h\n\nconst N = 7\n' },
		],
	}, '7', 'go build', /helper packages \(h\/h\.go\)/);
	await ok({
		files: [
			{ path: 'main.go', content: std('c1') },
			{ path: 'extra_linux.go', content: 'package snippet\n\nconst extra = 1\n' },
		],
	}, `${nonce} c1`, 'go build', /GOOS, GOARCH or _test suffix/);
	await ok({
		files: [
			{ path: 'main.go', content: std('c2') },
			{ path: 'extra.go', content: '//go:build linux\n\npackage snippet\n\nconst extra = 1\n' },
		],
	}, `${nonce} c2`, 'go build', /build constraint/);
	await ok({
		files: [
			{ path: 'main.go', content: snippet('\treturn strings.TrimSpace(data), nil', ['_ "embed"', 'strings']).replace('\t"_ "embed""', '\t_ "embed"') + '\n//go:embed data.txt\nvar data string\n' },
			{ path: 'data.txt', content: 'embedded\n' },
		],
	}, 'embedded', 'go build', /go:embed|imports embed/);
	// a second file in the top directory is still the main package: direct
	await ok({
		files: [
			{ path: 'main.go', content: std('c3') },
			{ path: 'more.go', content: 'package snippet\n\nconst more = 1\n' },
		],
	}, `${nonce} c3`, 'direct');
});

test('code that does not compile: the direct compile fails and go build reports the errors', T, async () => {
	await ok({ code: std('d0') }, `${nonce} d0`, 'direct');
	const [res, s] = await exec({ code: snippet('\treturn fmt.Sprint(undefinedName), nil', ['fmt']) });
	assert.equal(res.isError, true);
	assert.equal(s.phase, 'build', show(s));
	assert.equal(s.result.kind, 'build_error', show(s));
	assert.equal(s.build_path, 'go build', show(s));
	assert.match(s.build_path_reason, /direct compile failed/, show(s));
	assert.match(s.result.message, /undefined: undefinedName/);
	assert.equal(s.diagnostics[0].file, 'main.go', show(s));
	// and the plan is still good for the next call
	await ok({ code: std('d1') }, `${nonce} d1`, 'direct');
});

test('a module import goes to go build once (not in the runtime\'s plan), then that set is direct', T, async () => {
	const code = (tag) => snippet(`\tc, err := storage.NewClient(ctx, option.WithoutAuthentication())\n\tif err != nil {\n\t\treturn nil, err\n\t}\n\tdefer c.Close()\n\treturn fmt.Sprintf("%T %s", c, ${JSON.stringify(`${nonce} ${tag}`)}), nil`,
		['fmt', 'cloud.google.com/go/storage', 'google.golang.org/api/option']);
	await ok({ code: code('e1') }, `*storage.Client ${nonce} e1`, 'go build',
		/not built by go build before .*cloud\.google\.com\/go\/storage is not a standard package/);
	await ok({ code: code('e2') }, `*storage.Client ${nonce} e2`, 'direct');
});
