/*
 * pipeline.test.mjs - execute_go_code and lookup_package_docs end to end: the SDK client, the
 * real `kode-gopher serve`, the sandbox's agent and the real Go toolchain against the warm
 * caches. Covers the result kinds (ok, error, panic, goroutine panic, unencodable, timeout),
 * programs and exit codes, build diagnostics, multi-file modules, tidying, the Google Cloud
 * libraries, output caps, the build cache, and go doc.
 *
 * One session serves most tests (as one model would use it): builds are the slow part on 2
 * cores, and a session's caches survive between calls. Run by tests/run.sh (node --test).
 */
import assert from 'node:assert/strict';
import test from 'node:test';

import {
	callTool, execGo, sc, sharedSession, show, snippet, text,
} from './lib.mjs';

const T = { timeout: 300_000 };
const live = sharedSession();


/* exec - execute_go_code in the shared session; returns [result, structuredContent] */
const exec = async (args) => execGo(await live(), args);

test('snippet returning a struct → kind ok with its fields', T, async () => {
	const [res, s] = await exec({
		code: snippet(`\ttype Gopher struct {\n\t\tName string \`json:"name"\`\n\t\tAge  int    \`json:"age"\`\n\t\tTags []string\n\t}\n\treturn Gopher{Name: "gopher", Age: 16, Tags: []string{"go", "c"}}, nil`),
	});
	assert.equal(res.isError, false, show(s));
	assert.equal(s.phase, 'run');
	assert.equal(s.mode, 'wrapped');
	assert.equal(s.exit_code, 0);
	assert.equal(s.result.kind, 'ok', show(s));
	assert.deepEqual(s.result.value, { name: 'gopher', age: 16, Tags: ['go', 'c'] });
	assert.equal(typeof s.build_ms, 'number');
	assert.equal(typeof s.duration_ms, 'number');
	assert.equal(s.tidied, false);
	// the text block carries the same result as JSON
	assert.deepEqual(JSON.parse(text(res)).result, s.result);
});

test('snippet writing to stdout and stderr, returning nil', T, async () => {
	const [res, s] = await exec({
		code: snippet('\tfmt.Println("to stdout")\n\tfmt.Fprintln(os.Stderr, "to stderr")\n\treturn nil, nil', ['fmt', 'os']),
	});
	assert.equal(res.isError, false, show(s));
	assert.equal(s.result.kind, 'ok');
	assert.equal(s.result.value, null);
	assert.equal(s.stdout, 'to stdout\n');
	assert.equal(s.stderr, 'to stderr\n');
});

test('snippet returning an error → kind error, isError true', T, async () => {
	const [res, s] = await exec({ code: snippet('\treturn nil, fmt.Errorf("bucket %q not found", "b1")', ['fmt']) });
	assert.equal(res.isError, true, show(s));
	assert.equal(s.phase, 'run');
	assert.equal(s.result.kind, 'error', show(s));
	assert.equal(s.result.message, 'bucket "b1" not found');
});

test('snippet panicking → kind panic with a stack', T, async () => {
	const [res, s] = await exec({ code: snippet('\tvar m map[string]int\n\tm["x"] = 1\n\treturn m, nil') });
	assert.equal(res.isError, true, show(s));
	assert.equal(s.result.kind, 'panic', show(s));
	assert.match(s.result.message, /nil map/);
	assert.match(s.result.stack, /main\.go:\d+/);
	assert.match(s.result.stack, /run/);
});

test('snippet panicking in another goroutine → kind panic, stack names the goroutine', T, async () => {
	const [res, s] = await exec({
		code: snippet('\tgo func() { panic("from a goroutine") }()\n\ttime.Sleep(time.Hour)\n\treturn "not reached", nil', ['time']),
	});
	assert.equal(res.isError, true, show(s));
	assert.equal(s.result.kind, 'panic', show(s));
	assert.match(s.result.message || '', /from a goroutine/);
	assert.match(s.result.stack, /goroutine \d+/);
	// the program sleeps an hour: only the goroutine's panic can have ended it with kind panic
	// (the call's timeout would say timeout), so no clock is read here
});

test('snippet returning a channel → kind unencodable', T, async () => {
	const [res, s] = await exec({ code: snippet('\treturn make(chan int), nil') });
	assert.equal(res.isError, true, show(s));
	assert.equal(s.result.kind, 'unencodable', show(s));
	assert.match(s.result.message, /chan int/);
});

test('program with os.Exit(3) → mode program, exit_code 3, its output', T, async () => {
	const [res, s] = await exec({
		code: 'package main\n\nimport (\n\t"fmt"\n\t"os"\n)\n\nfunc main() {\n\tfmt.Println("hello from main")\n\tos.Exit(3)\n}\n',
	});
	assert.equal(s.phase, 'run', show(s));
	assert.equal(s.mode, 'program');
	assert.equal(s.exit_code, 3);
	assert.equal(s.result.kind, 'exit', show(s));
	assert.equal(s.stdout, 'hello from main\n');
	assert.equal(res.isError, true, 'a non-zero exit is something to look at');
});

