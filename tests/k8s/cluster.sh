#!/usr/bin/env bash
# tests/k8s/cluster.sh - a real, single-machine Kubernetes control plane for the kubernetes
# backend's tests (issue 7). Called by hand and, later, by the tests/k8s fixtures:
#
#   tests/k8s/cluster.sh build        build every binary that is missing from the cache
#   tests/k8s/cluster.sh up DIR       build what is missing, then start the cluster in DIR
#   tests/k8s/cluster.sh down DIR     stop what DIR's cluster runs and remove DIR
#   tests/k8s/cluster.sh status DIR   say which of DIR's processes are alive (exit 1 if any is not)
#
# What runs (all on 127.0.0.1, ports picked free at the first `up` and kept in DIR/ports.env):
# etcd, kube-apiserver (client-certificate authentication, RBAC, service-account signing
# keys), kube-controller-manager (garbage collection, namespaces, service-account tokens),
# kube-scheduler, kwok (the node stand-in: it makes scheduled pods Running with pod IPs in
# 127.100.0.0/16) with one fake node, and the kubernetes-sigs/agent-sandbox controller with
# its CRDs and RBAC, the controller authenticating as its own service account. Behind the pods,
# the agents fixture (agents.mjs) runs a real jailed `kode-gopher agent` on each sandbox pod's
# IP, replaced when the pod is, so the kubernetes backend talks to real agents.
# DIR/kubeconfig is an admin (system:masters) client-certificate kubeconfig.
#
# Everything is built from the Go module proxy: kubernetes through a wrapper module that
# requires k8s.io/kubernetes and replaces each staging module with its published version
# (the main module's own replace directives stop a plain `go install`), etcd through a
# wrapper for the same reason, agent-sandbox and kwok with `go install`. The binaries are
# cached in $KG_K8S_CACHE (default /var/cache/kode-gopher/k8s-bin), one folder per
# component and version, so a later `up` starts in seconds. Progress goes to stderr.
set -euo pipefail

KUBE_VERSION=${KG_K8S_VERSION:-v1.37.2}
ETCD_VERSION=${KG_ETCD_VERSION:-v3.7.3}
AGENT_SANDBOX_VERSION=${KG_AGENT_SANDBOX_VERSION:-v0.5.6}
KWOK_VERSION=${KG_KWOK_VERSION:-v0.8.0}
CACHE=${KG_K8S_CACHE:-/var/cache/kode-gopher/k8s-bin}
# KG_K8S_NETNS=NAME runs the whole cluster in a network namespace of that name, made here with
# nothing in it but lo; see README.md ("pods/proxy") for why. Read from DIR/ports.env later.
NETNS=${KG_K8S_NETNS:-}
# Pod IPs kwok hands out: loopback by default, so a test can listen on them without touching any
# network (a /24 of 127.100-199.x.0 picked at the first `up`, so that clusters running side by
# side do not hand out the same addresses; see free_pod_cidr); inside the namespace a private
# range carried by its lo, which pods/proxy accepts.
if [ -n "$NETNS" ]; then
	POD_CIDR=${KG_K8S_POD_CIDR:-10.244.0.1/16}
else
	POD_CIDR=${KG_K8S_POD_CIDR:-}
fi
NSRUN=()
NODE_NAME=kg-node-0
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
# The agents fixture's kode-gopher and Go caches (see agents.mjs).
KG_BIN=${KG_BIN:-${KODE_GOPHER_BIN:-$REPO/build/kode-gopher}}
KG_RUNTIME_DIR=${KG_RUNTIME_DIR:-${KODE_GOPHER_RUNTIME_DIR:-/var/cache/kode-gopher/runtime}}

KUBE_BIN=$CACHE/kubernetes-$KUBE_VERSION
ETCD_BIN=$CACHE/etcd-$ETCD_VERSION
SANDBOX_BIN=$CACHE/agent-sandbox-$AGENT_SANDBOX_VERSION
KWOK_BIN=$CACHE/kwok-$KWOK_VERSION

# Builds share two cores with everything else on the machine.
export GOTOOLCHAIN=${GOTOOLCHAIN:-local} GOMAXPROCS=${GOMAXPROCS:-2}
export GOFLAGS="-mod=mod -buildvcs=false"

# say - one progress line on stderr
say() { printf 'cluster.sh: %s\n' "$*" >&2; }

# die - a sentence on stderr, then exit 1
die() { say "error: $*"; exit 1; }

# ---------------------------------------------------------------------------- building

# timed - run a build step, say how long it took
timed() {
	local what=$1 start=$SECONDS
	shift
	say "building $what (log: $CACHE/logs/$what.log)"
	if ! "$@" >"$CACHE/logs/$what.log" 2>&1; then
		tail -n 30 "$CACHE/logs/$what.log" >&2
		die "building $what failed; the whole log is $CACHE/logs/$what.log"
	fi
	say "built $what in $((SECONDS - start))s"
}

