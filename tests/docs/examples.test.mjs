/*
 * examples.test.mjs - the shell examples of README.md and docs/*.md, run as a new user would.
 *
 * Every `kode-gopher` command in a ```sh block (also after `claude mcp add NAME --`, and the
 * MCP client configurations' "command"/"args") is checked against the real binary, in a fresh
 * directory per page where the page's own `mkdir -p DIR` and `cat > FILE <<'EOF'` lines have
 * run before it (so a page that runs `exec snippet.go` must show how snippet.go is made):
 * - `exec` on this machine runs for real and must exit 0 with an ok result, as the docs promise;
 * - `serve` (and `exec --backend kubernetes`, which needs a cluster) gets `--help` appended:
 *   getopt reads every option before it, so a flag or value the program would refuse fails;
 * - `sandboxes`, `doctor`, `version` and `--help` run as they are.
 * Commands of other programs (make, kubectl, gcloud, docker) are not run here. A last test checks
 * the other direction: every option `serve --help`, `exec --help`, `sandboxes --help` and
 * `doctor --help` list is documented.
 * Run by tests/run.sh with the e2e suites.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import test, { after } from 'node:test';
import { fileURLToPath } from 'node:url';

const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const BIN = process.env.KODE_GOPHER_BIN || path.join(REPO, 'build', 'kode-gopher');
const PAGES = ['README.md', ...fs.readdirSync(path.join(REPO, 'docs')).filter((f) => f.endsWith('.md')).sort()
	.map((f) => path.join('docs', f))];

const scratch = fs.mkdtempSync(path.join(os.tmpdir(), 'kg-docs-'));
const sandboxRoot = fs.mkdtempSync(path.join(os.tmpdir(), 'kg-docs-sandboxes-'));
const home = path.join(scratch, 'home'); /* no ADC file, as on a fresh machine */
fs.mkdirSync(home);
after(() => {
	for (const d of [scratch, sandboxRoot])
		fs.rmSync(d, { recursive: true, force: true });
});

