#!/usr/bin/env bash
# gate.sh - build the libFuzzer targets and run every one of them for a fixed time; TAP on stdout.
#
# Called by tests/run.sh (the fuzz gate of make check: 20 s per target, new inputs in a scratch
# directory, so every run starts from the checked-in corpus alone) and by tests/fuzz/Makefile's
# `run` and `long` (make fuzz-long: FUZZ_TIME per target, new inputs kept in
# build-fuzz/corpus/<target>/ for `make fuzz-merge`). Progress and build output go to stderr.
#
#   tests/fuzz/gate.sh [--time S] [--jobs N] [--keep] [--no-build] [TARGET...]
#     --time S    seconds per target (default FUZZ_TIME, else 20)
#     --jobs N    targets run side by side (default FUZZ_JOBS, else 2, at most the CPU count)
#     --keep      keep what the runs find in $FUZZ_BUILD/corpus/<target>/ (else a scratch dir)
#     --no-build  use the binaries already in $FUZZ_BUILD
#
# One TAP line per target: "ok N - fuzz_x: ..." with runs, exec/s and coverage, or
# "not ok N - fuzz_x: crash|leak|timeout|oom|sanitizer report, artifact PATH" and the report's
# summary as # lines; a finding in one target never stops the others. Each run uses
# -timeout (one input), -rss_limit_mb and -max_total_time; the tree's corpus is read, never
# written. A machine without clang (or without its fuzzer runtime) gets "1..0 # SKIP reason".
# A table of every target's figures is written to $FUZZ_BUILD/fuzz-summary.txt.
set -uo pipefail
cd "$(dirname "$0")/../.."

FUZZ_BUILD=${FUZZ_BUILD:-build-fuzz}
FUZZ_CC=${FUZZ_CC:-clang}
time_s=${FUZZ_TIME:-20}
jobs=${FUZZ_JOBS:-2}
keep=0 build=1
FUZZ_INPUT_TIMEOUT_S=${FUZZ_INPUT_TIMEOUT_S:-10}  # one input running longer is a finding
FUZZ_RSS_LIMIT_MB=${FUZZ_RSS_LIMIT_MB:-2048}      # and so is a process growing past this
targets=()
while (($#)); do
	case $1 in
	--time) time_s=$2; shift ;;
	--jobs) jobs=$2; shift ;;
	--keep) keep=1 ;;
	--no-build) build=0 ;;
	-*) echo "gate.sh: unknown option $1" >&2; exit 2 ;;
	*) targets+=("$1") ;;
	esac
	shift
