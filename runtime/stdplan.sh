#!/usr/bin/env bash
# runtime/stdplan.sh - the standard-library plan a new sandbox's first build starts from.
#
# Called by `make runtime` after prepare.sh (RUNTIME_DIR=... runtime/stdplan.sh). It writes
# $RUNTIME_DIR/stdplan: for every standard package, the build-cache file `go build` links for it
# with the agent's flags and environment, that file's size and the package's imports; the
# toolchain's identity; the modinfo line go build writes for a main package of the lockfile's
# module that imports only the standard library; and the runtime's stamp. With it the agent's
# direct build path (agent/fastbuild.c) compiles and links a standard-library snippet without
# running the go command even in a sandbox that has never run go build. The format is
# agent/stdplan.h's (read there, written only here). The agent refuses the plan when anything
# it names differs from what the sandbox sees (docs/snippets-and-results.md).
#
# Its own inputs (this script, the toolchain, the stamp) are in the plan's header: when they
# are unchanged it says "up to date" and writes nothing. The plan is written under a temporary
# name and renamed, so a sandbox never reads half of one.
#
# As root (a shared /var/cache/kode-gopher/runtime), the go command runs in a mount namespace of
# its own over a throwaway overlay of the build cache: `go list -export` refreshes the mtimes of
# the entries it reads, and the live cache's files stay exactly as the running sandboxes' plans
# recorded them. Test runs (tests/unit/test_pipeline.c) point GOCACHE_DIR and GOMODCACHE_DIR at
# caches of their own, may name fewer packages (STDPLAN_PACKAGES, default std: the plan holds
# their closure), and with STDPLAN_CACHE_WRITABLE=1 let the go command write to their cache.
set -euo pipefail
umask 022

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
RUNTIME_DIR=${RUNTIME_DIR:-/var/cache/kode-gopher/runtime}
RUNTIME_DIR=${RUNTIME_DIR%/}
GOCACHE_DIR=${GOCACHE_DIR:-$RUNTIME_DIR/gocache}
GOMODCACHE_DIR=${GOMODCACHE_DIR:-$RUNTIME_DIR/gomodcache}
GO=${GO:-go}
read -r -a packages <<<"${STDPLAN_PACKAGES:-std}"

