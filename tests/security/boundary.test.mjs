/*
 * boundary.test.mjs - the boundary between the user's program, the agent, the worker and the
 * host (issue 12), tested by class of attack rather than by one example each:
 *   - nothing a program starts outlives its call, however it detaches;
 *   - the program cannot name the agent's process (signal, pidfd, prlimit, ptrace, /proc) nor
 *     write the agent's files (socket, state, binary cache, go.mod, the Go caches), so it cannot
 *     poison a later call;
 *   - a tree the program leaves (deep, odd modes, many entries) is always removed;
 *   - what a call writes to /tmp is gone (and uncharged) at the next call;
 *   - a value too deep to encode is the code's fault, with the limit named.
 * After each, the next call in the same session works, in the same sandbox, and another session
 * is unaffected. Driven through the real `kode-gopher serve` with the official MCP SDK client.
 */
import assert from 'node:assert/strict';
import { randomInt } from 'node:crypto';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import test from 'node:test';

import {
	callTool, connect, isAlive, procsMatching, sandboxEntries, sc, sharedSession, snippet, text, waitFor,
} from '../e2e/lib.mjs';

const T = { timeout: 300_000 };
const RUNTIME = process.env.KODE_GOPHER_RUNTIME_DIR || '/var/cache/kode-gopher/runtime';

const live = sharedSession();

/* show - a result for an assertion message */
const show = (s) => JSON.stringify(s).slice(0, 3000);

/* run - execute_go_code in session s (the shared one by default): [result, structured] */
async function run(code, s, extra = {}) {
	s = s || (await live());
	const res = await callTool(s.client, 'execute_go_code', { code, ...extra });
	const st = sc(res);
	assert.ok(st, `no structuredContent: ${text(res).slice(0, 1000)}`);
	return [res, st];
}

/* runOk - a call that must come back kind ok: its value */
async function runOk(code, s, extra) {
	const [res, st] = await run(code, s, extra);
	assert.equal(st.result.kind, 'ok', show(st));
	assert.equal(res.isError, false, show(st));
	return [st.result.value, st];
}

/* The follow-up: the processes the next program can see, and a fixed answer. */
const NEXT = snippet(
	'\tents, _ := os.ReadDir("/proc")\n\tvar pids []string\n\tfor _, e := range ents {\n' +
	'\t\tif _, err := strconv.Atoi(e.Name()); err == nil {\n\t\t\tpids = append(pids, e.Name())\n\t\t}\n\t}\n' +
	'\treturn map[string]any{"answer": 42, "pids": pids}, nil', ['os', 'strconv']);

/* nextCallWorks - the next call in s works in the same sandbox as prev, and sees no leftovers;
 * a call in another, fresh session works too */
async function nextCallWorks(s, prev) {
	const [value, st] = await runOk(NEXT, s);
	assert.equal(value.answer, 42);
	assert.equal(st.retried, false, `the next call needed a fresh sandbox: ${show(st)}`);
	if (prev)
		assert.equal(st.sandbox, prev.sandbox, 'the same sandbox ran the hostile call and the next one');
	// the program's namespace: its init and itself
	assert.ok(value.pids.length <= 2, `processes the next program sees: ${value.pids}`);
	const other = await connect();
	try {
		const [v2] = await runOk(NEXT, other);
		assert.equal(v2.answer, 42);
	} finally {
		await other.close();
	}
	return st;
}

