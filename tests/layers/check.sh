#!/usr/bin/env bash
# check.sh - the source tree reads as layers, not a knot: within each folder, no file calls a
# function of a file that (through any chain) calls back into it, lib/ calls nothing of the
# folders above it, and master/ and worker/ meet only through ipc/ and lib/. Read from the
# object files of a build (nm: what each defines and what it calls), so a call added anywhere
# is seen. TAP, one line per rule; called by tests/run.sh.
#
#   tests/layers/check.sh [BUILD]         check (BUILD: the build directory, default build)
#   tests/layers/check.sh [BUILD] --graph FOLDER   print FOLDER's file -> file calls
set -uo pipefail
cd "$(dirname "$0")/../.."
BUILD=${1:-build}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# defs - every object's defined symbols, as "symbol folder/file" lines
for o in "$BUILD"/{lib,ipc,policy,agent,worker,master}/*.o; do
	[ -f "$o" ] || continue
	f=${o#"$BUILD"/}
	f=${f%.o}
	nm --defined-only "$o" | awk -v f="$f" '$2 ~ /^[TDBRV]$/ { print $3, f }'
done | sort -k1,1 >"$tmp/defs"

# edges - "caller callee" file pairs, one per line (a file calling itself left out)
for o in "$BUILD"/{lib,ipc,policy,agent,worker,master}/*.o; do
	[ -f "$o" ] || continue
	f=${o#"$BUILD"/}
	f=${f%.o}
	nm --undefined-only "$o" | awk '{ print $2 }' | sort -u | join - "$tmp/defs" |
		awk -v f="$f" '$2 != f { print f, $2 }'
done | sort -u >"$tmp/edges"

if [ "${2:-}" = --graph ]; then
	awk -v d="${3:-master}/" 'index($1, d) == 1 && index($2, d) == 1' "$tmp/edges"
	exit 0
fi
if [ ! -s "$tmp/defs" ]; then
	echo "1..0 # SKIP no objects in $BUILD (build first)"
	exit 0
fi

n=0 bad=0
# cycle FOLDER - tsort names a loop if the folder's call graph has one
for d in lib ipc policy agent worker master; do
	n=$((n + 1))
	awk -v d="$d/" 'index($1, d) == 1 && index($2, d) == 1' "$tmp/edges" >"$tmp/e.$d"
	if loop=$(tsort "$tmp/e.$d" 2>&1 >/dev/null) && [ -z "$loop" ]; then
		echo "ok $n - $d/: no file calls back into a file that calls it"
	else
		echo "not ok $n - $d/: files call each other in a loop:"
		echo "$loop" | grep -v 'input contains a loop' | sed 's/^tsort: /#   /'
		bad=$((bad + 1))
	fi
done
# lib/ is below everything: it calls nothing of ipc/ policy/ agent/ worker/ master/
n=$((n + 1))
up=$(awk 'index($1, "lib/") == 1 && index($2, "lib/") != 1' "$tmp/edges")
if [ -z "$up" ]; then
	echo "ok $n - lib/ calls only lib/ and the system's libraries"
else
	echo "not ok $n - lib/ calls into the folders above it:"
	echo "$up" | sed 's/^/# /'
	bad=$((bad + 1))
fi
# master/ and worker/ are two processes: they meet only in the contract (ipc/) and the shared
# helpers (lib/), never by a call or an include of the other's files. master/main.c, the
# binary's entry that picks a role (worker_main, agent_main), is the one exception.
n=$((n + 1))
cross=$(awk '(index($1, "master/") == 1 && $1 != "master/main" && index($2, "worker/") == 1) ||
	(index($1, "worker/") == 1 && index($2, "master/") == 1)' "$tmp/edges")
incl=$(grep -l '^[[:space:]]*#[[:space:]]*include[[:space:]]*"worker/' master/*.[ch] 2>/dev/null |
	grep -v '^master/main\.c$'
	grep -l '^[[:space:]]*#[[:space:]]*include[[:space:]]*"master/' worker/*.[ch] 2>/dev/null)
if [ -z "$cross$incl" ]; then
	echo "ok $n - master/ and worker/ call and include nothing of each other (ipc/ and lib/ between)"
else
	echo "not ok $n - master/ and worker/ reach into each other (move the shared code to lib/):"
	[ -n "$cross" ] && echo "$cross" | sed 's/^/# calls: /'
	[ -n "$incl" ] && echo "$incl" | sed 's/^/# includes the other side: /'
	bad=$((bad + 1))
fi
echo "1..$n"
[ $bad -eq 0 ]
