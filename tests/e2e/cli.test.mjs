/*
 * cli.test.mjs - the command line as a new user meets it: `kode-gopher exec` run from another
 * directory with absolute paths, a directory and a subdirectory package; the user's own file
 * names in diagnostics and stacks; output that reads like `go run`'s (the program's output,
 * then one summary line, errors once, no colour on a pipe); the exit statuses `exec --help`
 * documents; option mistakes said in one line with the nearest option; `sandboxes list` and
 * its --sandbox-root. Every run is the real binary with the real sandbox. Run by tests/run.sh.
 */
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import test, { after } from 'node:test';

import { BIN, run, snippet } from './lib.mjs';

const T = { timeout: 300_000 };
const scratch = fs.mkdtempSync(path.join(os.tmpdir(), 'kg-e2e-cli-'));
/* its own directory, as lifecycle.test.mjs's: the jail must reach it from its own identity */
const sandboxRoot = fs.mkdtempSync(path.join(os.tmpdir(), 'kg-e2e-cli-sandboxes-'));
/* a HOME without Application Default Credentials, as on a fresh laptop */
const home = path.join(scratch, 'home');
fs.mkdirSync(home);

after(() => {
	for (const d of [scratch, sandboxRoot])
		fs.rmSync(d, { recursive: true, force: true });
});

/* kg - `kode-gopher ARGS` in cwd with a fresh HOME; resolves {code, stdout, stderr} */
function kg(args, { input, cwd = scratch, env = {} } = {}) {
	return run(args, {
		input, cwd, timeout: 240_000,
		env: { HOME: home, KODE_GOPHER_SANDBOX_ROOT: sandboxRoot, ...env },
		drop: ['GOOGLE_APPLICATION_CREDENTIALS', 'CLOUDSDK_CONFIG', 'XDG_STATE_HOME'],
	});
}

/* write - files under a new directory of the scratch space; returns its absolute path */
function write(dir, files) {
	const root = path.join(scratch, dir);
	for (const [p, content] of Object.entries(files)) {
		fs.mkdirSync(path.dirname(path.join(root, p)), { recursive: true });
		fs.writeFileSync(path.join(root, p), content);
	}
	return root;
}

/* lines - the non-empty lines of a stream */
const lines = (s) => s.split('\n').filter(Boolean);

const MODULE = {
	'main.go': 'package snippet\n\nimport (\n\t"context"\n\n\t"app/util"\n)\n\n' +
		'func run(ctx context.Context) (any, error) { return util.Double(21), nil }\n',
	'util/util.go': 'package util\n\nfunc Double(n int) int { return 2 * n }\n',
};

test('exec from another directory: absolute paths, a directory, a subdirectory package', T, async () => {
	const root = write('module', MODULE);
	const elsewhere = write('elsewhere', { 'README': 'not Go\n' });
	const abs = await kg(['exec', path.join(root, 'main.go'), path.join(root, 'util', 'util.go')], { cwd: elsewhere });
	assert.equal(abs.code, 0, abs.stderr);
	assert.equal(abs.stdout, '42\n');
	const dir = await kg(['exec', root], { cwd: elsewhere });
	assert.equal(dir.code, 0, dir.stderr);
	assert.equal(dir.stdout, '42\n');
	// relative paths that climb out of the working directory name the same module
	const rel = await kg(['exec', '../module/util/util.go', '../module/main.go'], { cwd: elsewhere });
	assert.equal(rel.code, 0, rel.stderr);
	assert.equal(rel.stdout, '42\n');
	// a binary file under the directory is left out, and says so; named, it is refused
	fs.writeFileSync(path.join(root, 'blob.bin'), Buffer.from([0xff, 0xfe, 0x00, 0x80]));
	const bin = await kg(['exec', root], { cwd: elsewhere });
	assert.equal(bin.code, 0, bin.stderr);
	assert.match(bin.stderr, /^kode-gopher exec: leaving out blob\.bin: it is not UTF-8 text/m);
	const named = await kg(['exec', path.join(root, 'main.go'), path.join(root, 'blob.bin')], { cwd: elsewhere });
	assert.equal(named.code, 2, named.stderr);
	assert.match(named.stderr, /blob\.bin is not UTF-8 text/);
	fs.rmSync(path.join(root, 'blob.bin'));
	// a pipe (bash's `exec <(generate)`) is read as one unnamed file
	const piped = await spawnOut('bash', ['-c', `"${BIN}" exec <(printf '%s' "$SRC")`],
		{ SRC: 'package main\n\nimport "fmt"\n\nfunc main() { fmt.Println("piped") }\n' });
	assert.equal(piped.code, 0, piped.stdout);
	assert.equal(piped.stdout, 'piped\n');
	// the same with --json: the files went as files, with their paths under the module
	const j = await kg(['exec', '--json', root], { cwd: '/' });
	assert.equal(j.code, 0, j.stderr);
	assert.equal(JSON.parse(j.stdout).result.value, 42);
});