# build_etcd_step - etcd's server module replaces its sibling modules with ../ paths, so it is
# built from a wrapper module that requires it at the tagged version.
build_etcd_step() {
	local src=$CACHE/src/etcd-$ETCD_VERSION
	mkdir -p "$src" "$ETCD_BIN.tmp" || return 1
	printf 'module kode-gopher.test/etcd-build\n\ngo 1.26.0\n\nrequire go.etcd.io/etcd/server/v3 %s\n' \
		"$ETCD_VERSION" >"$src/go.mod"
	(cd "$src" && go get "go.etcd.io/etcd/server/v3@$ETCD_VERSION" &&
		go build -p 2 -trimpath -ldflags=-s -o "$ETCD_BIN.tmp/etcd" go.etcd.io/etcd/server/v3)
}

# build_kube_step - k8s.io/kubernetes points each staging module (k8s.io/api, k8s.io/client-go,
# ...) at ./staging with v0.0.0 requirements; the wrapper replaces each with its published
# v0.N.P release, read from the main module's own go.mod so a version bump needs no edit here.
build_kube_step() {
	local src=$CACHE/src/kubernetes-$KUBE_VERSION staging=v0.${KUBE_VERSION#v1.}
	local minor=${KUBE_VERSION#v1.}
	minor=${minor%%.*}
	mkdir -p "$src" "$KUBE_BIN.tmp" || return 1
	local modfile
	modfile=$(cd "$src" && go mod download -json "k8s.io/kubernetes@$KUBE_VERSION" |
		sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')
	[ -f "$modfile" ] || { echo "no go.mod for k8s.io/kubernetes@$KUBE_VERSION"; return 1; }
	{
		printf 'module kode-gopher.test/kube-build\n\ngo 1.26.0\n\nrequire k8s.io/kubernetes %s\n\nreplace (\n' "$KUBE_VERSION"
		awk '/^require/ {r = 1} r && $2 == "v0.0.0" {print $1}' "$modfile" |
			while read -r m; do printf '\t%s => %s %s\n' "$m" "$m" "$staging"; done
		printf ')\n'
	} >"$src/go.mod"
	local cmds="kube-apiserver kubectl kube-controller-manager kube-scheduler" pkgs="" at="" c
	for c in $cmds; do
		pkgs="$pkgs k8s.io/kubernetes/cmd/$c"
		at="$at k8s.io/kubernetes/cmd/$c@$KUBE_VERSION"
	done
	local v=k8s.io/component-base/version cv=k8s.io/client-go/pkg/version
	local ld="-s -w -X $v.gitVersion=$KUBE_VERSION -X $v.gitMajor=1 -X $v.gitMinor=$minor -X $v.gitTreeState=clean"
	ld="$ld -X $cv.gitVersion=$KUBE_VERSION -X $cv.gitMajor=1 -X $cv.gitMinor=$minor -X $cv.gitTreeState=clean"
	# shellcheck disable=SC2086
	(cd "$src" && go get $at &&
		go build -p 2 -trimpath -ldflags="$ld" -o "$KUBE_BIN.tmp/" $pkgs)
}

# build_sandbox_step - the proxy serves sigs.k8s.io/agent-sandbox at exact versions but refuses
# its version list, which `go install pkg@version` reads (for deprecation notices); a wrapper
# module that names the version needs no list. The CRDs and RBAC manifests come from the same
# module in the module cache, so nothing is fetched from GitHub at test time.
build_sandbox_step() {
	local src=$CACHE/src/agent-sandbox-$AGENT_SANDBOX_VERSION dir
	mkdir -p "$src" "$SANDBOX_BIN.tmp/manifests" || return 1
	printf 'module kode-gopher.test/agent-sandbox-build\n\ngo 1.26.0\n\nrequire sigs.k8s.io/agent-sandbox %s\n' \
		"$AGENT_SANDBOX_VERSION" >"$src/go.mod"
	(cd "$src" && go build -p 2 -trimpath -ldflags=-s -o "$SANDBOX_BIN.tmp/agent-sandbox-controller" \
		sigs.k8s.io/agent-sandbox/cmd/agent-sandbox-controller) || return 1
	dir=$(cd "$src" && go list -m -f '{{.Dir}}' sigs.k8s.io/agent-sandbox)
	[ -d "$dir/k8s/crds" ] || { echo "sigs.k8s.io/agent-sandbox@$AGENT_SANDBOX_VERSION has no k8s/crds"; return 1; }
	cp "$dir"/k8s/crds/*.yaml "$dir"/k8s/controller.yaml "$dir"/k8s/rbac.generated.yaml \
		"$dir"/k8s/extensions.yaml "$dir"/k8s/extensions-rbac.generated.yaml \
		"$dir"/LICENSE "$SANDBOX_BIN.tmp/manifests/"
}

# build_kwok_step - kwok has no replace directives, so go install works. kwok does nothing
# without "stages" (the status changes it plays); its own default set is kept from the module:
# nodes become Ready and renew their leases, pods become Running and Ready with an IP from
# --cidr, and pods being deleted are removed.
build_kwok_step() {
	local dir s
	mkdir -p "$KWOK_BIN.tmp" || return 1
	GOBIN=$KWOK_BIN.tmp go install -p 2 -trimpath -ldflags=-s "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION" || return 1
	dir=$(cd "$CACHE/src" && go mod download -json "sigs.k8s.io/kwok@$KWOK_VERSION" |
		sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
	for s in node/fast/node-initialize.yaml node/heartbeat-with-lease/node-heartbeat-with-lease.yaml \
		pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml pod/fast/pod-delete.yaml; do
		[ -f "$dir/kustomize/stage/$s" ] || { echo "sigs.k8s.io/kwok@$KWOK_VERSION has no stage $s"; return 1; }
		printf -- '---\n'
		cat "$dir/kustomize/stage/$s"
	done >"$KWOK_BIN.tmp/stages.yaml"
	cp "$dir/LICENSE" "$KWOK_BIN.tmp/"
}

# build_one - build one component into NAME.tmp and rename it, so a half-built folder is never
# taken for a cached one
build_one() {
	local name=$1 bin=$2 step=$3
	[ -d "$bin" ] && return 0
	rm -rf "$bin.tmp"
	timed "$name" "$step"
	mv "$bin.tmp" "$bin"
}

# cmd_build - build whatever is missing, one build at a time even across callers
cmd_build() {
	command -v go >/dev/null || die "go is not on PATH; the cluster is built from the Go module proxy"
	mkdir -p "$CACHE/logs" "$CACHE/src"
	exec 9>"$CACHE/.build.lock"
	if ! flock -n 9; then
		say "another build holds $CACHE/.build.lock; waiting for it"
		flock 9
	fi
	build_one "etcd-$ETCD_VERSION" "$ETCD_BIN" build_etcd_step
	build_one "kubernetes-$KUBE_VERSION" "$KUBE_BIN" build_kube_step
	build_one "agent-sandbox-$AGENT_SANDBOX_VERSION" "$SANDBOX_BIN" build_sandbox_step
	build_one "kwok-$KWOK_VERSION" "$KWOK_BIN" build_kwok_step
	exec 9>&-
}

# ---------------------------------------------------------------------------- certificates

# free_port - a TCP port nobody listens on at 127.0.0.1 now
free_port() {
	local p
	while :; do
		p=$((20000 + RANDOM % 12000)) # below the ephemeral range (32768+), which clients take
		case " ${USED_PORTS:-} " in *" $p "*) continue ;; esac
		if [ -z "$("${NSRUN[@]}" ss -Htln "sport = :$p" 2>/dev/null)" ]; then
			USED_PORTS="${USED_PORTS:-} $p"
			echo "$p"
			return
		fi
	done
}

# free_pod_cidr - a loopback /24 for pod IPs where nothing listens now. Every cluster's agents
# listen on its pod IPs, so two clusters on one machine must not share a range; the choice is
# random among 25600, and checked against the listening sockets.
free_pod_cidr() {
	local net
	while :; do
		net=127.$((100 + RANDOM % 100)).$((RANDOM % 256))
		if ! ss -Htln | awk -v n="$net." 'index($4, n) == 1 { used = 1 } END { exit !used }'; then
			echo "$net.1/24"
			return
		fi
	done
}

# pick_ports - choose the ports, the pod range (and the namespace) once per DIR, so an `up`
# after a crash reuses them
pick_ports() {
	if [ ! -f "$DIR/ports.env" ]; then
		[ -n "$POD_CIDR" ] || POD_CIDR=$(free_pod_cidr)
		{
			echo "NETNS=$NETNS"
			echo "POD_CIDR=$POD_CIDR"
			echo "ETCD_PORT=$(free_port)"
			echo "ETCD_PEER_PORT=$(free_port)"
			echo "API_PORT=$(free_port)"
			echo "KCM_PORT=$(free_port)"
			echo "SCHED_PORT=$(free_port)"
			echo "KWOK_PORT=$(free_port)"
			echo "SANDBOX_WEBHOOK_PORT=$(free_port)"
			echo "SANDBOX_METRICS_PORT=$(free_port)"
			echo "SANDBOX_PROBE_PORT=$(free_port)"
		} >"$DIR/ports.env.tmp"
		mv "$DIR/ports.env.tmp" "$DIR/ports.env"
	fi
	load_ports
}

# load_ports - read DIR/ports.env and set NSRUN, the prefix that runs a command in the namespace
load_ports() {
	# shellcheck disable=SC1091
	. "$DIR/ports.env"
	NSRUN=()
	[ -z "$NETNS" ] || NSRUN=(ip netns exec "$NETNS")
}

# setup_netns - the cluster's own network namespace: lo only, carrying the pod range, so no
# packet to a pod IP can leave it
setup_netns() {
	[ -n "$NETNS" ] || return 0
	if ! ip netns list | awk '{print $1}' | grep -qxF "$NETNS"; then
		ip netns add "$NETNS" || die "cannot create network namespace $NETNS (this needs root)"
		say "created network namespace $NETNS"
	fi
	ip -n "$NETNS" link set lo up
	ip -n "$NETNS" addr replace "$POD_CIDR" dev lo
}

# client_cert - a client certificate signed by the cluster CA (CN = user, O = group)
client_cert() {
	local name=$1 cn=$2 org=${3:-}
	local subj="/CN=$cn"
	[ -n "$org" ] && subj="/O=$org$subj"
	[ -f "$PKI/$name.crt" ] && return 0
	openssl req -new -newkey rsa:2048 -nodes -keyout "$PKI/$name.key" -subj "$subj" \
		-out "$PKI/$name.csr" 2>/dev/null
	printf 'extendedKeyUsage=clientAuth\nkeyUsage=critical,digitalSignature,keyEncipherment\n' >"$PKI/$name.ext"
	openssl x509 -req -in "$PKI/$name.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" -CAcreateserial \
		-days 3650 -sha256 -extfile "$PKI/$name.ext" -out "$PKI/$name.crt" 2>/dev/null
	rm -f "$PKI/$name.csr" "$PKI/$name.ext"
}

# serving_cert - a server certificate for 127.0.0.1 with extra subjectAltNames
serving_cert() {
	local name=$1 cn=$2 sans=$3
	[ -f "$PKI/$name.crt" ] && return 0
	openssl req -new -newkey rsa:2048 -nodes -keyout "$PKI/$name.key" -subj "/CN=$cn" \
		-out "$PKI/$name.csr" 2>/dev/null
	printf 'subjectAltName=%s\nextendedKeyUsage=serverAuth\nkeyUsage=critical,digitalSignature,keyEncipherment\n' \
		"$sans" >"$PKI/$name.ext"
	openssl x509 -req -in "$PKI/$name.csr" -CA "$PKI/ca.crt" -CAkey "$PKI/ca.key" -CAcreateserial \
		-days 3650 -sha256 -extfile "$PKI/$name.ext" -out "$PKI/$name.crt" 2>/dev/null
	rm -f "$PKI/$name.csr" "$PKI/$name.ext"
}

# make_pki - the CA, serving certificates, one client certificate per component, SA keys
make_pki() {
	mkdir -p "$PKI"
	chmod 700 "$PKI"
	if [ ! -f "$PKI/ca.crt" ]; then
		say "generating certificates in $PKI"
		openssl req -x509 -newkey rsa:2048 -nodes -keyout "$PKI/ca.key" -out "$PKI/ca.crt" \
			-days 3650 -sha256 -subj "/CN=kode-gopher-test-ca" \
			-addext "basicConstraints=critical,CA:TRUE" \
			-addext "keyUsage=critical,keyCertSign,cRLSign,digitalSignature" 2>/dev/null
	fi
	serving_cert apiserver kube-apiserver \
		"IP:127.0.0.1,IP:10.96.0.1,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
	# The CRD conversion webhook is reached by URL at 127.0.0.1 (a Service cannot point at
	# loopback), so its certificate names that address as well as the in-cluster Service.
	serving_cert webhook agent-sandbox-webhook \
		"IP:127.0.0.1,DNS:agent-sandbox-webhook-service.agent-sandbox-system.svc"
	client_cert admin kode-gopher-admin system:masters
	# Aggregated API servers and the controllers' delegated authentication read the
	# front-proxy settings; without them they log an error every few seconds.
	client_cert front-proxy-client front-proxy-client
	client_cert kcm system:kube-controller-manager
	client_cert scheduler system:kube-scheduler
	# kwok plays the kubelets: bound to nodes it needs more than system:node allows without
	# the Node authorizer, so it runs as an admin, as kwokctl does.
	client_cert kwok kwok-controller system:masters
	if [ ! -f "$PKI/sa.key" ]; then
		openssl genrsa -out "$PKI/sa.key" 2048 2>/dev/null
		openssl rsa -in "$PKI/sa.key" -pubout -out "$PKI/sa.pub" 2>/dev/null
	fi
}

# kubeconfig_write OUT USER CREDENTIAL... - a kubeconfig for the test cluster whose user has the
# given credential lines (already indented as `user:` fields)
kubeconfig_write() {
	local out=$1 user=$2
	shift 2
	{
		cat <<EOF
apiVersion: v1
kind: Config
clusters:
- name: kode-gopher-test
  cluster:
    server: https://127.0.0.1:$API_PORT
    certificate-authority-data: $(base64 -w0 "$PKI/ca.crt")
users:
- name: $user
  user:
EOF
		printf '    %s\n' "$@"
		cat <<EOF
contexts:
- name: kode-gopher-test
  context:
    cluster: kode-gopher-test
    user: $user
current-context: kode-gopher-test
EOF
	} >"$out"
	chmod 600 "$out"
}

# kubeconfig_cert - write a client-certificate kubeconfig with the files embedded
kubeconfig_cert() {
	kubeconfig_write "$1" "$3" "client-certificate-data: $(base64 -w0 "$PKI/$2.crt")" \
		"client-key-data: $(base64 -w0 "$PKI/$2.key")"
}

# kubeconfig_token - write a bearer-token kubeconfig (the controller's service account)
kubeconfig_token() {
	kubeconfig_write "$1" "$2" "token: $3"
}

# ---------------------------------------------------------------------------- processes

# pid_of - the pid recorded for NAME if that process still runs and is ours: every component's
# command line names DIR, which guards against a recycled pid (we never signal a stranger)
pid_of() {
	local pid cmd
	[ -f "$DIR/pids/$1.pid" ] || return 1
	pid=$(cat "$DIR/pids/$1.pid")
	[ -n "$pid" ] && kill -0 "$pid" 2>/dev/null || return 1
	# read whole, not piped into grep -q: grep's early exit would SIGPIPE tr on a long command
	# line, and pipefail would turn that into "not running"
	cmd=$(tr '\0' ' ' 2>/dev/null <"/proc/$pid/cmdline") || return 1
	[[ $cmd == *"$DIR/"* ]] || return 1
	echo "$pid"
}

# alive - is the process recorded for NAME running?
alive() { pid_of "$1" >/dev/null; }

# start - start NAME in its own session, output to DIR/logs/NAME.log, unless it already runs
start() {
	local name=$1
	shift
	if alive "$name"; then
		say "$name already running (pid $(cat "$DIR/pids/$name.pid"))"
		return 0
	fi
	setsid "${NSRUN[@]}" "$@" >>"$DIR/logs/$name.log" 2>&1 </dev/null &
	local pid=$! _
	echo "$pid" >"$DIR/pids/$name.pid"
	# until the child has exec'd, its command line is this script's, which alive() does not
	# take for NAME: wait for the exec so that a quick wait_for does not report it dead
	for _ in $(seq 1 50); do
		alive "$name" || ! kill -0 "$pid" 2>/dev/null && break
		sleep 0.1
	done
	say "started $name (pid $pid, log $DIR/logs/$name.log)"
}

# wait_for - poll a command until it succeeds; on timeout show NAME's log and fail
wait_for() {
	local name=$1 secs=$2
	shift 2
	local deadline=$((SECONDS + secs))
	until "$@" >/dev/null 2>&1; do
		if ! alive "$name"; then
			tail -n 30 "$DIR/logs/$name.log" >&2
			die "$name exited during start-up; its log is $DIR/logs/$name.log"
		fi
		if [ $SECONDS -ge $deadline ]; then
			tail -n 30 "$DIR/logs/$name.log" >&2
			die "$name was not ready after ${secs}s; its log is $DIR/logs/$name.log"
		fi
		sleep 0.5
	done
}

# kc - kubectl as the admin of this cluster
kc() { "${NSRUN[@]}" "$KUBE_BIN/kubectl" --kubeconfig "$DIR/kubeconfig" "$@"; }

# nscurl - curl from inside the cluster's namespace (if any)
nscurl() { "${NSRUN[@]}" curl "$@"; }

# api_ready - does /readyz answer ok?
api_ready() {
	nscurl -sf --cacert "$PKI/ca.crt" --cert "$PKI/admin.crt" --key "$PKI/admin.key" \
		"https://127.0.0.1:$API_PORT/readyz" | grep -qx ok
}

# https_ok - does an HTTPS health endpoint with a self-signed certificate answer ok?
https_ok() { nscurl -skf "$1" | grep -qx ok; }

# start_etcd - etcd on loopback, plain HTTP: only the API server talks to it
start_etcd() {
	mkdir -p "$DIR/etcd"
	chmod 700 "$DIR/etcd"
	start etcd "$ETCD_BIN/etcd" --name kg --data-dir "$DIR/etcd" \
		--listen-client-urls "http://127.0.0.1:$ETCD_PORT" \
		--advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
		--listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
		--initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
		--initial-cluster "kg=http://127.0.0.1:$ETCD_PEER_PORT" \
		--listen-metrics-urls "" --log-level warn \
		--quota-backend-bytes 1073741824 --unsafe-no-fsync
	wait_for etcd 60 nscurl -sf "http://127.0.0.1:$ETCD_PORT/health"
}

# start_apiserver - kube-apiserver with client certificates, service-account tokens and RBAC
start_apiserver() {
	# --endpoint-reconciler-type=none: the default reconciler would publish 127.0.0.1 as the
	# `kubernetes` Service's endpoint, which Endpoints validation refuses (loopback).
	start kube-apiserver "$KUBE_BIN/kube-apiserver" \
		--etcd-servers "http://127.0.0.1:$ETCD_PORT" \
		--bind-address 127.0.0.1 --advertise-address 127.0.0.1 --secure-port "$API_PORT" \
		--tls-cert-file "$PKI/apiserver.crt" --tls-private-key-file "$PKI/apiserver.key" \
		--client-ca-file "$PKI/ca.crt" \
		--requestheader-client-ca-file "$PKI/ca.crt" \
		--requestheader-allowed-names front-proxy-client \
		--requestheader-username-headers X-Remote-User \
		--requestheader-group-headers X-Remote-Group \
		--requestheader-extra-headers-prefix X-Remote-Extra- \
		--proxy-client-cert-file "$PKI/front-proxy-client.crt" \
		--proxy-client-key-file "$PKI/front-proxy-client.key" \
		--service-account-issuer https://kubernetes.default.svc.cluster.local \
		--service-account-key-file "$PKI/sa.pub" \
		--service-account-signing-key-file "$PKI/sa.key" \
		--service-cluster-ip-range 10.96.0.0/16 \
		--authorization-mode RBAC \
		--endpoint-reconciler-type none \
		--allow-privileged=true --profiling=false \
		--cert-dir "$PKI/generated"
	wait_for kube-apiserver 120 api_ready
}

# start_controllers - kube-controller-manager and kube-scheduler
start_controllers() {
	kubeconfig_cert "$DIR/kcm.kubeconfig" kcm system:kube-controller-manager
	kubeconfig_cert "$DIR/scheduler.kubeconfig" scheduler system:kube-scheduler
	start kube-controller-manager "$KUBE_BIN/kube-controller-manager" \
		--kubeconfig "$DIR/kcm.kubeconfig" \
		--authentication-kubeconfig "$DIR/kcm.kubeconfig" \
		--authorization-kubeconfig "$DIR/kcm.kubeconfig" \
		--bind-address 127.0.0.1 --secure-port "$KCM_PORT" \
		--service-account-private-key-file "$PKI/sa.key" --root-ca-file "$PKI/ca.crt" \
		--cluster-signing-cert-file "$PKI/ca.crt" --cluster-signing-key-file "$PKI/ca.key" \
		--use-service-account-credentials=true --leader-elect=false \
		--cert-dir "$PKI/generated-kcm"
	start kube-scheduler "$KUBE_BIN/kube-scheduler" \
		--kubeconfig "$DIR/scheduler.kubeconfig" \
		--authentication-kubeconfig "$DIR/scheduler.kubeconfig" \
		--authorization-kubeconfig "$DIR/scheduler.kubeconfig" \
		--bind-address 127.0.0.1 --secure-port "$SCHED_PORT" --leader-elect=false \
		--cert-dir "$PKI/generated-scheduler"
	wait_for kube-controller-manager 60 https_ok "https://127.0.0.1:$KCM_PORT/healthz"
	wait_for kube-scheduler 60 https_ok "https://127.0.0.1:$SCHED_PORT/healthz"
}

# NODE_RESOURCES - what the fake node offers: more than any sandbox template asks for (the
# scheduler refuses a pod that requests a resource the node does not list, ephemeral-storage say)
NODE_RESOURCES='{"status":{"capacity":{"cpu":"32","memory":"256Gi","ephemeral-storage":"1Ti","pods":"110"},"allocatable":{"cpu":"32","memory":"256Gi","ephemeral-storage":"1Ti","pods":"110"}}}'

# start_kwok - the node stand-in: one fake node whose pods kwok marks Running with a pod IP
start_kwok() {
	kubeconfig_cert "$DIR/kwok.kubeconfig" kwok kwok-controller
	start kwok "$KWOK_BIN/kwok" --kubeconfig "$DIR/kwok.kubeconfig" \
		--config "$KWOK_BIN/stages.yaml" --node-lease-duration-seconds 40 \
		--manage-all-nodes=false \
		--manage-nodes-with-annotation-selector kwok.x-k8s.io/node=fake \
		--cidr "$POD_CIDR" --node-ip 127.0.0.1 \
		--server-address "127.0.0.1:$KWOK_PORT"
	wait_for kwok 60 nscurl -sf "http://127.0.0.1:$KWOK_PORT/healthz"
	kc apply -f - >/dev/null <<EOF
apiVersion: v1
kind: Node
metadata:
  name: $NODE_NAME
  annotations:
    kwok.x-k8s.io/node: fake
    node.alpha.kubernetes.io/ttl: "0"
  labels:
    kubernetes.io/hostname: $NODE_NAME
    kubernetes.io/os: linux
    kubernetes.io/arch: amd64
    type: kwok
status:
  allocatable: {cpu: "32", memory: 256Gi, ephemeral-storage: 1Ti, pods: "110"}
  capacity: {cpu: "32", memory: 256Gi, ephemeral-storage: 1Ti, pods: "110"}
EOF
	# a node's status is taken from the object only when it is created: on an existing node
	# (a second `up`), set what the scheduler counts through the status subresource
	kc patch node "$NODE_NAME" --subresource status --type merge -p "$NODE_RESOURCES" >/dev/null
	wait_for kwok 60 node_ready
	say "node $NODE_NAME is Ready (kwok; pod IPs from $POD_CIDR)"
}

# node_ready - has kwok marked the fake node Ready?
node_ready() {
	[ "$(kc get node "$NODE_NAME" -o 'jsonpath={.status.conditions[?(@.type=="Ready")].status}')" = True ]
}

# drop_deployment - the upstream controller.yaml without its Deployment (we run the binary)
drop_deployment() {
	awk 'function flush() { if (doc != "" && doc !~ /\nkind: Deployment\n/) printf "%s", doc; doc = "" }
	     /^---[[:space:]]*$/ { flush(); doc = "---\n"; next }
	     { doc = doc $0 "\n" }
	     END { flush() }' "$1"
}

# webhook_by_url - an upstream CRD with its conversion webhook's clientConfig pointed at URL.
# The CRDs name a Service for the webhook, and a Service cannot lead to a loopback address,
# so the API server is sent to the controller's port on 127.0.0.1 instead. Rewriting before
# applying (rather than patching after) keeps a second `up` idempotent.
webhook_by_url() {
	awk -v url="$2" -v ca="$3" '
	     skip && match($0, /^ */) && RLENGTH > indent { next }
	     { skip = 0 }
	     /^ *clientConfig:[[:space:]]*$/ {
		print
		match($0, /^ */); indent = RLENGTH; skip = 1
		pad = sprintf("%*s", indent + 2, "")
		print pad "url: " url
		print pad "caBundle: " ca
		next
	     }
	     { print }' "$1"
}

# install_agent_sandbox - CRDs, namespace, RBAC, then the controller as its service account
install_agent_sandbox() {
	local m=$SANDBOX_BIN/manifests ca_b64 crd token f
	say "installing the agent-sandbox $AGENT_SANDBOX_VERSION CRDs and RBAC"
	ca_b64=$(base64 -w0 "$PKI/ca.crt")
	for f in agents.x-k8s.io_sandboxes extensions.agents.x-k8s.io_sandboxclaims \
		extensions.agents.x-k8s.io_sandboxtemplates extensions.agents.x-k8s.io_sandboxwarmpools; do
		webhook_by_url "$m/$f.yaml" "https://127.0.0.1:$SANDBOX_WEBHOOK_PORT/convert" "$ca_b64" |
			kc apply --server-side --force-conflicts -f - >/dev/null
	done
	drop_deployment "$m/controller.yaml" | kc apply -f - >/dev/null
	kc apply -f "$m/rbac.generated.yaml" -f "$m/extensions.yaml" \
		-f "$m/extensions-rbac.generated.yaml" >/dev/null
	for crd in sandboxes.agents.x-k8s.io sandboxclaims.extensions.agents.x-k8s.io \
		sandboxtemplates.extensions.agents.x-k8s.io sandboxwarmpools.extensions.agents.x-k8s.io; do
		kc wait --for condition=Established --timeout 60s "crd/$crd" >/dev/null
	done
	if [ ! -f "$DIR/agent-sandbox-controller.kubeconfig" ]; then
		token=$(kc -n agent-sandbox-system create token agent-sandbox-controller --duration 8760h)
		kubeconfig_token "$DIR/agent-sandbox-controller.kubeconfig" agent-sandbox-controller "$token"
	fi
	mkdir -p "$DIR/webhook-certs"
	cp "$PKI/webhook.crt" "$DIR/webhook-certs/tls.crt"
	cp "$PKI/webhook.key" "$DIR/webhook-certs/tls.key"
	start agent-sandbox-controller "$SANDBOX_BIN/agent-sandbox-controller" \
		--kubeconfig "$DIR/agent-sandbox-controller.kubeconfig" \
		--extensions --leader-elect=false \
		--manage-webhook-certs=false --webhook-cert-dir "$DIR/webhook-certs" \
		--webhook-port "$SANDBOX_WEBHOOK_PORT" \
		--metrics-bind-address "127.0.0.1:$SANDBOX_METRICS_PORT" \
		--health-probe-bind-address "127.0.0.1:$SANDBOX_PROBE_PORT"
	wait_for agent-sandbox-controller 60 nscurl -sf "http://127.0.0.1:$SANDBOX_PROBE_PORT/readyz"
	# A v1alpha1 read goes through the conversion webhook: proof that the API server reaches it.
	wait_for agent-sandbox-controller 60 kc get sandboxclaims.v1alpha1.extensions.agents.x-k8s.io -A
}

# start_agents - the agents fixture: a real jailed agent behind every sandbox pod (agents.mjs)
start_agents() {
	command -v node >/dev/null || die "node is not on PATH; the agents fixture (agents.mjs) needs it"
	[ -x "$KG_BIN" ] || die "no kode-gopher binary at $KG_BIN (KG_BIN); build it with make"
	KG_BIN=$(cd "$(dirname "$KG_BIN")" && pwd)/$(basename "$KG_BIN")
	# as root, jail runs each agent as a uid of its own, which must pass through DIR
	[ "$(id -u)" != 0 ] || chmod o+x "$DIR"
	alive agents || rm -f "$DIR/pids/agents.ready"
	export KG_BIN KG_RUNTIME_DIR
	start agents node "$HERE/agents.mjs" \
		--kubectl "$KUBE_BIN/kubectl" --kubeconfig "$DIR/kubeconfig" \
		--dir "$DIR/agents" --logs "$DIR/logs/agents" --ready "$DIR/pids/agents.ready"
	wait_for agents 30 test -f "$DIR/pids/agents.ready"
}

# sweep_agents - after the agents fixture has stopped (it stops its agents on SIGTERM; they
# also die with it, by their parent-death signal), kill any sandbox still left: every
# `kode-gopher jail` with an argument under DIR/agents/, with its process group
sweep_agents() {
	local proc pid name left=""
	# grep -z reads each argument as a line: processes with an argument under DIR/agents/...
	# shellcheck disable=SC2013  # /proc paths have no spaces
	for proc in $(grep -alzF -- "$DIR/agents/" /proc/[0-9]*/cmdline 2>/dev/null); do
		pid=${proc#/proc/}
		pid=${pid%/cmdline}
		# ... and an argument "jail"
		grep -qzx jail "$proc" 2>/dev/null || continue
		kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
		left="$left $pid"
	done
	[ -z "$left" ] || say "killed sandboxes the agents fixture left behind (pids$left)"
	# their cgroups, once the jails' pid namespaces have emptied
	for name in "$DIR"/agents/*/; do
		[ -d "$name" ] || continue
		name=k8s-$(basename "$name")
		for _ in $(seq 1 40); do
			rmdir "/sys/fs/cgroup/memory/kode-gopher/$name" "/sys/fs/cgroup/pids/kode-gopher/$name" 2>/dev/null || true
			[ -e "/sys/fs/cgroup/memory/kode-gopher/$name" ] || [ -e "/sys/fs/cgroup/pids/kode-gopher/$name" ] || break
			sleep 0.05
		done
	done
}

# cmd_up - build what is missing and start (or finish starting) the cluster in DIR
cmd_up() {
	local start_s=$SECONDS
	cmd_build
	mkdir -p "$DIR/logs" "$DIR/pids"
	DIR=$(cd "$DIR" && pwd)
	PKI=$DIR/pki
	case "$POD_CIDR" in
	127.* | "") ;;
	*) [ -n "$NETNS" ] || die "KG_K8S_POD_CIDR=$POD_CIDR is not loopback: pod IPs outside 127.0.0.0/8 are only allowed inside the cluster's own namespace (KG_K8S_NETNS=NAME)" ;;
	esac
	pick_ports
	setup_netns
	make_pki
	kubeconfig_cert "$DIR/kubeconfig" admin kode-gopher-admin
	start_etcd
	start_apiserver
	start_controllers
	start_kwok
	install_agent_sandbox
	start_agents
	cat >"$DIR/env" <<EOF
export KUBECONFIG=$DIR/kubeconfig
export PATH=$KUBE_BIN:\$PATH
EOF
	if [ -n "$NETNS" ]; then
		say "cluster up in $((SECONDS - start_s))s in network namespace $NETNS: run clients with $0 exec $DIR CMD..."
	else
		say "cluster up in $((SECONDS - start_s))s: export KUBECONFIG=$DIR/kubeconfig (or . $DIR/env for kubectl too)"
	fi
}

# COMPONENTS - every process `up` starts, in start order
COMPONENTS="etcd kube-apiserver kube-controller-manager kube-scheduler kwok agent-sandbox-controller agents"

# stop_group - TERM the named components together, KILL whatever still runs after 10s
stop_group() {
	local c pid pids="" left _
	for c in "$@"; do
		if pid=$(pid_of "$c"); then
			kill -TERM "$pid" 2>/dev/null || true
			pids="$pids $pid"
		fi
		rm -f "$DIR/pids/$c.pid"
	done
	for _ in $(seq 1 100); do
		left=""
		for pid in $pids; do kill -0 "$pid" 2>/dev/null && left="$left $pid"; done
		pids=$left
		[ -z "$pids" ] && return 0
		sleep 0.1
	done
	for pid in $pids; do
		say "pid $pid ignored TERM for 10s; killing it"
		kill -KILL "$pid" 2>/dev/null || true
	done
}

# cmd_down - stop the API server's clients together (the agents fixture among them), then the
# API server, then etcd (a client whose API server has gone, or an API server whose etcd has, hangs in its
# shutdown), and remove DIR
cmd_down() {
	[ -d "$DIR" ] || { say "$DIR does not exist; nothing to stop"; return 0; }
	local t0=$SECONDS
	stop_group agents agent-sandbox-controller kwok kube-scheduler kube-controller-manager
	sweep_agents
	stop_group kube-apiserver
	stop_group etcd
	say "stopped the cluster in $((SECONDS - t0))s"
	if [ -n "$NETNS" ] && ip netns list | awk '{print $1}' | grep -qxF "$NETNS"; then
		ip netns delete "$NETNS" && say "deleted network namespace $NETNS"
	fi
	rm -rf "$DIR"
	say "removed $DIR"
}

# cmd_status - one line per component
cmd_status() {
	local c bad=0
	for c in $COMPONENTS; do
		if alive "$c"; then
			echo "$c running (pid $(cat "$DIR/pids/$c.pid"))"
		else
			echo "$c not running"
			bad=1
		fi
	done
	return $bad
}

# cmd_exec - run a client against DIR's cluster: KUBECONFIG and kubectl set, and inside the
# cluster's network namespace when it has one
cmd_exec() {
	[ $# -gt 0 ] || die "usage: $0 exec DIR CMD [ARGS...]"
	[ -f "$DIR/ports.env" ] || die "$DIR holds no cluster; start one with $0 up $DIR"
	export KUBECONFIG=$DIR/kubeconfig PATH=$KUBE_BIN:$PATH
	exec "${NSRUN[@]}" "$@"
}

case "${1:-}" in
build) cmd_build ;;
up | down | status | exec)
	[ -n "${2:-}" ] || die "usage: $0 $1 DIR"
	cmd=$1 DIR=$2
	shift 2
	# Absolute, so that a pid's command line can be matched against it.
	if [ -d "$DIR" ]; then DIR=$(cd "$DIR" && pwd); fi
	PKI=$DIR/pki
	[ ! -f "$DIR/ports.env" ] || load_ports
	"cmd_$cmd" "$@"
	;;
*)
	echo "usage: $0 build | up DIR | down DIR | status DIR | exec DIR CMD [ARGS...]" >&2
	exit 2
	;;
esac