/* blocks - the fenced blocks of a page whose info string is one of langs: [{line, text}] */
function blocks(page, langs) {
	const out = [];
	let cur = null;
	fs.readFileSync(path.join(REPO, page), 'utf8').split('\n').forEach((l, i) => {
		const fence = /^```(\S*)/.exec(l);
		if (fence && !cur)
			cur = { lang: fence[1], line: i + 2, lines: [] };
		else if (fence) {
			if (langs.includes(cur.lang))
				out.push({ line: cur.line, text: cur.lines.join('\n') });
			cur = null;
		} else if (cur)
			cur.lines.push(l);
	});
	return out;
}

/* words - one shell command line as words: quotes, a trailing comment, $PWD and ~ */
function words(line) {
	const out = [];
	let w = null;
	for (let i = 0; i < line.length; i++) {
		const c = line[i];
		if (c === "'" || c === '"') {
			const end = line.indexOf(c, i + 1);
			w = (w ?? '') + line.slice(i + 1, end < 0 ? line.length : end);
			i = end < 0 ? line.length : end;
		} else if (c === ' ' || c === '\t') {
			if (w !== null)
				out.push(w);
			w = null;
		} else if (c === '#' && w === null) {
			break;
		} else {
			w = (w ?? '') + c;
		}
	}
	if (w !== null)
		out.push(w);
	return out.map((x) => x.replace(/^\$PWD\//, `${REPO}/`).replace(/^~\//, `${home}/`));
}

/* commands - the shell commands of a page: [{where, argv, heredoc}] (continuations joined,
 * a here-document's lines attached to its command) */
function commands(page) {
	const out = [];
	for (const b of blocks(page, ['sh', 'bash', 'shell'])) {
		const ls = b.text.split('\n');
		for (let i = 0; i < ls.length; i++) {
			const at = b.line + i;
			let l = ls[i];
			while (/\\$/.test(l) && i + 1 < ls.length)
				l = l.slice(0, -1) + ' ' + ls[++i];
			if (!l.trim() || /^\s*#/.test(l))
				continue;
			const hd = /<<-?\s*'?(\w+)'?/.exec(l);
			let heredoc = null;
			if (hd) {
				const end = ls.indexOf(hd[1], i + 1);
				heredoc = ls.slice(i + 1, end < 0 ? ls.length : end).join('\n') + '\n';
				l = l.replace(hd[0], '');
				i = end < 0 ? ls.length : end;
			}
			out.push({ where: `${page}:${at}`, argv: words(l.trim()), heredoc });
		}
	}
	return out;
}

/* setup - a page's mkdir -p or cat > FILE <<EOF, done in dir; false for any other command */
function setup(c, dir) {
	const a = c.argv;
	if (a[0] === 'mkdir' && a[1] === '-p' && a.length > 2) {
		for (const d of a.slice(2))
			fs.mkdirSync(path.join(dir, d), { recursive: true });
		return true;
	}
	const to = a[0] === 'cat' && c.heredoc !== null ? (a[1] === '>' ? a[2] : /^>(.+)/.exec(a[1] || '')?.[1]) : null;
	if (!to)
		return false;
	fs.writeFileSync(path.join(dir, to), c.heredoc);
	return true;
}

/* kodeGopher - the kode-gopher command in argv (after `claude mcp add NAME --`), or null */
function kodeGopher(argv) {
	if (argv[0] === 'claude') {
		const dash = argv.indexOf('--');
		argv = dash < 0 ? [] : argv.slice(dash + 1);
	}
	return argv.length && /^([^=:]*\/)?kode-gopher$/.test(argv[0]) ? argv.slice(1) : null;
}

/* kg - the real binary with ARGS in the directory cwd; resolves {code, stdout, stderr} */
function kg(args, cwd = scratch) {
	return new Promise((resolve, reject) => {
		const env = { ...process.env, HOME: home, KODE_GOPHER_SANDBOX_ROOT: sandboxRoot };
		for (const k of ['NODE_TEST_CONTEXT', 'NODE_OPTIONS', 'NODE_CHANNEL_FD', 'GOOGLE_APPLICATION_CREDENTIALS',
			'CLOUDSDK_CONFIG', 'KUBECONFIG'])
			delete env[k];
		const child = spawn(BIN, args, { env, cwd, stdio: ['ignore', 'pipe', 'pipe'] });
		let stdout = '';
		let stderr = '';
		child.stdout.on('data', (d) => (stdout += d));
		child.stderr.on('data', (d) => (stderr += d));
		const timer = setTimeout(() => child.kill('SIGKILL'), 120_000);
		child.on('error', reject);
		child.on('close', (code, signal) => {
			clearTimeout(timer);
			resolve({ code: signal ? signal : code, stdout, stderr });
		});
	});
}

const T = { timeout: 180_000 };
let examples = 0;

for (const page of PAGES) {
	const dir = path.join(scratch, page.replace(/\W/g, '_'));
	fs.mkdirSync(dir);
	const steps = [];
	for (const c of commands(page)) {
		const args = kodeGopher(c.argv);
		if (!args) {
			steps.push(c); /* a mkdir or a here-document that a later example may need */
			continue;
		}
		if (args.some((a) => a === '...' || a === '…'))
			continue; /* "serve --http ... --backend kubernetes ...": not a command as it stands */
		examples++;
		const before = steps.slice();
		const name = `${c.where}: kode-gopher ${args.join(' ')}`;
		const sub = args[0];
		test(name, T, async () => {
			for (const s of before)
				setup(s, dir); /* idempotent: mkdir -p, and files written again */
			if (sub === 'exec' && !args.includes('kubernetes')) {
				const r = await kg(args, dir);
				assert.equal(r.code, 0, `stdout: ${r.stdout.slice(0, 2000)}\nstderr: ${r.stderr.slice(-2000)}`);
				if (args.includes('--json'))
					assert.equal(JSON.parse(r.stdout).result.kind, 'ok');
				else
					assert.match(r.stderr, /^ok \(/m, 'the summary line says ok');
			} else if (sub === 'serve' || sub === 'exec') {
				const r = await kg([...args, '--help'], dir);
				assert.equal(r.code, 0, `the program refuses it: ${r.stderr}`);
				assert.match(r.stdout, new RegExp(`^usage: kode-gopher ${sub} `));
			} else {
				const r = await kg(args, dir);
				assert.equal(r.code, 0, r.stderr);
			}
		});
	}
}

test('the pages hold kode-gopher examples', () => assert.ok(examples >= 8, `found only ${examples}`));

test('the MCP client configurations start a serve the program accepts', T, async () => {
	let n = 0;
	for (const page of PAGES)
		for (const b of blocks(page, ['json']).filter((x) => x.text.includes('"mcpServers"'))) {
			for (const [name, s] of Object.entries(JSON.parse(b.text).mcpServers)) {
				assert.match(s.command, /(^|\/)kode-gopher$/, `${page}:${b.line} ${name}`);
				const r = await kg([...s.args, '--help']);
				assert.equal(r.code, 0, `${page}:${b.line}: ${JSON.stringify(s.args)}: ${r.stderr}`);
				n++;
			}
		}
	assert.ok(n >= 2, `only ${n} client configurations found`);
});

test('every option serve --help and exec --help list is documented', T, async () => {
	const docs = PAGES.map((p) => fs.readFileSync(path.join(REPO, p), 'utf8')).join('\n');
	const missing = [];
	for (const sub of ['serve', 'exec', 'sandboxes', 'doctor']) {
		const r = await kg([sub, '--help']);
		assert.equal(r.code, 0, r.stderr);
		for (const opt of new Set(r.stdout.match(/--[a-z][a-z-]+/g)))
			if (opt !== '--help' && !new RegExp(`(^|[^\\w-])${opt}(?![\\w-])`, 'm').test(docs))
				missing.push(`${sub} ${opt}`);
	}
	assert.deepEqual(missing, [], 'options in --help that no page of README.md or docs/ mentions');
});
