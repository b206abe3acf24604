#!/usr/bin/env bash
# run.sh - run every test suite and end with one line "N passed, N failed".
#
# Called by `make test` (and so by make check and make asan) with BUILD set to the build dir.
# Suites: the cmocka unit tests (build/tests/test_*), then the end-to-end, security and docs tests
# (node's test runner driving the real server with the official MCP SDK client; tests/docs runs
# the shell examples of README.md and docs/), then the official
# MCP conformance suite against serve --http (tests/conformance/run.sh), then the Kubernetes tests
# against a real API server, agent-sandbox and kwok (tests/k8s/run.sh; skipped with a reason if
# the test cluster cannot be built on this machine).
# After the unit tests, the fuzz gate (tests/fuzz/gate.sh) runs every libFuzzer target briefly.
# Each suite's own output goes to the terminal; the counts come from its TAP lines.
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
export KODE_GOPHER_BIN=${KODE_GOPHER_BIN:-$PWD/$BUILD/kode-gopher}
export RUNTIME_DIR=${RUNTIME_DIR:-/var/cache/kode-gopher/runtime}
export KODE_GOPHER_RUNTIME_DIR=$RUNTIME_DIR
log=$(mktemp -d)
trap 'rm -rf "$log"' EXIT
passed=0 failed=0

# count_tap FILE - add the ok / not ok lines of one TAP stream to the totals
count_tap() {
	local ok notok
	ok=$(grep -cE '^ok [0-9]+' "$1")
	notok=$(grep -cE '^not ok [0-9]+' "$1")
	passed=$((passed + ok)) failed=$((failed + notok))
}

for t in "$BUILD"/tests/test_*; do
	[ -x "$t" ] || continue
	name=$(basename "$t")
	echo "== unit: $name"
	# stdin from /dev/null: test_monitor's children hung on an inherited terminal or pipe
	CMOCKA_MESSAGE_OUTPUT=TAP "$t" </dev/null >"$log/$name.tap" 2>"$log/$name.err"
	rc=$?
	cat "$log/$name.tap"
	if ! grep -qE '^(not )?ok [0-9]+' "$log/$name.tap" || { [ $rc -ne 0 ] && ! grep -qE '^not ok' "$log/$name.tap"; }; then
		echo "not ok 1 - $name crashed or ran nothing (exit $rc)" | tee -a "$log/$name.tap"
		tail -20 "$log/$name.err"
	elif [ $rc -ne 0 ]; then
		tail -20 "$log/$name.err"
	fi
	count_tap "$log/$name.tap"
done

# the layers: no two files of a folder call each other, lib/ calls nothing above it (read from
# the build's object files; tests/layers/check.sh)
echo "== layers: tests/layers/check.sh"
tests/layers/check.sh "$BUILD" >"$log/layers.tap"
cat "$log/layers.tap"
count_tap "$log/layers.tap"

# the fuzz gate: every libFuzzer target for 20 s from the checked-in corpus (tests/fuzz/gate.sh
# builds them with clang; a finding is a "not ok" naming the target and its artifact; a machine
# without clang prints "1..0 # SKIP reason", counted as neither)
if [ -x tests/fuzz/gate.sh ]; then
	echo "== fuzz: tests/fuzz/gate.sh"
	tests/fuzz/gate.sh >"$log/fuzz.tap"
	rc=$?
	cat "$log/fuzz.tap"
	count_tap "$log/fuzz.tap"
	if grep -qE '^1\.\.0 # SKIP' "$log/fuzz.tap"; then
		:
	elif ! grep -qE '^(not )?ok [0-9]+' "$log/fuzz.tap"; then
		echo "not ok 1 - fuzz gate ran nothing (exit $rc)"; failed=$((failed + 1))
	elif [ $rc -ne 0 ] && ! grep -qE '^not ok [0-9]+' "$log/fuzz.tap"; then
		echo "not ok 1 - tests/fuzz/gate.sh failed (exit $rc)"; failed=$((failed + 1))
	fi
fi

# node's TAP reporter indents subtests; top-level tests are the unindented ok lines
shopt -s nullglob
# tests/docs: the README's and the guides' shell examples, run as shown (about 15 s)
e2e=(tests/e2e/*.test.mjs tests/security/*.test.mjs tests/docs/*.test.mjs)
if ((${#e2e[@]})); then
	echo "== e2e: ${e2e[*]}"
	NODE_PATH=$PWD/tests/e2e/node_modules node --test --test-concurrency=1 --test-reporter=tap \
		"${e2e[@]}" >"$log/e2e.tap" 2>&1
	grep -vE '^\s+(duration_ms|\.\.\.|---|type:)' "$log/e2e.tap" | grep -E '^\s*(not ok|ok|#)|^\s+(error|location|stack|expected|actual|code):' | head -400
	# the lines above stop at 400 (a failing test's server log is long): every failure again,
	# each with the first lines of its error, so none is cut off
	if grep -qE '^\s*not ok' "$log/e2e.tap"; then
		echo "== e2e failures, each with the start of its error:"
		awk '/^[[:space:]]*not ok/ { n = 25 } n > 0 { print; n-- }' "$log/e2e.tap" | grep -vE '^\s+(duration_ms|type:)' | head -800
	fi
	count_tap "$log/e2e.tap"
	if ! grep -qE '^(not )?ok [0-9]+' "$log/e2e.tap"; then
		echo "e2e suite ran nothing:"; tail -30 "$log/e2e.tap"; failed=$((failed + 1))
	fi
fi

# the official MCP conformance suite against serve --http: one TAP line per scenario, expected
# failures (what kode-gopher deliberately does not offer) included as ok lines with their reason
if [ -x tests/conformance/run.sh ]; then
	echo "== conformance: tests/conformance/run.sh"
	timeout -k 30 300 tests/conformance/run.sh >"$log/conformance.tap" 2>&1
	rc=$?
	cat "$log/conformance.tap"
	count_tap "$log/conformance.tap"
	if [ $rc -ne 0 ] && ! grep -qE '^not ok [0-9]+' "$log/conformance.tap"; then
		echo "not ok 1 - conformance run.sh failed (exit $rc)"; failed=$((failed + 1))
	fi
fi

# the Kubernetes tests against a real control plane (tests/k8s/run.sh: builds the cluster once,
# starts it, runs tests/k8s/*.test.mjs, takes it down); progress on stderr, TAP counted as for
# e2e. A cluster that cannot be built prints "1..0 # SKIP reason", counted as neither.
if [ -x tests/k8s/run.sh ]; then
	echo "== k8s: tests/k8s/run.sh"
	tests/k8s/run.sh >"$log/k8s.tap"
	rc=$?
	grep -vE '^\s+(duration_ms|\.\.\.|---|type:)' "$log/k8s.tap" | grep -E '^\s*(not ok|ok|#)|^1\.\.0|^\s+(error|location|stack|expected|actual|code):' | head -400
	count_tap "$log/k8s.tap"
	if grep -qE '^1\.\.0 # SKIP' "$log/k8s.tap"; then
		:
	elif ! grep -qE '^(not )?ok [0-9]+' "$log/k8s.tap"; then
		echo "k8s suite ran nothing (exit $rc):"; tail -30 "$log/k8s.tap"; failed=$((failed + 1))
	elif [ $rc -ne 0 ] && ! grep -qE '^not ok [0-9]+' "$log/k8s.tap"; then
		echo "not ok 1 - tests/k8s/run.sh failed (exit $rc)"; failed=$((failed + 1))
	fi
fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