test('exec of a standard-library program: a new sandbox, and its first build is direct from the runtime\'s plan', T, async () => {
	// a main package no run has built before (so the binary cache cannot answer)
	const tag = `${process.pid}-${Date.now()}`;
	const dir = write('stdplan', {
		'main.go': `package main\n\nimport (\n\t"fmt"\n\t"strings"\n)\n\nfunc main() { fmt.Println(strings.ToUpper("${tag}")) }\n`,
	});
	const j = await kg(['exec', '--json', path.join(dir, 'main.go')]);
	assert.equal(j.code, 0, j.stderr);
	const r = JSON.parse(j.stdout);
	assert.equal(r.stdout, `${tag.toUpperCase()}\n`);
	assert.equal(r.build_path, 'direct', `${r.build_path_reason} (make runtime writes the runtime's stdplan)`);
	assert.equal(r.cached_build, false);
});

test('exec names the user\'s file in diagnostics and in stacks', T, async () => {
	const dir = write('names', {
		'myfile.go': 'package main\n\nfunc main() {\n\tvar n int = "x"\n\t_ = n\n}\n',
		'panics.go': 'package main\n\nimport "fmt"\n\nfunc main() {\n\tfmt.Println("before")\n\tvar m map[string]int\n\tm["a"] = 1\n}\n',
		'snip.go': snippet('\tvar m map[string]int\n\tm["a"] = 1\n\treturn nil, nil'),
	});
	const b = await kg(['exec', path.join(dir, 'myfile.go')]);
	assert.equal(b.code, 1, b.stderr);
	assert.match(b.stderr, /^myfile\.go:4:14: cannot use "x"/m);
	assert.doesNotMatch(b.stderr, /main\.go/);
	// the error once, then one summary line
	assert.equal(b.stderr.match(/cannot use "x"/g).length, 1, b.stderr);
	assert.match(lines(b.stderr).at(-1), /^build_error \(program\): 1 error · build \d+ ms$/);
	assert.equal(b.stdout, '');

	const p = await kg(['exec', path.join(dir, 'panics.go')]);
	assert.equal(p.code, 1, p.stderr);
	assert.equal(p.stdout, 'before\n');
	assert.match(p.stderr, /app\/panics\.go:8/);
	// the stack is the program's own stderr, not repeated after it
	assert.equal(p.stderr.match(/goroutine 1 \[running\]/g).length, 1, p.stderr);
	assert.match(lines(p.stderr).at(-1), /^panic \(program\): assignment to entry in nil map · build \d+ ms(?: \(cached\))?, run \d+ ms, exit 2$/);

	const s = await kg(['exec', path.join(dir, 'snip.go')]);
	assert.equal(s.code, 1, s.stderr);
	assert.match(s.stderr, /app\/snip\.go:/);
	assert.equal(s.stderr.match(/goroutine \d+ \[running\]/g).length, 1, s.stderr);
	assert.match(lines(s.stderr).at(-1), /^panic \(wrapped\): assignment to entry in nil map · /);
});