test('nothing a program starts outlives its call: setsid, setpgid, double fork, ignored signals, CLONE_PARENT, a spinner', T, async () => {
	const mark = `9999.${randomInt(100000, 999999)}`;
	const code = String.raw`package snippet

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

func run(ctx context.Context) (any, error) {
	if os.Getenv("KG_SPIN") != "" {
		for {
		}
	}
	mark := "MARK"
	out := map[string]any{}
	start := func(name string, c *exec.Cmd) {
		if err := c.Start(); err != nil {
			out[name] = err.Error()
			return
		}
		out[name] = "started"
	}
	c := exec.Command("sleep", mark+"1")
	c.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	start("setsid", c)
	c = exec.Command("sleep", mark+"2")
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	start("setpgid", c)
	start("double fork", exec.Command("/bin/sh", "-c", "(setsid sleep "+mark+"3 </dev/null >/dev/null 2>&1 &); exit 0"))
	start("ignores signals", exec.Command("/bin/sh", "-c", "trap '' HUP INT TERM; nohup sleep "+mark+"4 </dev/null >/dev/null 2>&1 & exit 0"))
	c = exec.Command("sleep", mark+"5")
	c.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Cloneflags: syscall.CLONE_PARENT}
	start("clone parent", c)
	c = exec.Command("/proc/self/exe")
	c.Args = []string{"kg-spin-" + mark}
	c.Env = append(os.Environ(), "KG_SPIN=1")
	c.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	start("spinner", c)
	// return only once every one of them runs (the shells' children start on their own time)
	seen := 0
	for i := 0; i < 1200 && seen < 6; i++ { // up to 30 s on a loaded machine
		seen = 0
		ents, _ := os.ReadDir("/proc")
		for _, e := range ents {
			b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
			if err == nil && strings.Contains(string(b), mark) && !strings.Contains(string(b), "/bin/sh") {
				seen++
			}
		}
		time.Sleep(25 * time.Millisecond)
	}
	out["running"] = seen
	return out, nil
}
`.replaceAll('MARK', mark);
	const s = await live();
	const [value, st] = await runOk(code, s);
	for (const k of ['setsid', 'setpgid', 'double fork', 'ignores signals', 'clone parent', 'spinner'])
		assert.equal(value[k], 'started', `${k}: ${show(value)}`);
	assert.equal(value.running, 6, `all six were running when run returned: ${show(value)}`);
	// the call has returned: none of them may be left anywhere on the host
	const left = procsMatching(mark);
	assert.deepEqual(left, [], `processes of the call left running: ${left}`);
	await nextCallWorks(s, st);
});

test('the agent\'s process cannot be named: signals, pidfds from /proc, prlimit, ptrace, /proc files, for every pid in view', T, async () => {
	const code = String.raw`package snippet

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"syscall"
	"unsafe"
)

func run(ctx context.Context) (any, error) {
	out := map[string]string{}
	self := os.Getpid()
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if p, err := strconv.Atoi(e.Name()); err == nil && p != self {
			pids = append(pids, p)
		}
	}
	pids = append(pids, os.Getppid())
	out["pids"] = fmt.Sprint(pids)
	// the agent runs as this uid: everything of the uid at once
	out["setpriority uid"] = fmt.Sprint(syscall.Setpriority(syscall.PRIO_USER, 0, 19))
	out["setpriority own group"] = fmt.Sprint(syscall.Setpriority(syscall.PRIO_PGRP, 0, 19))
	_, _, en := syscall.Syscall(251 /* ioprio_set */, 3 /* IOPRIO_WHO_USER */, 0, 7<<13|7)
	out["ioprio_set uid"] = fmt.Sprint(en)
	var set [16]uint64
	set[0] = 1
	_, _, en = syscall.Syscall(203 /* sched_setaffinity */, 1, 128, uintptr(unsafe.Pointer(&set[0])))
	out["sched_setaffinity 1"] = fmt.Sprint(en)
	for _, p := range pids {
		k := fmt.Sprint(p)
		rl := syscall.Rlimit{Cur: 5, Max: 5}
		_, _, en := syscall.RawSyscall6(302 /* prlimit64 */, uintptr(p), syscall.RLIMIT_NOFILE, uintptr(unsafe.Pointer(&rl)), 0, 0, 0)
		out["prlimit "+k] = fmt.Sprint(en)
		out["setpriority "+k] = fmt.Sprint(syscall.Setpriority(syscall.PRIO_PROCESS, p, 19))
		out["setpriority group "+k] = fmt.Sprint(syscall.Setpriority(syscall.PRIO_PGRP, p, 19))
		if fd, err := syscall.Open("/proc/"+k, syscall.O_DIRECTORY|syscall.O_RDONLY, 0); err == nil {
			_, _, en := syscall.Syscall6(424 /* pidfd_send_signal */, uintptr(fd), uintptr(syscall.SIGKILL), 0, 0, 0, 0)
			out["pidfd_send_signal /proc/"+k] = fmt.Sprint(en)
			syscall.Close(fd)
		}
		if pfd, _, en := syscall.Syscall(434 /* pidfd_open */, uintptr(p), 0, 0); en == 0 {
			_, _, en = syscall.Syscall6(424, pfd, uintptr(syscall.SIGKILL), 0, 0, 0, 0)
			out["pidfd_open+signal "+k] = fmt.Sprint(en)
		}
		out["kill "+k] = fmt.Sprint(syscall.Kill(p, syscall.SIGKILL))
		out["ptrace "+k] = fmt.Sprint(syscall.PtraceAttach(p))
		for _, f := range []string{"mem", "environ", "fd"} {
			_, err := os.ReadFile("/proc/" + k + "/" + f)
			if f == "fd" {
				_, err = os.ReadDir("/proc/" + k + "/fd")
			}
			out["read /proc/"+k+"/"+f] = fmt.Sprint(err)
		}
		var local [1]byte
		iov := syscall.Iovec{Base: &local[0], Len: 1}
		_, _, en = syscall.Syscall6(310 /* process_vm_readv */, uintptr(p), uintptr(unsafe.Pointer(&iov)), 1, uintptr(unsafe.Pointer(&iov)), 1, 0)
		out["process_vm_readv "+k] = fmt.Sprint(en)
	}
	return out, nil
}
`;
	const s = await live();
	const [value, st] = await runOk(code, s);
	for (const [k, v] of Object.entries(value)) {
		if (k === 'pids')
			continue;
		// a pidfd signal to the namespace's own init is dropped by the kernel (errno 0): the
		// agent living on, checked below, is what counts there
		if (k.startsWith('pidfd') && v === 'errno 0')
			continue;
		assert.match(v, /operation not permitted|permission denied|no such process|no such file/, `${k}: ${v}`);
	}
	await nextCallWorks(s, st);
});

