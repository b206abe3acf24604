#!/usr/bin/env bash
# tests/k8s/run.sh - run the Kubernetes tests (tests/k8s/*.test.mjs) against a fresh test cluster
# and print their TAP on stdout; progress goes to stderr.
#
#   tests/k8s/run.sh [FILE.test.mjs...]    (default: every tests/k8s/*.test.mjs)
#
# Called by tests/run.sh (so by make check and make asan) after the conformance suite; runs by
# hand too. Steps: build the cluster's binaries if the cache lacks them (`cluster.sh build`: about
# 12 minutes on a new machine, nothing later), start a cluster in a new directory under /tmp
# (`cluster.sh up`, with the agents fixture behind the pods), create the namespace kg-test, the
# RuntimeClass gvisor and a SandboxTemplate + SandboxWarmPool (packaging/k8s/sandbox-template.yaml
# and warm-pool.yaml when they exist, else the test pair below), run every tests/k8s/*.test.mjs with
# node's test runner, and take the cluster down on any exit.
#
# A build that fails skips the suite ("1..0 # SKIP reason", exit 0): a machine without the Go
# module proxy cannot build the cluster. A cluster that was built but does not come up, or whose
# objects cannot be created, is a failure ("not ok", exit 1).
#
# Environment: KG_BIN / KODE_GOPHER_BIN (the kode-gopher binary the agents run; default
# build/kode-gopher), KG_RUNTIME_DIR / KODE_GOPHER_RUNTIME_DIR (the Go caches), KG_K8S_KEEP=1
# (leave the cluster running and say where), KG_K8S_NETNS=NAME (run the cluster and the tests in
# a network namespace of that name; needs root; see README.md), and cluster.sh's own variables.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
cluster=$here/cluster.sh
export KG_BIN=${KG_BIN:-${KODE_GOPHER_BIN:-$repo/build/kode-gopher}}
export KG_RUNTIME_DIR=${KG_RUNTIME_DIR:-${KODE_GOPHER_RUNTIME_DIR:-/var/cache/kode-gopher/runtime}}
export KG_K8S_NAMESPACE=kg-test
ns=$KG_K8S_NAMESPACE
suite_timeout=900	# seconds for all the test files together

say() { printf 'k8s/run.sh: %s\n' "$*" >&2; }

# fail - the cluster could not be set up: one failed TAP test saying why, exit 1
fail() {
	echo "not ok 1 - the Kubernetes test cluster: $*"
	exit 1
}

