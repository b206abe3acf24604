#!/bin/sh
# run.sh - `make bench`: build what the benchmarks need, then print their table on stdout.
#
# Called by the root Makefile's bench target (which has already built build/mcpbench), or by
# hand: bench/run.sh [--quick] [--only ping|rss|calls|sandbox] [--sessions N] [mcpbench
# options...].  Build output and progress go to stderr, so stdout is the table alone.  The exit
# status is non-zero only when the benchmark could not run (or a figure could not be measured);
# a missed aim is a line in the table, never a failure.  See bench/README.md.
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

exec "$BUILD/mcpbench" "$@" "${KODE_GOPHER_BIN:-$BUILD/kode-gopher}"