test('program exiting 0 → isError false', T, async () => {
	const [res, s] = await exec({ code: 'package main\n\nimport "fmt"\n\nfunc main() { fmt.Print("fine") }\n' });
	assert.equal(s.mode, 'program', show(s));
	assert.equal(s.exit_code, 0);
	assert.equal(s.stdout, 'fine');
	assert.equal(s.result.kind, 'ok');
	assert.equal(res.isError, false, show(s));
});

test('build error → phase build with parsed diagnostics on main.go', T, async () => {
	const [res, s] = await exec({ code: snippet('\tx := 1\n\treturn undefinedName, nil') });
	assert.equal(res.isError, true);
	assert.equal(s.phase, 'build', show(s));
	assert.ok(Array.isArray(s.diagnostics) && s.diagnostics.length >= 1, show(s));
	const d = s.diagnostics[0];
	assert.equal(d.file, 'main.go');
	assert.equal(typeof d.line, 'number');
	assert.equal(typeof d.column, 'number');
	assert.ok(d.line >= 8 && d.line <= 9, `line ${d.line} is in run's body`);
	const all = s.diagnostics.map((x) => x.message).join('\n');
	assert.match(all, /undefined: undefinedName/);
	assert.match(all, /declared and not used: x/);
	assert.match(s.build_output || '', /main\.go:\d+:\d+/);
});

test('normalize error: package main without func main', T, async () => {
	const [res, s] = await exec({ code: 'package main\n\nfunc helper() {}\n' });
	assert.equal(res.isError, true);
	assert.equal(s.phase, 'normalize', show(s));
	assert.match(s.result.message, /main/);
});

test('multi-file: helper package imported as "app/<dir>"', T, async () => {
	const [res, s] = await exec({
		files: [
			{ path: 'main.go', content: snippet('\treturn map[string]any{"sum": mathx.Sum(1, 2, 3), "greeting": greet()}, nil', ['app/mathx']) },
			{ path: 'greet.go', content: 'package snippet\n\nfunc greet() string { return "hi" }\n' },
			{ path: 'mathx/mathx.go', content: 'package mathx\n\n// Sum adds.\nfunc Sum(xs ...int) int {\n\tt := 0\n\tfor _, x := range xs {\n\t\tt += x\n\t}\n\treturn t\n}\n' },
		],
	});
	assert.equal(res.isError, false, show(s));
	assert.deepEqual(s.result.value, { sum: 6, greeting: 'hi' });
});

test('import outside the lockfile (github.com/dustin/go-humanize) is tidied in', T, async () => {
	// github.com/google/uuid would not do: the lockfile has it as an indirect dependency of the
	// Cloud libraries, so it builds without a tidy
	const code = snippet('\treturn humanize.Bytes(82854982), nil', ['github.com/dustin/go-humanize']);
	const steps = [];
	const res = await callTool((await live()).client, 'execute_go_code', { code },
		{ onprogress: (p) => steps.push(p.message || '') });
	const s = sc(res);
	assert.equal(res.isError, false, show(s));
	assert.equal(s.tidied, true, show(s));
	assert.equal(s.result.value, '83 MB');
	// the imports say that no module of go.mod provides humanize: it is resolved first, with
	// no go build before that would only fail on it (issue 17)
	const tidy = steps.findIndex((m) => /adding the modules for github\.com\/dustin\/go-humanize/.test(m));
	assert.ok(tidy >= 0, `no tidy step: ${JSON.stringify(steps)}`);
	assert.ok(!steps.slice(0, tidy).some((m) => /go build|compiling/.test(m)), `a build before the tidy: ${JSON.stringify(steps)}`);
	// the session remembers the tidied go.mod: the next call needs no new tidy
	const [, again] = await exec({ code: code.replace('82854982', '1000') });
	assert.equal(again.result.value, '1.0 kB', show(again));
	assert.equal(again.tidied, false, show(again));
});

test('an import in the lockfile only indirectly (github.com/google/uuid) builds', T, async () => {
	const [res, s] = await exec({ code: snippet('\treturn len(uuid.NewString()), nil', ['github.com/google/uuid']) });
	assert.equal(res.isError, false, show(s));
	assert.equal(s.result.value, 36);
});

test('Google Cloud Storage client constructs without credentials', T, async () => {
	const [res, s] = await exec({
		code: snippet('\tc, err := storage.NewClient(ctx, option.WithoutAuthentication())\n\tif err != nil {\n\t\treturn nil, err\n\t}\n\tdefer c.Close()\n\treturn fmt.Sprintf("%T", c), nil',
			['fmt', 'cloud.google.com/go/storage', 'google.golang.org/api/option']),
	});
	assert.equal(res.isError, false, show(s));
	assert.equal(s.result.kind, 'ok');
	assert.equal(s.result.value, '*storage.Client');
	assert.equal(s.tidied, false, 'storage is in the lockfile');
});

test('timeout: timeout_seconds 2 with a long sleep → kind timeout', T, async () => {
	const t0 = Date.now();
	const [res, s] = await exec({
		code: snippet('\ttime.Sleep(60 * time.Second)\n\treturn "late", nil', ['time']),
		timeout_seconds: 2,
	});
	assert.equal(res.isError, true);
	assert.equal(s.result.kind, 'timeout', show(s));
	assert.ok(Date.now() - t0 < 30_000, 'the call ends soon after the timeout');
});