shopt -s nullglob
# the cluster's own network namespace, if the caller asked for one (phase 2 below does)
netns_asked=${KG_K8S_NETNS:-}
tests=("$@")
if ! ((${#tests[@]})); then
	for f in "$here"/*.test.mjs; do
		# pods/proxy needs routable pod IPs: only in a network namespace (phase 2)
		[ -z "$netns_asked" ] && [ "$(basename "$f")" = proxy.test.mjs ] && continue
		tests+=("$f")
	done
fi
((${#tests[@]})) || fail "no tests/k8s/*.test.mjs to run"
for f in "${tests[@]}"; do
	[ -f "$f" ] || { say "error: no test file $f"; exit 2; }
done

buildlog=$(mktemp)
dir=
# shellcheck disable=SC2317,SC2329  # called by the trap
teardown() {
	rm -f "$buildlog"
	[ -n "$dir" ] || return 0
	if [ "${KG_K8S_KEEP:-}" = 1 ]; then
		say "KG_K8S_KEEP=1: the cluster keeps running; stop it with $cluster down $dir"
	else
		"$cluster" down "$dir" >/dev/null 2>&1 || say "cluster.sh down $dir failed"
	fi
}
trap teardown EXIT
trap 'exit 130' INT TERM

t0=$SECONDS
say "building the test cluster's binaries if they are missing (on a new machine about 12 minutes)"
"$cluster" build 2>&1 | tee "$buildlog" >&2
if [ "${PIPESTATUS[0]}" -ne 0 ]; then
	why=$(sed -n 's/^cluster.sh: error: //p' "$buildlog" | tail -n 1)
	echo "1..0 # SKIP the Kubernetes test cluster could not be built: ${why:-cluster.sh build failed (see above)}"
	exit 0
fi

dir=$(mktemp -d "${TMPDIR:-/tmp}/kg-k8s.XXXXXX")
export KG_K8S_DIR=$dir

# client - run a command as a client of the cluster (KUBECONFIG, kubectl on PATH, its namespace if any)
client() { "$cluster" exec "$dir" "$@"; }

if ! "$cluster" up "$dir" >&2; then
	fail "cluster.sh up failed (its reason is above; KG_K8S_KEEP=1 keeps $dir and its logs)"
fi

# The test objects: what packaging/k8s ships if it is there, else the same shape written here.
# runtimeClassName gvisor is refused by admission unless the RuntimeClass exists (kwok ignores it).
runtime_class='apiVersion: node.k8s.io/v1
kind: RuntimeClass
metadata:
  name: gvisor
handler: runsc'
test_pool='apiVersion: extensions.agents.x-k8s.io/v1beta1
kind: SandboxTemplate
metadata:
  name: go-runtime
spec:
  podTemplate:
    spec:
      runtimeClassName: gvisor
      containers:
      - name: agent
        image: kode-gopher-sandbox:test
        ports:
        - containerPort: 8888
---
apiVersion: extensions.agents.x-k8s.io/v1beta1
kind: SandboxWarmPool
metadata:
  name: go-runtime-pool
spec:
  replicas: 2
  sandboxTemplateRef:
    name: go-runtime'
pkg=$repo/packaging/k8s
out=$(client kubectl create namespace "$ns" 2>&1) || fail "kubectl create namespace $ns: $out"
if [ -f "$pkg/runtimeclass-gvisor.yaml" ]; then
	out=$(client kubectl apply -f "$pkg/runtimeclass-gvisor.yaml" 2>&1)
else
	out=$(client kubectl apply -f - <<<"$runtime_class" 2>&1)
fi || fail "creating the RuntimeClass gvisor: $out"
if [ -f "$pkg/sandbox-template.yaml" ] && [ -f "$pkg/warm-pool.yaml" ]; then
	say "applying packaging/k8s/sandbox-template.yaml and warm-pool.yaml in namespace $ns"
	out=$(client kubectl apply -n "$ns" -f "$pkg/sandbox-template.yaml" -f "$pkg/warm-pool.yaml" 2>&1) ||
		fail "applying packaging/k8s/sandbox-template.yaml and warm-pool.yaml in namespace $ns: $out"
else
	say "packaging/k8s has no sandbox-template.yaml and warm-pool.yaml; applying the test template and pool"
	out=$(client kubectl apply -n "$ns" -f - <<<"$test_pool" 2>&1) || fail "applying the test template and pool: $out"
fi
# the tests find the pool by name; packaging may name it otherwise
pools=$(client kubectl get sandboxwarmpools -n "$ns" -o 'jsonpath={.items[*].metadata.name}' 2>&1) ||
	fail "listing the warm pools: $pools"
case " $pools " in
*" go-runtime-pool "*) export KG_K8S_POOL=go-runtime-pool ;;
"  ") fail "no SandboxWarmPool in namespace $ns after applying the manifests" ;;
*" "*" "*" "*) fail "several warm pools ($pools) and none is go-runtime-pool: say which the tests should use" ;;
*) export KG_K8S_POOL=$pools ;;
esac

say "cluster ready in $((SECONDS - t0))s (pool $KG_K8S_POOL in namespace $ns); running ${#tests[@]} test file(s)"
# node's TAP reporter on stdout, as tests/run.sh reads it; the SDK is in tests/e2e/node_modules
export KG_KUBECTL KG_K8S_NETNS
KG_K8S_NETNS=$(sed -n 's/^NETNS=//p' "$dir/ports.env")
KG_KUBECTL=$(client sh -c 'command -v kubectl')
NODE_PATH=$repo/tests/e2e/node_modules client timeout -k 30 "$suite_timeout" \
	node --test --test-concurrency=1 --test-reporter=tap "${tests[@]}"
rc=$?
say "Kubernetes tests done in $((SECONDS - t0))s (exit $rc); taking the cluster down"

# Phase 2: kube-apiserver proxies only to routable pod IPs, never to loopback ones, so the
# pods/proxy path (kode-gopher outside the cluster) runs in a second cluster inside a network
# namespace of its own, with pod IPs 10.244.x on that namespace's lo (see README.md).
if [ -z "$netns_asked" ] && [ $# -eq 0 ] && [ -f "$here/proxy.test.mjs" ]; then
	"$cluster" down "$dir" >/dev/null 2>&1 || say "cluster.sh down $dir failed"
	dir=
	if [ "$(id -u)" = 0 ] && command -v ip >/dev/null && ip netns list >/dev/null 2>&1; then
		say "phase 2: the pods/proxy path, in a cluster in its own network namespace"
		KG_K8S_NETNS=kgp$$ "$0" "$here/proxy.test.mjs" || rc=1
	else
		echo "# proxy.test.mjs not run: it needs root and ip netns for a cluster in its own network namespace"
	fi
fi
exit $rc