say() { printf 'stdplan: %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }

GO=$(command -v "$GO") || die "no 'go' on PATH; install Go 1.26 or set GO=/path/to/go."
for f in "$RUNTIME_DIR/stamp" "$RUNTIME_DIR/lock/go.mod" "$RUNTIME_DIR/lock/go.sum"; do
	[ -f "$f" ] || die "$f is missing; run 'make runtime' (runtime/prepare.sh) first."
done
[ -d "$GOCACHE_DIR" ] || die "$GOCACHE_DIR is missing; run 'make runtime' first."

# kg_env - a command in the agent's build environment (agent/gobuild.c, go_env; offline)
kg_env() {
	(cd "$work/app" && env -i PATH="$PATH" HOME="$work/home" TMPDIR="$work/tmp" \
		GOENV=off GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=mod GOTELEMETRY=off \
		GOPROXY=off GOSUMDB=off GOMODCACHE="$GOMODCACHE_DIR" GOCACHE="$GOCACHE_DIR" "$@")
}

# The agent's build flags (agent/gobuild.c, gobuild_build_flags), from agent/gobuild.h's two
# defines, read there so that they are written in one place; -gcflags names the main package
# only, so std's files are those of `go list -trimpath`.
flag_define() {
	sed -n "s/^#define $1 *\"\\([^\"]*\\)\".*/\\1/p" "$here/../agent/gobuild.h"
}
ldflags=$(flag_define GOBUILD_LDFLAGS)
gcflags=$(flag_define GOBUILD_MAIN_GCFLAGS)
[ -n "$ldflags" ] && [ -n "$gcflags" ] ||
	die "agent/gobuild.h does not define GOBUILD_LDFLAGS and GOBUILD_MAIN_GCFLAGS as strings."
flags=(-trimpath -buildvcs=false "-ldflags=$ldflags" "-gcflags=$gcflags")

# list - what go build links for std and the modinfo line of a std-only main, into $work
list() {
	kg_env "$GO" list "${flags[0]}" -export -deps \
		-f '{{.ImportPath}} {{if .Export}}{{.Export}}{{else}}-{{end}} {{if .Imports}}{{join .Imports ","}}{{else}}-{{end}}' \
		"${packages[@]}" >"$work/std" || return 1
	kg_env "$GO" build -n "${flags[@]}" -o "$work/a.out" . >"$work/n" 2>&1 || return 1
}

if [ "${1:-}" = --list-in-namespace ]; then
	# (this script again, in a mount namespace of its own: the live cache under an overlay)
	work=$2
	mount --make-rprivate /
	mount -t overlay overlay -o "lowerdir=$GOCACHE_DIR,upperdir=$work/up,workdir=$work/wk" "$GOCACHE_DIR"
	list
	exit
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/kg-stdplan.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/app" "$work/home" "$work/tmp"
cp "$RUNTIME_DIR/lock/go.mod" "$RUNTIME_DIR/lock/go.sum" "$work/app/"
printf 'package main\n\nfunc main() {}\n' >"$work/app/main.go"

version=$(kg_env "$GO" env GOVERSION) || die "'go env' failed; is the Go toolchain installed correctly?"
goroot=$(kg_env "$GO" env GOROOT)
tooldir=$(kg_env "$GO" env GOTOOLDIR)
gobin=$goroot/bin/go

{
	printf 'kode-gopher std plan v1\n'
	printf 'stamp %s\n' "$(cat "$RUNTIME_DIR/stamp")"
	printf 'script %s\n' "$(sha256sum "$here/stdplan.sh" | cut -d' ' -f1)"
	printf 'lock %s\n' "$(sha256sum "$RUNTIME_DIR/lock/go.mod" | cut -d' ' -f1)"
	printf 'version %s\n' "$version"
	printf 'goroot %s\n' "$goroot"
	printf 'tooldir %s\n' "$tooldir"
	printf 'gocache %s\n' "$GOCACHE_DIR"
	printf 'flags %s\n' "${flags[*]}"
	for v in CGO_ENABLED=0 GOFLAGS=-mod=mod GOTOOLCHAIN=local; do printf 'env %s\n' "$v"; done
	for t in "$gobin" "$tooldir/compile" "$tooldir/link" "$goroot/VERSION"; do
		[ -f "$t" ] || die "$t is missing; is the Go installation complete?"
		printf 'tool %s %s\n' "$t" "$(stat -c '%s %Y' "$t")"
	done
} >"$work/head"

out=$RUNTIME_DIR/stdplan
if [ -f "$out" ] && head -n "$(wc -l <"$work/head")" "$out" | cmp -s - "$work/head"; then
	say "up to date ($out)"
	exit 0
fi

if [ "$(id -u)" = 0 ] && [ "${STDPLAN_CACHE_WRITABLE:-0}" != 1 ] && command -v unshare >/dev/null; then
	mkdir -p "$work/up" "$work/wk"
	if ! unshare -m "$here/stdplan.sh" --list-in-namespace "$work"; then
		# (no mount namespace here, e.g. a container without CAP_SYS_ADMIN: the go command
		# then refreshes the mtimes of the entries it reads, which costs a running sandbox's
		# plan one go build)
		say "listing without a private overlay of the build cache"
		list || die "go list of the standard library failed; run 'make runtime' again."
	fi
else
	list || die "go list of the standard library failed; run 'make runtime' again."
fi

modinfo=$(grep -m1 '^modinfo ' "$work/n") ||
	die "go build -n wrote no modinfo line; is this Go version supported (go1.26)?"

{
	cat "$work/head"
	printf '%s\n' "$modinfo"
	while read -r pkg file imports; do
		size=-
		if [ "$file" != - ]; then
			# every file must be in the live cache (not only in the throwaway overlay)
			[ -f "$file" ] || die "$pkg's $file is not in $GOCACHE_DIR; run 'make runtime' again."
			size=$(stat -c %s "$file")
		fi
		printf 'pkg %s %s %s %s\n' "$pkg" "$file" "$size" "$imports"
	done <"$work/std"
} >"$work/plan"
chmod 0644 "$work/plan"
mv -f "$work/plan" "$out.tmp.$$"
mv -f "$out.tmp.$$" "$out"
say "ready ($out, $(grep -c '^pkg ' "$out") packages)"
