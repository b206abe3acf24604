#!/usr/bin/env bash
# tests/oidc/build.sh - build the sign-in tests' OpenID Connect provider (Google's stand-in)
# from the Go module proxy, once, and print the path of the binary on stdout.
#
#   tests/oidc/build.sh         build if missing, print /var/cache/.../oidc-provider
#
# The provider is zitadel's (github.com/zitadel/oidc/v3: its op package and the in-memory
# storage of its example server), wired up by provider/main.go; see that file for what it
# serves. The binary is cached in $KG_OIDC_CACHE (default /var/cache/kode-gopher/oidc-bin),
# one folder per hash of provider/ (go.mod, go.sum, main.go), so a version bump or an edit
# rebuilds and an unchanged tree starts at once. Progress goes to stderr. About 40 s on 2 cores.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CACHE=${KG_OIDC_CACHE:-/var/cache/kode-gopher/oidc-bin}
export GOTOOLCHAIN=${GOTOOLCHAIN:-local} GOMAXPROCS=${GOMAXPROCS:-2}
export GOFLAGS="-mod=readonly -buildvcs=false"

say() { printf 'oidc/build.sh: %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }

command -v go >/dev/null || die "go is not on PATH; the test provider is built from the Go module proxy"
hash=$(cd "$HERE/provider" && cat go.mod go.sum main.go | sha256sum | cut -c1-16)
version=$(sed -n 's/^require github.com\/zitadel\/oidc\/v3 \(v[^ ]*\)$/\1/p' "$HERE/provider/go.mod")
bin=$CACHE/zitadel-oidc-$version-$hash
if [ ! -x "$bin/oidc-provider" ]; then
	mkdir -p "$CACHE/logs"
	exec 9>"$CACHE/.build.lock"
	if ! flock -n 9; then
		say "another build holds $CACHE/.build.lock; waiting for it"
		flock 9
	fi
	if [ ! -x "$bin/oidc-provider" ]; then
		log=$CACHE/logs/zitadel-oidc-$version-$hash.log
		say "building the test OpenID provider (zitadel/oidc $version; log: $log)"
		start=$SECONDS
		rm -rf "$bin.tmp"
		mkdir -p "$bin.tmp"
		if ! (cd "$HERE/provider" && go build -p 2 -trimpath -ldflags=-s -o "$bin.tmp/oidc-provider" .) >"$log" 2>&1; then
			tail -n 30 "$log" >&2
			die "building the test OpenID provider failed; the whole log is $log"
		fi
		mv "$bin.tmp" "$bin"
		say "built it in $((SECONDS - start))s"
	fi
	exec 9>&-
fi
echo "$bin/oidc-provider"