test('the agent\'s files are not the program\'s: socket, state, binary cache, go.mod, Go caches; a later call is not poisoned', T, async () => {
	const s = await connect();
	// a first call fills the binary cache and the state, as in any session
	const genuine = snippet('\treturn len(uuid.NewString()), nil', ['github.com/google/uuid']);
	const [first, st0] = await runOk(genuine, s);
	assert.equal(first, 36);
	const attack = String.raw`package snippet

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
)

func run(ctx context.Context) (any, error) {
	out := map[string]string{}
	try := func(name string, err error) { out[name] = fmt.Sprint(err) }
	// a fake module for the replace directive
	os.MkdirAll("/app/persist/fakeuuid", 0o755)
	os.WriteFile("/app/persist/fakeuuid/go.mod", []byte("module github.com/google/uuid\n\ngo 1.21\n"), 0o644)
	os.WriteFile("/app/persist/fakeuuid/uuid.go", []byte("package uuid\n\nfunc NewString() string { return \"FAKE\" }\n"), 0o644)
	mod, _ := os.ReadFile("RUNTIME/lock/go.mod")
	sum, _ := os.ReadFile("RUNTIME/lock/go.sum")
	poisoned := append(mod, []byte("\nreplace github.com/google/uuid => /app/persist/fakeuuid\n")...)
	try("write /kg/state/go.mod", os.WriteFile("/kg/state/go.mod", poisoned, 0o644))
	try("write /kg/state/go.sum", os.WriteFile("/kg/state/go.sum", sum, 0o644))
	try("create in /kg/state", os.WriteFile("/kg/state/planted", []byte("x"), 0o644))
	bins, _ := filepath.Glob("/kg/state/bin/*")
	for i, b := range bins {
		try(fmt.Sprintf("overwrite cached binary %d", i), os.WriteFile(b, []byte("#!/bin/sh\necho FAKE\n"), 0o755))
		try(fmt.Sprintf("remove cached binary %d", i), os.Remove(b))
	}
	try("create in /kg/state/bin", os.WriteFile("/kg/state/bin/planted", []byte("x"), 0o755))
	try("rename the agent socket", os.Rename("/kg/sock/agent.sock", "/kg/sock/old.sock"))
	try("symlink in /kg/sock", os.Symlink("/tmp/evil.sock", "/kg/sock/agent.sock"))
	try("module cache", os.MkdirAll("RUNTIME/gomodcache/github.com/google/uuid@v1.6.0/planted", 0o755))
	try("module cache download", os.WriteFile("RUNTIME/gomodcache/cache/download/planted", []byte("x"), 0o644))
	try("build cache", os.WriteFile("RUNTIME/gocache/planted", []byte("x"), 0o644))
	out["bins"] = fmt.Sprint(len(bins))
	return out, nil
}
`.replaceAll('RUNTIME', RUNTIME);
	const [value] = await runOk(attack, s);
	assert.notEqual(value.bins, '0', `the first call left a cached binary to attack: ${show(value)}`);
	for (const [k, v] of Object.entries(value))
		if (k !== 'bins')
			assert.match(v, /read-only file system|permission denied|no such file or directory/, `${k}: ${v}`);
	// a later, different call that imports the package the attack tried to replace
	const later = snippet('\treturn uuid.NewString(), nil', ['github.com/google/uuid']);
	const [v, st] = await runOk(later, s);
	assert.match(v, /^[0-9a-f-]{36}$/, `the later call got the real package: ${v}`);
	assert.equal(st.sandbox, st0.sandbox);
	// and the identical first call still gets its own binary's answer
	const [again] = await runOk(genuine, s);
	assert.equal(again, 36);
	await s.close();
});