done
if ((${#targets[@]} == 0)); then
	for f in tests/fuzz/fuzz_*.c; do
		t=${f##*/}
		targets+=("${t%.c}")
	done
fi
ncpu=$(nproc 2>/dev/null || echo 1)
((jobs > ncpu)) && jobs=$ncpu
((jobs < 1)) && jobs=1

# gate_skip REASON - no fuzzing possible on this machine
gate_skip() {
	echo "1..0 # SKIP $1"
	exit 0
}

if ! command -v "$FUZZ_CC" >/dev/null 2>&1; then
	gate_skip "fuzz targets not run: $FUZZ_CC is not installed (packaging/install-deps.sh installs clang and libclang-rt-14-dev)"
fi
probe=$(mktemp -d)
trap 'rm -rf "$probe"' EXIT
printf '#include <stddef.h>\n#include <stdint.h>\nint LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { (void)d; (void)n; return 0; }\n' >"$probe/p.c"
if ! "$FUZZ_CC" -fsanitize=fuzzer,address,undefined -o "$probe/p" "$probe/p.c" 2>"$probe/err"; then
	gate_skip "fuzz targets not run: $FUZZ_CC cannot link -fsanitize=fuzzer,address,undefined ($(head -1 "$probe/err")); install libclang-rt-14-dev (packaging/install-deps.sh)"
fi

echo "1..${#targets[@]}"
if ((build)); then
	echo "fuzz: building ${targets[*]} into $FUZZ_BUILD/" >&2
	if ! make --no-print-directory -j"$ncpu" -f tests/fuzz/Makefile FUZZ_BUILD="$FUZZ_BUILD" \
		FUZZ_TARGETS="${targets[*]}" all >"$probe/build.log" 2>&1; then
		tail -30 "$probe/build.log" | sed 's/^/# /'
		n=0
		for t in "${targets[@]}"; do
			n=$((n + 1))
			echo "not ok $n - $t: the fuzz build failed (make -f tests/fuzz/Makefile; log above)"
		done
		exit 1
	fi
fi

art=$FUZZ_BUILD/artifacts
logs=$FUZZ_BUILD/logs
mkdir -p "$art" "$logs"

# gate_one T - run one target; its verdict line (without the number) goes to $logs/T.verdict
gate_one() {
	local t=$1 bin=$FUZZ_BUILD/$1 log=$logs/$1.log dict=() work
	if [ ! -x "$bin" ]; then
		echo "not ok - $t: $bin was not built" >"$logs/$t.verdict"
		return
	fi
	mkdir -p "tests/fuzz/corpus/$t"
	if ((keep)); then
		work=$FUZZ_BUILD/corpus/$t
	else
		work=$FUZZ_BUILD/gate-corpus/$t
		rm -rf "$work"
	fi
	mkdir -p "$work"
	[ -f "tests/fuzz/$t.dict" ] && dict=(-dict="tests/fuzz/$t.dict")
	"$bin" -max_total_time="$time_s" -timeout="$FUZZ_INPUT_TIMEOUT_S" \
		-rss_limit_mb="$FUZZ_RSS_LIMIT_MB" -print_final_stats=1 \
		-artifact_prefix="$art/$t-" "${dict[@]}" "$work" "tests/fuzz/corpus/$t" >"$log" 2>&1
	local rc=$?
	local done_line runs eps artifact kind why
	done_line=$(grep -E '^#[0-9]+.*cov: ' "$log" | tail -1)
	runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
	eps=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
	artifact=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -1)
	if [ $rc -eq 0 ] && ! grep -qE '^==[0-9]+==ERROR|runtime error:|^SUMMARY: ' "$log"; then
		local cov ft corp
		cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$done_line")
		ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$done_line")
		corp=$(sed -n 's/.* corp: \([^ ]*\).*/\1/p' <<<"$done_line")
		echo "ok - $t: ${time_s} s, ${runs:-?} runs, ${eps:-?} exec/s, cov: ${cov:-?} ft: ${ft:-?} corp: ${corp:-?}" >"$logs/$t.verdict"
		printf '%-20s %8s s %12s runs %8s exec/s  cov: %-6s ft: %-6s corp: %s\n' "$t" "$time_s" \
			"${runs:-?}" "${eps:-?}" "${cov:-?}" "${ft:-?}" "${corp:-?}" >"$logs/$t.summary"
		return
	fi
	if grep -q 'ERROR: libFuzzer: timeout' "$log"; then kind=timeout
	elif grep -qE 'ERROR: libFuzzer: out-of-memory|malloc\(.*\) exceeds limit' "$log"; then kind=oom
	elif grep -q 'ERROR: LeakSanitizer' "$log"; then kind=leak
	elif grep -q 'runtime error:' "$log"; then kind="sanitizer report (UBSan)"
	elif grep -q 'ERROR: AddressSanitizer' "$log"; then kind="sanitizer report (ASan)"
	else kind=crash
	fi
	why=$(grep -m1 -E 'runtime error:|^SUMMARY: |ERROR: libFuzzer:|deadly signal' "$log")
	{
		if [ -n "$artifact" ]; then
			echo "not ok - $t: $kind, artifact $artifact (reproduce: $bin $artifact; log $log)"
		else
			echo "not ok - $t: $kind, exit $rc, no artifact written (log $log)"
		fi
		[ -n "$why" ] && echo "# ${why}"
		# the report's frames in the project's own code, where the fix goes
		grep -E '^ +#[0-9]+ .* in .*(tests|ipc|worker|agent|master|policy)/[^ ]+\.c:[0-9]+' "$log" |
			head -8 | sed 's/^ */#   /'
	} >"$logs/$t.verdict"
	printf '%-20s %8s s  FAILED: %s %s\n' "$t" "$time_s" "$kind" "${artifact:-}" >"$logs/$t.summary"
}

echo "fuzz: ${#targets[@]} targets, ${time_s} s each, $jobs at a time" >&2
running=0
for t in "${targets[@]}"; do
	rm -f "$logs/$t.verdict" "$logs/$t.summary"
	echo "fuzz: $t" >&2
	gate_one "$t" &
	running=$((running + 1))
	if ((running >= jobs)); then
		wait -n
		running=$((running - 1))
	fi
done
wait

n=0 failed=0
: >"$FUZZ_BUILD/fuzz-summary.txt"
for t in "${targets[@]}"; do
	n=$((n + 1))
	v=$(cat "$logs/$t.verdict" 2>/dev/null || echo "not ok - $t: the run left no verdict (log $logs/$t.log)")
	# number the first line; the # lines follow as they are
	first=${v%%$'\n'*}
	rest=${v#"$first"}
	case $first in
	"ok - "*) echo "ok $n - ${first#ok - }" ;;
	*) echo "not ok $n - ${first#not ok - }"; failed=$((failed + 1)) ;;
	esac
	[ -n "$rest" ] && printf '%s\n' "${rest#$'\n'}"
	cat "$logs/$t.summary" >>"$FUZZ_BUILD/fuzz-summary.txt" 2>/dev/null
done
((failed == 0))
