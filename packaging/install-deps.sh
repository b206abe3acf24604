#!/usr/bin/env bash
# install-deps.sh - install what building and testing kode-gopher needs, only what is missing.
# Called by `make deps` (and so by make check, make demo). Safe to run again: it does nothing
# when everything is there.
set -euo pipefail
cd "$(dirname "$0")/.."

debs=(build-essential pkg-config libnng-dev libmsgpack-dev libcurl4-openssl-dev libjansson-dev
      libseccomp-dev libmicrohttpd-dev libssl-dev libyaml-dev libcmocka-dev clang libclang-rt-14-dev
      curl ca-certificates openssl iproute2 hyperfine
      slirp4netns # each local sandbox's own network (policy/jail.c)
      e2fsprogs   # mke2fs, debugfs: each local sandbox's own disk (policy/volume.c)
      strace      # holds a sandbox start up on the master's spawner thread (tests/e2e/churn.test.mjs)
      chromium)   # the sign-in test's browser (tests/e2e/signin-browser.test.mjs, with playwright-core)
missing=()
for p in "${debs[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
	echo "install-deps: installing ${missing[*]}" >&2
	sudo=; [ "$(id -u)" = 0 ] || sudo=sudo
	$sudo apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# slirp4netns (each local sandbox's own network) opens /dev/net/tun as the sandbox's uid, inside
# the sandbox's namespaces: Debian's udev makes it 0666 (tun devices still need CAP_NET_ADMIN
# over a network namespace); machines without udev leave the kernel's 0600.
if [ -c /dev/net/tun ] && [ "$(stat -c %a /dev/net/tun)" != 666 ]; then
	echo "install-deps: chmod 0666 /dev/net/tun (Debian's default), for the sandboxes' network" >&2
	sudo=; [ "$(id -u)" = 0 ] || sudo=sudo
	$sudo chmod 0666 /dev/net/tun
fi

# npm packages of the end-to-end tests (the official MCP SDK client).
if [ -f tests/e2e/package.json ]; then
	if [ ! -d tests/e2e/node_modules ] || [ tests/e2e/package.json -nt tests/e2e/node_modules ]; then
		echo "install-deps: npm install in tests/e2e" >&2
		(cd tests/e2e && npm install --no-audit --no-fund --loglevel=error >/dev/null)
		touch tests/e2e/node_modules
	fi
fi

# npm packages of the conformance suite (the official MCP conformance tests, and the Node 22 they need).
if [ -f tests/conformance/package.json ]; then
	if [ ! -d tests/conformance/node_modules ] || [ tests/conformance/package.json -nt tests/conformance/node_modules ]; then
		echo "install-deps: npm install in tests/conformance" >&2
		(cd tests/conformance && npm install --no-audit --no-fund --loglevel=error >/dev/null)
		touch tests/conformance/node_modules
	fi
fi

# The second MCP client of the end-to-end tests: the official Go SDK, built from the module proxy
# into tests/e2e/goclient's client (tests/e2e/live-go.test.mjs builds it too when it is missing;
# the cache directory is named for a hash of its sources, as that test computes it).
if [ -f tests/e2e/goclient/go.mod ] && command -v go >/dev/null && [ -d /var/cache/kode-gopher ]; then
	gc_hash=$(cat tests/e2e/goclient/go.mod tests/e2e/goclient/go.sum tests/e2e/goclient/main.go | sha256sum | cut -c1-16)
	gc_bin=/var/cache/kode-gopher/goclient-$gc_hash/kg-go-client
	if [ ! -x "$gc_bin" ]; then
		echo "install-deps: building the Go SDK test client" >&2
		mkdir -p "${gc_bin%/*}"
		(cd tests/e2e/goclient && GOFLAGS=-mod=readonly CGO_ENABLED=0 go build -o "$gc_bin.$$" . && mv "$gc_bin.$$" "$gc_bin")
	fi
fi
