#!/bin/sh
# run.sh - `make bench`: build what the benchmarks need, then print their tables on stdout.
#
# Called by the root Makefile's bench target (which has already built build/mcpbench), or by
# hand: bench/run.sh [--quick] [--only ping|rss|calls|exec|sandbox|http|http-throughput|http-rss|
# http-open|http-signin|signin|testmode|live|k8s|k8s-latency|k8s-throughput] [--sessions N] [mcpbench options...].  Three tables:
# mcpbench's (one session over stdio, tool calls, the local sandbox), then httpbench's (the shared
# server, `serve --http`, against the TypeScript SDK's reference server), then signinbench's (what
# `--auth google` costs); --only picks a section of one of them; --only live is livebench's
# (cancel to the next result, live logs on an output flood), run only when asked for.  A third, k8sbench's (the Kubernetes backend on the test cluster of tests/k8s),
# runs only when asked for with --only k8s* (`make bench-k8s`): it starts a cluster.
# $HTTPBENCH_ARGS goes to httpbench (bench/httpbench.mjs --help), $K8SBENCH_ARGS to k8sbench.
# Build output and progress go to stderr, so stdout is the tables alone.  The exit status is
# non-zero only when a benchmark could not run (or a figure could not be measured); a missed aim
# is a line in a table, never a failure.  See bench/README.md.
set -eu

cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
RUNTIME_DIR=${RUNTIME_DIR:-/var/cache/kode-gopher/runtime}
CC=${CC:-cc}
export RUNTIME_DIR

# kode-gopher itself: make is incremental, so this is quick when nothing changed
if ! make --no-print-directory BUILD="$BUILD" all >&2; then
	echo "bench: kode-gopher does not build; fix the build first (see the errors above)" >&2
	exit 1
fi

# mcpbench: the Makefile's bench recipe builds it with the project's CFLAGS; by hand, rebuild
# it here when the source is newer
if [ ! -x "$BUILD/mcpbench" ] || [ bench/mcpbench.c -nt "$BUILD/mcpbench" ]; then
	mkdir -p "$BUILD"
	"$CC" -std=gnu11 -Wall -Wextra -Werror -D_GNU_SOURCE -O2 -g \
		-o "$BUILD/mcpbench" bench/mcpbench.c -ljansson -lm >&2
fi

if [ ! -f "$RUNTIME_DIR/stamp" ]; then
	echo "bench: $RUNTIME_DIR has no prepared runtime (run \`make runtime\`):" \
		"the tool-call figures will fail" >&2
fi

# which tables: --only http* is httpbench's alone, --only k8s* k8sbench's alone, any other
# --only mcpbench's alone; the rest of the arguments are mcpbench's, but --quick goes to all
run_mc=yes run_http=yes run_k8s=no run_signin=yes run_testmode=no run_live=no quick= only_http= only_k8s= http_auth=
n=$#
while [ "$n" -gt 0 ]; do
	a=$1
	shift
	n=$((n - 1))
	case $a in
	--only)
		[ "$n" -gt 0 ] || { echo "bench: --only needs a section" >&2; exit 1; }
		sec=$1
		shift
		n=$((n - 1))
		case $sec in
		http) run_mc=no run_signin=no ;;
		http-throughput | http-rss | http-open) run_mc=no run_signin=no only_http=${sec#http-} ;;
		http-signin) run_mc=no run_signin=no http_auth=google ;;
		k8s) run_mc=no run_http=no run_signin=no run_k8s=yes ;;
		k8s-latency | k8s-throughput) run_mc=no run_http=no run_signin=no run_k8s=yes only_k8s=${sec#k8s-} ;;
		signin) run_mc=no run_http=no ;;
		testmode) run_mc=no run_http=no run_signin=no run_testmode=yes ;;
		live) run_mc=no run_http=no run_signin=no run_live=yes ;;
		*) run_http=no run_signin=no; set -- "$@" --only "$sec" ;;
		esac
		;;
	--quick) quick=--quick; set -- "$@" "$a" ;;
	*) set -- "$@" "$a" ;;
	esac