test('exec prints like go run: output, one summary line, no colour on a pipe, no ADC warning', T, async () => {
	const dir = write('output', {
		'hello.go': 'package main\n\nimport (\n\t"fmt"\n\t"os"\n)\n\nfunc main() {\n\tfmt.Println("to stdout")\n\tfmt.Fprintln(os.Stderr, "to stderr")\n}\n',
		'value.go': snippet('\treturn map[string]int{"n": 7}, nil'),
		'err.go': snippet('\treturn nil, errors.New("it went wrong")', ['errors']),
		'glued.go': snippet('\tfmt.Print("no newline")\n\treturn "v", nil', ['fmt']),
		'big.go': 'package main\n\nimport (\n\t"fmt"\n\t"strings"\n)\n\nfunc main() { fmt.Print(strings.Repeat("x", 3<<20)) }\n',
		'nomain.go': 'package main\n\nfunc helper() {}\n',
		'cgo.go': 'package main\n\n// #include <stdlib.h>\nimport "C"\n\nfunc main() {}\n',
	});
	const h = await kg(['exec', path.join(dir, 'hello.go')]);
	assert.equal(h.code, 0, h.stderr);
	assert.equal(h.stdout, 'to stdout\n');
	// nothing but the program's stderr and the summary: no worker log line about credentials
	assert.deepEqual(lines(h.stderr).slice(0, -1), ['to stderr'], h.stderr);
	assert.match(lines(h.stderr).at(-1), /^ok \(program\) · build \d+ ms(?: \(cached\))?, run \d+ ms, exit 0$/);
	assert.doesNotMatch(h.stderr + h.stdout, /\x1b\[/, 'no colour when stderr is not a terminal');

	const v = await kg(['exec', path.join(dir, 'value.go')]);
	assert.equal(v.code, 0, v.stderr);
	assert.deepEqual(JSON.parse(v.stdout), { n: 7 });
	assert.equal(lines(v.stderr).length, 1, v.stderr);

	// output without a final newline, then the value on a line of its own
	const glued = await kg(['exec', path.join(dir, 'glued.go')]);
	assert.equal(glued.code, 0, glued.stderr);
	assert.equal(glued.stdout, 'no newline\n"v"\n');

	const e = await kg(['exec', path.join(dir, 'err.go')]);
	assert.equal(e.code, 1, e.stderr);
	assert.equal(e.stdout, '');
	assert.match(e.stderr, /^error \(wrapped\): it went wrong · build \d+ ms(?: \(cached\))?, run \d+ ms, exit 1\n$/);

	const big = await kg(['exec', path.join(dir, 'big.go')]);
	assert.equal(big.code, 0, big.stderr);
	assert.match(big.stdout, /bytes omitted/);
	assert.match(lines(big.stderr).at(-1), /stdout truncated to its first and last 512 KiB$/);

	// a normalize error is its message: nothing was built or run, so no timings
	const n = await kg(['exec', path.join(dir, 'nomain.go')]);
	assert.equal(n.code, 1, n.stderr);
	assert.equal(lines(n.stderr).length, 1, n.stderr);
	assert.match(n.stderr, /^normalize_error: package main needs func main\(\)/);
	assert.doesNotMatch(n.stderr, /build 0 ms|run 0 ms/);

	const c = await kg(['exec', path.join(dir, 'cgo.go')]);
	assert.equal(c.code, 1, c.stderr);
	assert.match(c.stderr, /^normalize_error: cgo\.go:4: import "C" needs cgo, and cgo is off in the sandbox/);
});

test('on a terminal: exec in colour, progress on one line that is cleared; serve says what it waits for', T, async () => {
	const root = write('tty', MODULE);
	// script(1) (util-linux, in every Debian) gives exec a terminal; -e passes its exit status on
	const r = await spawnOut('script', ['-qec', `${BIN} exec ${root}`, '/dev/null']);
	assert.equal(r.code, 0, r.stdout);
	assert.match(r.stdout, /(^|\x1b\[K)42\r\n/);
	assert.match(r.stdout, /\x1b\[1;32mok\x1b\[0m \(wrapped\) · build/);
	assert.doesNotMatch(r.stdout, /…[^\r\n]*\r\n/, 'a progress line left behind');
	const bad = await spawnOut('script', ['-qec', `${BIN} exec ${root}/util/util.go`, '/dev/null']);
	assert.equal(bad.code, 1, bad.stdout);
	assert.match(bad.stdout, /\x1b\[1;31mnormalize_error\x1b\[0m: /);
	// serve typed at a terminal says what it waits for (script's stdin ends, so serve ends)
	const serve = await spawnOut('script', ['-qec', `${BIN} serve --credentials none --log-level warn`, '/dev/null']);
	assert.equal(serve.code, 0, serve.stdout);
	assert.match(serve.stdout, /^kode-gopher serve: waiting for MCP messages .*use `kode-gopher exec FILE`/);
	// NO_COLOR (no-color.org) turns it off on a terminal too
	const plain = await spawnOut('script', ['-qec', `${BIN} exec ${root}`, '/dev/null'], { NO_COLOR: '1' });
	assert.doesNotMatch(plain.stdout, /\x1b\[1;3/);
});

/* spawnOut - a command with the test's environment; resolves {code, stdout, stderr} */
function spawnOut(cmd, args, extra = {}) {
	return run(args, {
		cmd, cwd: scratch,
		env: { HOME: home, KODE_GOPHER_SANDBOX_ROOT: sandboxRoot, TERM: 'xterm', ...extra },
		drop: ['GOOGLE_APPLICATION_CREDENTIALS', ...(extra.NO_COLOR ? [] : ['NO_COLOR'])],
	});
}

test('exec: exit 2 for usage and server errors, each said in one line', T, async () => {
	const dir = write('usage', { 'ok.go': snippet('\treturn 1, nil') });
	const ok = path.join(dir, 'ok.go');
	const cases = [
		[['exec', '--jsn', ok], /^kode-gopher exec: unknown option --jsn; did you mean --json\?$/],
		[['exec', '--sandbox-rot', '/tmp', ok], /did you mean --sandbox-root\?$/],
		[['exec', '--sandbox', '/tmp', ok], /--sandbox is short for more than one option: --sandbox-root --sandbox-network/],
		[['exec', ok, '--timeout'], /^kode-gopher exec: --timeout needs a value/],
		[['exec', '--timeout', '1000', ok], /^kode-gopher exec: --timeout wants whole seconds from 1 to 300 .*not "1000"$/],
		[['exec'], /^kode-gopher exec: name the Go files to run/],
		[['exec', path.join(dir, 'missing.go')], /^kode-gopher exec: cannot read .*missing\.go: No such file or directory$/],
		[['exec', '-', ok], /stdin\) is one file on its own/],
		[['exec', path.join(scratch, 'usage'), path.join(write('notes', { 'n.txt': 'x\n' }), 'n.txt')],
			new RegExp(`^kode-gopher exec: no \\.go file directly in ${scratch.replace(/\W/g, '\\$&')}, the directory that holds all the files`)],
		[['serve', '--htp'], /^kode-gopher serve: unknown option --htp; did you mean --http\?$/],
		[['serve', '--http', '--session-timeout', '5'], /--session-timeout wants a duration with its unit \(s, m or h\), like 5s or 5m, not "5"$/],
		[['serve', '--claim-lease', '10'], /--claim-lease wants a duration with its unit/],
		[['serve', '--http', '--max-connections-per-peer', '513'], /--max-connections-per-peer wants a whole number from 1 to 512, not "513"$/],
		[['serve', '--http', '127.0.0.1:1', '--accounting-log', path.join(scratch, 'no-dir', 'a.jsonl')],
			/--accounting-log .*no-dir\/a\.jsonl: cannot open it for appending: No such file or directory \(create its directory first/],
		[['serve', '--runtime-dir', path.join(scratch, 'no-runtime')],
			/^kode-gopher: no Go runtime caches in .*no-runtime .*No such file or directory\): run `make runtime`/],
		[['exce'], /^kode-gopher: unknown command "exce"; did you mean exec\?$/],
		[['sandboxes', 'list', '--sandbox-root'], /^kode-gopher sandboxes: --sandbox-root needs a value/],
	];
	// as root each sandbox is a user of its own: a root inside the (0700) scratch directory
	if (process.getuid() === 0)
		cases.push([['serve', '--sandbox-root', path.join(scratch, 'sb')],
			/^kode-gopher: --sandbox-root .*\/sb is inside .* \(mode 0700\), which other users cannot enter/]);
	for (const [args, want] of cases) {
		const r = await kg(args);
		assert.equal(r.code, 2, `${args.join(' ')}: ${r.stderr}`);
		assert.equal(lines(r.stderr).length, 1, `${args.join(' ')} says it in one line, not the help: ${r.stderr}`);
		assert.match(r.stderr.trim(), want, args.join(' '));
	}
	// `kode-gopher help exec` is `exec --help`, as `go help run`
	const help = await kg(['help', 'exec']);
	assert.equal(help.code, 0, help.stderr);
	assert.match(help.stdout, /^usage: kode-gopher exec /);
	// --project and --token-endpoint reach exec's server as they reach serve's
	const withProject = await kg(['exec', '--credentials', 'none', '--project', 'p-1', ok]);
	assert.equal(withProject.code, 0, withProject.stderr);
	// a sandbox that cannot be had is the server's failure, not the code's: exit 2
	const claim = await kg(['exec', '--claim', 'no-such-sandbox', ok]);
	assert.equal(claim.code, 2, claim.stderr);
	assert.match(claim.stderr, /no-such-sandbox/);
});

test('sandboxes list: says so when there are none; --sandbox-root names where', T, async () => {
	const empty = path.join(scratch, 'no-sandboxes-here');
	const r = await kg(['sandboxes', 'list', '--sandbox-root', empty]);
	assert.equal(r.code, 0, r.stderr);
	assert.equal(r.stdout, '', 'stdout stays an (empty) list for scripts');
	assert.match(r.stderr, new RegExp(`^no kept sandboxes in ${empty} `));
	fs.mkdirSync(path.join(empty, 'sb-one', 'app', 'persist'), { recursive: true });
	const bare = await kg(['sandboxes', 'list', `--sandbox-root=${empty}`]);
	const row = '^NAME\tPERSIST\tSTATE\tAGE\tSIZE\nsb-one\t%s\tidle\t\\d+s\t\\d+(\\.\\d)?[KMG]\n$';
	assert.match(bare.stdout, new RegExp(row.replace('%s', '-')), 'an empty /app/persist is not has-persist');
	fs.writeFileSync(path.join(empty, 'sb-one', 'app', 'persist', 'data'), 'x');
	const one = await kg(['sandboxes', 'list', `--sandbox-root=${empty}`]);
	assert.match(one.stdout, new RegExp(row.replace('%s', 'has-persist')));
	assert.equal(one.stderr, '');
	const rm = await kg(['sandboxes', '--sandbox-root', empty, 'rm', 'sb-one']);
	assert.equal(rm.code, 0, rm.stderr);
	assert.equal(fs.existsSync(path.join(empty, 'sb-one')), false);
});