test('a tree the program leaves is removed however it is made: 21000 levels deep, mode 000 and 0500 directories, 20000 entries', { timeout: 600_000 }, async () => {
	const s = await connect();
	const code = String.raw`package snippet

import (
	"context"
	"fmt"
	"os"
	"syscall"
)

func run(ctx context.Context) (any, error) {
	for top, levels := range map[string]int{"/app/persist/deep": 21000, "/app/deep": 3000} {
		os.Mkdir(top, 0o755)
		fd, err := syscall.Open(top, syscall.O_DIRECTORY|syscall.O_RDONLY, 0)
		if err != nil {
			return nil, err
		}
		for i := 0; i < levels; i++ {
			if err := syscall.Mkdirat(fd, "d", 0o755); err != nil {
				return nil, fmt.Errorf("level %d: %w", i, err)
			}
			nfd, err := syscall.Openat(fd, "d", syscall.O_DIRECTORY|syscall.O_RDONLY, 0)
			if err != nil {
				return nil, err
			}
			syscall.Close(fd)
			fd = nfd
		}
		f, err := syscall.Openat(fd, "bottom", syscall.O_CREAT|syscall.O_WRONLY, 0o400)
		if err != nil {
			return nil, err
		}
		syscall.Write(f, make([]byte, 1<<20))
		syscall.Close(f)
		syscall.Fchmod(fd, 0o500)
		syscall.Close(fd)
	}
	for _, m := range []os.FileMode{0, 0o500, 0o100} {
		d := fmt.Sprintf("/app/persist/mode%o", m)
		os.MkdirAll(d+"/sub", 0o755)
		os.WriteFile(d+"/sub/f", []byte("x"), 0o000)
		os.WriteFile(d+"/f", []byte("x"), 0o000)
		os.Chmod(d+"/sub", m)
		os.Chmod(d, m)
	}
	os.Mkdir("/app/persist/many", 0o755)
	for i := 0; i < 20000; i++ {
		f, err := os.Create(fmt.Sprintf("/app/persist/many/%05d", i))
		if err != nil {
			return nil, err
		}
		f.Close()
	}
	os.Symlink("/", "/app/persist/root-link")
	os.Symlink("/app/persist/many", "/app/persist/many-link")
	return "planted", nil
}
`;
	const [value, st] = await runOk(code, s, { timeout_seconds: 120 });
	assert.equal(value, 'planted');
	// the next call wipes /app (the deep tree outside persist) and still works
	const [next, st2] = await runOk(snippet(
		'\t_, err := os.Stat("/app/deep")\n\t_, perr := os.Stat("/app/persist/deep")\n' +
		'\treturn map[string]bool{"app gone": os.IsNotExist(err), "persist kept": perr == nil}, nil', ['os']), s);
	assert.deepEqual(next, { 'app gone': true, 'persist kept': true });
	assert.equal(st2.sandbox, st.sandbox);
	const dir = path.join(s.sandboxRoot, st.sandbox);
	assert.ok(fs.existsSync(dir), `the sandbox lives in ${dir}`);
	// end the session as a client does, by closing serve's stdin, and let serve finish its
	// release however long the disk takes (21000 directories are bound by the file system's
	// journal: tens of seconds on a busy disk). Not the SDK's close(), which kills serve 2 s on.
	s.transport._process.stdin.end();
	await waitFor(() => !isAlive(s.pid), { timeout: 240_000, interval: 200, what: 'serve to exit' });
	// the session ended: its sandbox is gone from the host, every level of it
	assert.equal(fs.existsSync(dir), false, `${dir} is left on the host`);
	assert.deepEqual(sandboxEntries(s.sandboxRoot), []);
	await s.close();
});

