#!/bin/sh
# tests/cgroup2/guest.sh - runs inside the cgroup-v2-only VM that tests/cgroup2/vm.sh boots (as
# root, from a systemd unit at boot; output on the serial console). The repository, the Go
# toolchain and the runtime cache are 9p mounts; the binary is the host's own build.
#
# As root (the kode-gopher subtree of the v2 hierarchy) and as the normal user kg (uid 1000,
# a transient systemd user scope with Delegate=yes): the limits serve reports at start-up, what
# `kode-gopher doctor` finds, the cgroup a program runs in, a program hitting the memory limit
# (named as running out of memory, also when the process killed was small: memory.events) and
# the process limit (fork failing, named), and that no
# cgroup or scope is left after the sandboxes are gone. Ends with "cgroup2: N passed, M failed".
set -u

build=build
for w in $(cat /proc/cmdline); do
	case $w in kg.build=*) build=${w#kg.build=} ;; esac
done
KG=/mnt/repo/$build/kode-gopher
T=/mnt/repo/tests/cgroup2
RT=/mnt/runtime
export GOPROXY=off
pass=0
failed=0
ok() { echo "ok - $*"; pass=$((pass + 1)); }
notok() { echo "not ok - $*"; failed=$((failed + 1)); }
# check NAME FILE PATTERN: the file holds a line matching the extended regex
check() {
	if grep -Eq -- "$3" "$2"; then ok "$1"; else
		notok "$1 (no line matching /$3/ in:)"; sed 's/^/    | /' "$2" | tail -25
	fi
}
check_not() {
	if grep -Eq -- "$3" "$2"; then notok "$1 (a line matches /$3/:)"; grep -E -- "$3" "$2" | sed 's/^/    | /'
	else ok "$1"; fi
}
out=$(mktemp -d)
chmod 0755 "$out"

echo "guest: kernel $(uname -r), /sys/fs/cgroup is $(stat -fc %T /sys/fs/cgroup), $(nproc) CPUs"
echo "guest: v2 controllers at the root: $(cat /sys/fs/cgroup/cgroup.controllers)"
[ "$(stat -fc %T /sys/fs/cgroup)" = cgroup2fs ] && ok "the guest mounts cgroup v2 only" ||
	notok "the guest mounts cgroup v2 only"
[ -x "$KG" ] || { notok "no $KG"; echo "cgroup2: $pass passed, $((failed)) failed"; exit 1; }

# run_as USER CMD...: CMD as root or as kg (a process of kg's own, as a login would have)
run_as() {
	u=$1
	shift
	if [ "$u" = root ]; then "$@"; else
		runuser -u kg -- env HOME=/home/kg XDG_RUNTIME_DIR=/run/user/1000 GOPROXY=off "$@"
	fi
}

# wait for kg's systemd user manager (started at boot by linger) to be up: a condition, bounded
i=0
while [ "$(systemctl is-active user@1000.service 2>/dev/null)" != active ] && [ $i -lt 600 ]; do
	i=$((i + 1))
	sleep 0.1
done
systemctl is-active user@1000.service >/dev/null && ok "kg's systemd user manager is up" ||
	notok "kg's systemd user manager is up ($(systemctl is-active user@1000.service))"

for who in root kg; do
	echo "# as $who"
	if [ $who = root ]; then
		via="cgroup v2"
		cg='^cgroup: 0::/kode-gopher/kg-[0-9a-f]+$'
	else
		via="cgroup v2, in a systemd user scope of its own"
		cg='^cgroup: 0::/user\.slice/user-1000\.slice/user@1000\.service/.*/kode-gopher-kg-[0-9a-f]+-[0-9]+\.scope/sandbox$'
	fi
	d=$out/$who
	mkdir -p "$d"
	chown kg "$d"
	for p in hog forks cgroup spread; do
		mkdir -p "$d/$p"
		cp "$T/$p.go" "$d/$p/main.go"
	done
	chown -R kg "$d"

	# the start-up report: one line per limit kind
	run_as $who "$KG" serve --runtime-dir $RT --sandbox-memory 256m --sandbox-pids 100 \
		</dev/null >/dev/null 2>"$d/serve.log"
	check "$who: start-up says the memory limit is in force through $via" "$d/serve.log" \
		"sandbox limits: memory: 256 MiB per sandbox, builds included, through $via \(memory.max"
	check "$who: start-up says the process limit is in force through $via" "$d/serve.log" \
		"sandbox limits: processes: 100 processes and threads per sandbox through $via \(pids.max\)"
	check "$who: start-up says the CPU weight is in force through $via" "$d/serve.log" \
		"sandbox limits: CPU: weight 100 per sandbox through $via \(cpu.weight\)"
	check_not "$who: start-up warns of no limit" "$d/serve.log" "no cgroup limit|no limit:|no weight"

	# doctor: the plan, and a trial that reads the knobs back from the kernel
	run_as $who "$KG" doctor --sandbox-memory 256m --sandbox-pids 100 >"$d/doctor.txt" 2>&1
	echo "doctor as $who (exit $?):"
	sed 's/^/    | /' "$d/doctor.txt"
	check "$who: doctor's trial: memory.max set" "$d/doctor.txt" "^  memory v2 memory.max=268435456 "
	check "$who: doctor's trial: pids.max set" "$d/doctor.txt" "^  pids v2 pids.max=100 "
	check "$who: doctor's trial: cpu.weight set" "$d/doctor.txt" "^  cpu v2 cpu.weight=100 "
	check "$who: doctor's trial got what was planned" "$d/doctor.txt" "^the trial got every planned limit"

	# the program runs in the sandbox's own cgroup (moved in before any user code ran)
	run_as $who "$KG" exec --runtime-dir $RT --sandbox-network none --sandbox-memory 256m \
		--sandbox-pids 100 "$d/cgroup" >"$d/cg.txt" 2>&1
	check "$who: the program runs in the sandbox's cgroup" "$d/cg.txt" "$cg"
	check "$who: ... and cannot reach its knobs" "$d/cg.txt" "^write memory.max: .*(read-only|permission denied|no such file)"

	# memory: the program is OOM-killed, and the result says so
	run_as $who "$KG" exec --json --runtime-dir $RT --sandbox-network none --sandbox-memory 256m \
		"$d/hog" >"$d/hog.json" 2>"$d/hog.err"
	check "$who: a program past the memory limit is killed, the result names the limit" "$d/hog.json" \
		"the program ran out of memory: the sandbox allows 256 MiB"
	check_not "$who: ... and did not get its 2 GiB" "$d/hog.json" "no memory limit"

	# memory in four processes, none near the limit alone: the kernel's OOM-kill count names it
	run_as $who "$KG" exec --json --runtime-dir $RT --sandbox-network none --sandbox-memory 256m \
		"$d/spread" >"$d/spread.json" 2>"$d/spread.err"
	check "$who: an OOM kill of one of four processes is named from the kernel's count" \
		"$d/spread.json" "the program ran out of memory: the sandbox allows 256 MiB"

	# pids: fork fails at the limit, and the result says so
	run_as $who "$KG" exec --json --runtime-dir $RT --sandbox-network none --sandbox-pids 100 \
		"$d/forks" >"$d/forks.json" 2>"$d/forks.err"
	check "$who: fork fails at the process limit, the result names the limit" "$d/forks.json" \
		"hit the sandbox's limit of 100 processes and threads"
	check_not "$who: ... and did not start its 400 processes" "$d/forks.json" "no process limit"
	sed -n 's/.*"stderr": *"\([^"]*\)".*/\1/p' "$d/forks.json" | head -c 300
	echo
done

# nothing left: the root's leaves are removed by the master, kg's scopes by systemd
left=$(find /sys/fs/cgroup/kode-gopher -mindepth 1 -type d 2>/dev/null | wc -l)
[ "$left" = 0 ] && ok "root: no sandbox cgroup left under /sys/fs/cgroup/kode-gopher" ||
	notok "root: $left sandbox cgroups left: $(find /sys/fs/cgroup/kode-gopher -mindepth 1 -type d)"
# systemd collects an emptied scope on its own; wait for that (bounded), not for a time
i=0
while scopes=$(find /sys/fs/cgroup/user.slice -type d -name 'kode-gopher-*.scope' 2>/dev/null) &&
	[ -n "$scopes" ] && [ $i -lt 100 ]; do
	i=$((i + 1))
	sleep 0.1
done
[ -z "$scopes" ] && ok "kg: no kode-gopher scope left" || notok "kg: scopes left: $scopes"

echo "cgroup2: $pass passed, $failed failed"