test('10 MiB of output → stdout capped near 1 MiB with head, tail and an omission marker', T, async () => {
	const [res, s] = await exec({
		code: snippet('\tline := strings.Repeat("z", 1023) + "\\n"\n\tw := bufio.NewWriter(os.Stdout)\n\tfmt.Fprint(w, "HEAD-MARK\\n")\n\tfor i := 0; i < 10*1024; i++ {\n\t\tw.WriteString(line)\n\t}\n\tfmt.Fprint(w, "TAIL-MARK\\n")\n\tw.Flush()\n\treturn "done", nil',
			['bufio', 'fmt', 'os', 'strings']),
	});
	assert.equal(s.result.kind, 'ok', show({ ...s, stdout: s.stdout?.slice(0, 100) }));
	assert.equal(res.isError, false);
	assert.equal(s.stdout_truncated, true);
	const n = Buffer.byteLength(s.stdout);
	assert.ok(n > 900 * 1024 && n < 1100 * 1024, `stdout is ${n} bytes`);
	assert.ok(s.stdout.startsWith('HEAD-MARK\n'));
	assert.ok(s.stdout.endsWith('TAIL-MARK\n'));
	assert.match(s.stdout, /bytes omitted/);
});

test('resubmitting an identical snippet → cached_build true', T, async () => {
	const code = snippet('\treturn "cache me", nil');
	const [, a] = await exec({ code });
	assert.equal(a.result.value, 'cache me', show(a));
	const [, b] = await exec({ code });
	assert.equal(b.result.value, 'cache me', show(b));
	assert.equal(b.cached_build, true, show(b));
});

test('/app/persist keeps files across calls; the rest of /app is wiped', T, async () => {
	const [, a] = await exec({
		code: snippet('\tif err := os.MkdirAll("/app/persist", 0o755); err != nil {\n\t\treturn nil, err\n\t}\n\tif err := os.WriteFile("persist/kept.txt", []byte("kept"), 0o644); err != nil {\n\t\treturn nil, err\n\t}\n\treturn nil, os.WriteFile("scratch.txt", []byte("gone"), 0o644)', ['os']),
	});
	assert.equal(a.result.kind, 'ok', show(a));
	const [, b] = await exec({
		code: snippet('\tkept, err := os.ReadFile("persist/kept.txt")\n\t_, err2 := os.Stat("scratch.txt")\n\treturn map[string]any{"kept": string(kept), "err": err == nil, "scratchGone": os.IsNotExist(err2)}, nil', ['os']),
	});
	assert.equal(b.result.kind, 'ok', show(b));
	assert.deepEqual(b.result.value, { kept: 'kept', err: true, scratchGone: true });
});

/* doc - lookup_package_docs in the shared session */
async function doc(args) {
	return callTool((await live()).client, 'lookup_package_docs', args);
}

test('lookup_package_docs: fmt Println', T, async () => {
	const res = await doc({ package: 'fmt', symbol: 'Println' });
	assert.equal(res.isError ?? false, false, text(res));
	assert.match(text(res), /func Println\(a \.\.\.any\) \(n int, err error\)/);
	assert.equal(sc(res).package, 'fmt');
	assert.equal(typeof sc(res).truncated, 'boolean');
});

test('lookup_package_docs: cloud.google.com/go/storage Client', T, async () => {
	const res = await doc({ package: 'cloud.google.com/go/storage', symbol: 'Client' });
	assert.equal(res.isError ?? false, false, text(res));
	assert.match(text(res), /type Client struct/);
});

test('lookup_package_docs: a package without an import comment is headed with its import path', T, async () => {
	// github.com/google/uuid (in the lockfile) has no `// import` comment: go doc on its
	// directory said `package uuid // import "."`
	for (const args of [{ package: 'github.com/google/uuid' }, { package: 'github.com/google/uuid', symbol: 'New' }]) {
		const res = await doc(args);
		assert.equal(res.isError ?? false, false, text(res));
		assert.match(text(res), /^package uuid \/\/ import "github\.com\/google\/uuid"\n/);
		assert.doesNotMatch(text(res), /import "\."/);
	}
});

test('lookup_package_docs: a whole package and a Type.Method', T, async () => {
	const pkg = await doc({ package: 'strings' });
	assert.equal(pkg.isError ?? false, false, text(pkg));
	assert.match(text(pkg), /package strings/);
	const m = await doc({ package: 'strings', symbol: 'Builder.WriteString' });
	assert.equal(m.isError ?? false, false, text(m));
	assert.match(text(m), /func \(b \*Builder\) WriteString/);
});

test('lookup_package_docs: an unknown package → isError', T, async () => {
	const res = await doc({ package: 'example.invalid/no/such/pkg' });
	assert.equal(res.isError, true, text(res));
	assert.ok(text(res).length > 0);
	const sym = await doc({ package: 'fmt', symbol: 'NoSuchSymbol' });
	assert.equal(sym.isError, true, text(sym));
});