done

status=0
if [ $run_mc = yes ]; then
	# the ping rows' one-process peer: an MCP server on the official Go SDK (bench/peer-go), built
	# from the module proxy through the go command's own module cache (so once per machine), again
	# when its sources are newer; without it the ping rows say so and the rest runs
	case $BUILD in /*) PEER=$BUILD/kg-peer-go ;; *) PEER=$PWD/$BUILD/kg-peer-go ;; esac
	if [ ! -x "$PEER" ] || [ -n "$(find bench/peer-go -newer "$PEER" -type f 2>/dev/null)" ]; then
		if command -v go >/dev/null &&
			(cd bench/peer-go && GOFLAGS=-mod=readonly CGO_ENABLED=0 GOTOOLCHAIN=local \
				go build -o "$PEER.tmp" . >&2) && mv -f "$PEER.tmp" "$PEER"; then
			:
		else
			echo "bench: the Go SDK peer (bench/peer-go) does not build: the ping rows go without it" >&2
			rm -f "$PEER.tmp"
		fi
	fi
	peer_arg=
	[ -x "$PEER" ] && peer_arg="--peer $PEER"
	# shellcheck disable=SC2086 # peer_arg is an option and its value, or nothing
	"$BUILD/mcpbench" $peer_arg "$@" "${KODE_GOPHER_BIN:-$BUILD/kode-gopher}" || status=$?
fi

if [ $run_http = yes ] || [ $run_k8s = yes ] || [ $run_live = yes ]; then
	# httpbench's and k8sbench's npm packages: the reference server, and undici
	if [ ! -d bench/node_modules ] || [ bench/package.json -nt bench/node_modules ]; then
		echo "bench: npm install in bench" >&2
		if (cd bench && npm install --no-audit --no-fund --loglevel=error >&2); then
			touch bench/node_modules
		else
			echo "bench: npm install in bench/ failed: the shared-server and Kubernetes tables need it" >&2
			exit 1
		fi
	fi
fi

if [ $run_http = yes ]; then
	[ $run_mc = yes ] && echo
	# shellcheck disable=SC2086 # HTTPBENCH_ARGS is a list of options
	node bench/httpbench.mjs $quick ${only_http:+--only "$only_http"} ${http_auth:+--auth "$http_auth"} \
		--bin "${KODE_GOPHER_BIN:-$BUILD/kode-gopher}" --runtime-dir "$RUNTIME_DIR" \
		${HTTPBENCH_ARGS:-} || status=$?
fi

# testbench: test mode against go test by hand, and a 1 MiB artifact (issue 16); only with
# --only testmode (it builds a test binary from a cold private cache once: minutes under load)
if [ $run_testmode = yes ]; then
	KODE_GOPHER_BIN=${KODE_GOPHER_BIN:-$BUILD/kode-gopher} node bench/testbench.mjs \
		${quick:+--rounds 3} || status=$?
fi

if [ $run_signin = yes ]; then
	# sign-in's cost: bearer checking per request, and the sign-in round trip (tests/oidc's provider)
	{ [ $run_mc = yes ] || [ $run_http = yes ]; } && echo
	KODE_GOPHER_BIN=${KODE_GOPHER_BIN:-$BUILD/kode-gopher} node bench/signinbench.mjs $quick || status=$?
fi

if [ $run_live = yes ]; then
	# cancellation and live logs: notifications/cancelled to the next result, logs on a flood
	node bench/livebench.mjs $quick --bin "${KODE_GOPHER_BIN:-$BUILD/kode-gopher}" \
		--runtime-dir "$RUNTIME_DIR" || status=$?
fi

if [ $run_k8s = yes ]; then
	# shellcheck disable=SC2086 # K8SBENCH_ARGS is a list of options
	node bench/k8sbench.mjs $quick ${only_k8s:+--only "$only_k8s"} \
		--bin "${KODE_GOPHER_BIN:-$BUILD/kode-gopher}" --runtime-dir "$RUNTIME_DIR" \
		${K8SBENCH_ARGS:-} || status=$?
fi
exit $status
