#!/usr/bin/env bash
# runtime/prepare.sh - download and precompile the Go runtime caches.
#
# Called by `make runtime` (RUNTIME_DIR=... runtime/prepare.sh); an image
# build can call it the same way. It fills, under $RUNTIME_DIR:
#
#   lock/go.mod, lock/go.sum   the lockfile the agent writes into each /app
#   gomodcache/                GOMODCACHE: every module the lockfile needs
#   gocache/                   GOCACHE: the warm-up's packages and all of std,
#                              compiled with the agent's exact flags, and the
#                              go command's index of the module cache
#   stamp                      hash of what the caches were built from
#
# The agent's builds hit this cache only if they use the same environment and
# flags as kg_build below (see runtime/README.md); change both together.
#
# The work happens in a temporary sibling directory that is renamed into place
# at the end, and the stamp is written last, so an interrupted run never
# leaves a half-filled cache that looks finished.
set -euo pipefail
umask 022

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
RUNTIME_DIR=${RUNTIME_DIR:-/var/cache/kode-gopher/runtime}
RUNTIME_DIR=${RUNTIME_DIR%/}
# GOMODCACHE and GOCACHE must be absolute, and the builds run elsewhere.
case $RUNTIME_DIR in
/*) ;;
*) RUNTIME_DIR=$PWD/$RUNTIME_DIR ;;
esac
GO=${GO:-go}

# say - one progress line on stderr
say() { printf 'runtime: %s\n' "$*" >&2; }

# die - report an error a person can act on and stop
die() { say "error: $*"; exit 1; }

GO=$(command -v "$GO") || die "no 'go' on PATH; install Go 1.26 or set GO=/path/to/go."
go_version=$("$GO" version) || die "'$GO version' failed; is the Go toolchain installed correctly?"

# remove_tree - delete a tree whose module cache is read-only. Only the
# directories are made writable: the files may be hard links shared with the
# live cache, and must stay read-only there.
remove_tree() {
	find "$1" -type d ! -perm -u+w -exec chmod u+w {} + 2>/dev/null || true
	rm -rf "$1"
}

# compute_stamp - hash of every input that changes what the caches hold
compute_stamp() {
	{
		printf 'go: %s\n' "$go_version"
		for f in go.mod go.sum prepare.sh; do
			printf 'file: %s\n' "$f"
			cat "$here/$f"
		done
		(cd "$here" && find warmup -type f -name '*.go' | LC_ALL=C sort) |
			while read -r f; do
				printf 'file: %s\n' "$f"
				cat "$here/$f"
			done
	} | sha256sum | cut -d' ' -f1
}

[ -f "$here/go.mod" ] && [ -f "$here/go.sum" ] ||
	die "runtime/go.mod or runtime/go.sum is missing; restore them from git."
stamp=$(compute_stamp)

# up_to_date - whether $RUNTIME_DIR was built from exactly these inputs
up_to_date() {
	[ -f "$RUNTIME_DIR/stamp" ] && [ "$(cat "$RUNTIME_DIR/stamp")" = "$stamp" ]
}

if up_to_date; then
	say "up to date ($RUNTIME_DIR)"
	exit 0
fi

parent=$(dirname "$RUNTIME_DIR")
name=$(basename "$RUNTIME_DIR")
mkdir -p "$parent" || die "cannot create $parent; run as a user who may write there or set RUNTIME_DIR."

# Two `make runtime` at once (parallel test runs) must not race on the rename.
exec 9>"$parent/.$name.lock"
flock 9
if up_to_date; then
	say "up to date ($RUNTIME_DIR)"
	exit 0
fi

# Holding the lock, any stage or old tree left here is from a killed run.
for d in "$parent/.$name.new."* "$parent/.$name.old."*; do
	if [ -e "$d" ]; then remove_tree "$d"; fi
done

stage=$(mktemp -d "$parent/.$name.new.XXXXXX")
src=""
old=""

# cleanup - remove the stage (and a swapped-out old tree) on any exit
cleanup() {
	for d in "$stage" "$src" "$old"; do
		if [ -n "$d" ] && [ -e "$d" ]; then remove_tree "$d"; fi
	done
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The warm-up module is built from a copy, so that -mod=mod can never rewrite
# the tracked lockfile, and from outside the stage, so the stage holds only
# what sandboxes see.
src="$stage.src"
mkdir -p "$stage/lock" "$src/warmup"
cp "$here/go.mod" "$here/go.sum" "$stage/lock/"
cp "$here/go.mod" "$here/go.sum" "$src/"
cp "$here"/warmup/*.go "$src/warmup/"

# Reuse what an earlier run fetched and compiled. Module files are immutable
# and read-only, so hard links are safe; build-cache files can be rewritten
# in place by the go command, so they are copied. Copied entries are dated
# two hours back: every entry this run uses gets a fresh mtime from the go
# command, and the ones still old afterwards belong to an earlier lockfile and
# are deleted below, so the cache does not grow with each upgrade.
now=$(date +%s)
if [ -d "$RUNTIME_DIR/gomodcache" ]; then
	cp -al "$RUNTIME_DIR/gomodcache" "$stage/gomodcache"
	# The directories are new copies; new modules must be addable to them.
	find "$stage/gomodcache" -type d -exec chmod u+w {} +
fi
if [ -d "$RUNTIME_DIR/gocache" ]; then
	say "reusing the previous build cache…"
	cp -a "$RUNTIME_DIR/gocache" "$stage/gocache"
	chmod -R u+w "$stage/gocache"
	find "$stage/gocache" -type f \( -name '*-a' -o -name '*-d' \) \
		-exec touch -h -d "@$((now - 7200))" {} +
fi
mkdir -p "$stage/gomodcache" "$stage/gocache"
touch -d "@$((now - 3600))" "$src/.seed-cutoff"
# The go command trims entries unused for five days once a day; a fresh
# trim.txt keeps it from deleting the backdated seed before it is reused.
printf '%s' "$now" >"$stage/gocache/trim.txt"

# Download settings come from the caller's go env (including `go env -w`),
# resolved here because the builds below ignore the user's go env file.
dl_env=()
for v in GOPROXY GOSUMDB GONOSUMDB GOPRIVATE GONOPROXY GOINSECURE; do
	dl_env+=("$v=$("$GO" env "$v")")
done
for v in http_proxy https_proxy no_proxy HTTP_PROXY HTTPS_PROXY NO_PROXY \
	SSL_CERT_FILE SSL_CERT_DIR; do
	if [ -n "${!v:-}" ]; then dl_env+=("$v=${!v}"); fi
done

# kg_env - run a command in the build environment the agent uses, with the
# caches under $1: nothing from the caller's environment or go env file can
# change a cache key.
kg_env() {
	local root=$1
	shift
	(cd "$src" && env -i PATH="$PATH" HOME="${HOME:-/root}" TMPDIR="${TMPDIR:-/tmp}" \
		GOENV=off GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=mod \
		GOMODCACHE="$root/gomodcache" GOCACHE="$root/gocache" "$@")
}

# kg_build - go build in the stage exactly as the agent does, proxy off.
# The module index is keyed on the module cache's path, so it is left
# unwritten here and filled in once the caches are at their final path.
kg_build() {
	kg_env "$stage" GOPROXY=off GODEBUG=goindex=0 "$GO" build -trimpath "$@"
}

say "downloading modules…"
kg_env "$stage" "${dl_env[@]}" "$GO" mod download ||
	die "go mod download failed; check that the Go module proxy ($("$GO" env GOPROXY)) is reachable."

say "precompiling (this takes a few minutes the first time)…"
kg_build -o /dev/null ./warmup ||
	die "building runtime/warmup failed; run 'go mod tidy' in runtime/ and check that warmup imports resolve."
if ! cmp -s "$src/go.mod" "$here/go.mod" || ! cmp -s "$src/go.sum" "$here/go.sum"; then
	die "runtime/go.mod or go.sum is not tidy (the build had to change it); run 'go mod tidy' in runtime/."
fi
# All of std, so that any standard-library import in a snippet is a cache hit.
kg_build std || die "building the standard library failed; is the Go installation complete?"
# Test mode (agent/gobuild.c, gobuild_test_build): a test binary built as the agent builds
# one, so testing, its generated main and vet's facts are warm; and test2json, which
# `go tool` builds into the build cache the first time it is asked for.
kg_env "$stage" GOPROXY=off GODEBUG=goindex=0 "$GO" test -c -trimpath -buildvcs=false \
	-ldflags='-s -w' -o /dev/null ./warmup ||
	die "building the warm-up's test binary failed; is the Go installation complete?"
kg_env "$stage" GOPROXY=off GODEBUG=goindex=0 "$GO" tool -n test2json >/dev/null ||
	die "building test2json failed; is the Go installation complete?"

# Drop seeded build-cache entries that this lockfile no longer uses.
find "$stage/gocache" -type f \( -name '*-a' -o -name '*-d' \) \
	! -newer "$src/.seed-cutoff" -delete

# Sandboxes run as other uids: everything readable, the module cache
# read-only as the go command leaves it, the build cache writable by no one
# but its owner (sandboxes write to a per-session overlay).
chmod -R a+rX,go-w "$stage"
chmod -R a-w "$stage/gomodcache"

if [ -e "$RUNTIME_DIR" ]; then
	old=$(mktemp -u "$parent/.$name.old.XXXXXX")
	mv -T "$RUNTIME_DIR" "$old"
fi
mv -T "$stage" "$RUNTIME_DIR"
stage=""

# Index the modules at their final path: without it every sandbox's first
# build reads the headers of every file in every module again (seconds).
# The stamp is written after this, so an interruption here reruns it all.
kg_env "$RUNTIME_DIR" GOPROXY=off "$GO" list -deps ./warmup std >/dev/null ||
	die "indexing the module cache failed; rerun 'make runtime'."
chmod -R a+rX,go-w "$RUNTIME_DIR/gocache"
printf '%s\n' "$stamp" >"$RUNTIME_DIR/stamp"
say "ready ($RUNTIME_DIR, $(du -sh "$RUNTIME_DIR" | cut -f1))"