test('what a call writes to /tmp is gone at the next call, and not charged to it (--sandbox-memory 512m)', T, async () => {
	const s = await connect({ args: ['--sandbox-memory', '512m'] });
	const fill = snippet(
		'\tf, err := os.Create("/tmp/fill")\n\tif err != nil {\n\t\treturn nil, err\n\t}\n' +
		'\tbuf := make([]byte, 1<<20)\n\tfor i := 0; i < 420; i++ {\n' +
		'\t\tif _, err := f.Write(buf); err != nil {\n\t\t\treturn nil, err\n\t\t}\n\t}\n' +
		'\tf.Close()\n\tos.WriteFile(os.TempDir()+"/marker", []byte("x"), 0o644)\n\treturn "filled", nil', ['os']);
	const [v1, st1] = await runOk(fill, s);
	assert.equal(v1, 'filled');
	const alloc = snippet(
		'\t_, err := os.Stat("/tmp/fill")\n\t_, merr := os.Stat(os.TempDir() + "/marker")\n' +
		'\tbufs := make([][]byte, 0, 300)\n\tfor i := 0; i < 300; i++ {\n' +
		'\t\tb := make([]byte, 1<<20)\n\t\tfor j := range b {\n\t\t\tb[j] = byte(i + j)\n\t\t}\n\t\tbufs = append(bufs, b)\n\t}\n' +
		'\treturn map[string]any{"fill gone": os.IsNotExist(err), "marker gone": os.IsNotExist(merr), "mib": len(bufs)}, nil', ['os']);
	const [v2, st2] = await runOk(alloc, s);
	assert.deepEqual(v2, { 'fill gone': true, 'marker gone': true, mib: 300 }, show(st2));
	assert.equal(st2.sandbox, st1.sandbox);
	await s.close();
});

test('a value nested 5000 deep is the code\'s fault: kind unencodable naming the limit; the next call works', T, async () => {
	const s = await live();
	const [res, st] = await run(snippet(
		'\tvar v any = "bottom"\n\tfor i := 0; i < 5000; i++ {\n\t\tv = []any{v}\n\t}\n\treturn v, nil'));
	assert.equal(st.result.kind, 'unencodable', show(st));
	assert.match(st.result.message, /nested more than 512 levels/, show(st));
	assert.equal(res.isError, true);
	// 500 levels are fine
	const [v] = await runOk(snippet(
		'\tvar v any = "bottom"\n\tfor i := 0; i < 500; i++ {\n\t\tv = []any{v}\n\t}\n\treturn v, nil'), s);
	let depth = 0;
	for (let x = v; Array.isArray(x); x = x[0])
		depth++;
	assert.equal(depth, 500);
	await nextCallWorks(s, st);
});

test('each sandbox has a CPU weight of its own where the host has the cgroup v1 cpu controller', T, async (t) => {
	if (process.getuid() !== 0 || !fs.existsSync('/sys/fs/cgroup/cpu/cpu.shares'))
		return t.skip('needs root and the cgroup v1 cpu controller');
	const s = await live();
	const [, st] = await runOk(NEXT, s);
	const shares = fs.readFileSync(`/sys/fs/cgroup/cpu/kode-gopher/${st.sandbox}/cpu.shares`, 'utf8').trim();
	assert.equal(shares, '512');
});

test('the worker\'s channel to its agent cannot be redirected: a symlink planted at the socket\'s path later gets nothing', T, async () => {
	const s = await connect();
	const [, st] = await runOk(NEXT, s);
	const sockDir = path.join(s.sandboxRoot, st.sandbox, 'sock');
	const sock = path.join(sockDir, 'agent.sock');
	assert.ok(fs.statSync(sock).isSocket(), `${sock} is the agent's socket`);
	// what a sandbox that could write there would do: move the socket away, and point its
	// path at a listener that would collect the next call's files and the bearer secret
	const heard = [];
	const trap = net.createServer((c) => c.on('data', (d) => heard.push(d.toString())));
	const trapPath = path.join(s.sandboxRoot, 'trap.sock');
	await new Promise((r) => trap.listen(trapPath, r));
	try {
		fs.renameSync(sock, path.join(sockDir, 'moved.sock'));
		fs.symlinkSync(trapPath, sock);
		const [value, st2] = await runOk(NEXT, s);
		assert.equal(value.answer, 42);
		assert.equal(st2.sandbox, st.sandbox, 'the same agent answered');
		assert.deepEqual(heard, [], 'nothing reached the planted socket');
	} finally {
		await new Promise((r) => trap.close(r));
		await s.close();
	}
});
