#!/bin/sh
# tests/cgroup2/vm.sh - `make check-cgroup2`: the sandbox's cgroup v2 limits, tested for real.
#
# This machine (and many CI hosts) mounts cgroup v1, where the v2 code paths never run. So this
# boots a Debian kernel under qemu (KVM when /dev/kvm is there) with a cgroup-v2-only userland
# (debootstrap of the host's Debian release, systemd as pid 1), shares the repository (with the
# built binary), the Go toolchain and the runtime cache into it read-only over 9p, and runs
# tests/cgroup2/guest.sh there: as root (a kode-gopher subtree of the v2 hierarchy) and as a
# normal user (a transient systemd user scope with Delegate=yes). Opt-in, not part of make check:
# the first run downloads ~200 MB from the Debian mirror.
#
# The image is built once under $CGROUP2_VM_DIR (default /var/cache/kode-gopher/cgroup2-vm) and
# reused while this recipe is unchanged; each run boots it with -snapshot, so it stays pristine.
# Bounded in time: CGROUP2_BUILD_TIMEOUT (default 1200 s) for the image, CGROUP2_RUN_TIMEOUT
# (default 1800 s) for the boot and the tests.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
BUILD=${BUILD:-build}
RUNTIME_DIR=${RUNTIME_DIR:-/var/cache/kode-gopher/runtime}
GOROOT_HOST=${GOROOT_HOST:-/usr/local/go}
VM_DIR=${CGROUP2_VM_DIR:-/var/cache/kode-gopher/cgroup2-vm}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
BUILD_TIMEOUT=${CGROUP2_BUILD_TIMEOUT:-1200}
RUN_TIMEOUT=${CGROUP2_RUN_TIMEOUT:-1800}
MEM_MB=${CGROUP2_VM_MEMORY_MB:-3072}

say() { printf 'check-cgroup2: %s\n' "$*" >&2; }
fail() { say "$*"; exit 1; }

[ "$(id -u)" = 0 ] || fail "needs root (debootstrap, and the image under $VM_DIR)"
[ -x "$repo/$BUILD/kode-gopher" ] || fail "no $BUILD/kode-gopher: run make first"
[ -d "$RUNTIME_DIR/gocache" ] || fail "no runtime cache in $RUNTIME_DIR: run make runtime first"
[ -x "$GOROOT_HOST/bin/go" ] || fail "no Go toolchain at $GOROOT_HOST"
for t in qemu-system-x86_64 debootstrap mkfs.ext4; do
	command -v $t >/dev/null 2>&1 || fail "$t is missing: apt-get install qemu-system-x86 debootstrap e2fsprogs"
done

. /etc/os-release
suite=${CGROUP2_SUITE:-${VERSION_CODENAME:-bookworm}}
# the libraries the binary links (the guest runs the host's build), systemd for the user scope
pkgs="systemd,systemd-sysv,dbus,dbus-user-session,libpam-systemd,linux-image-amd64,procps,kmod"
pkgs="$pkgs,libnng1,libmsgpackc2,libcurl4,libjansson4,libseccomp2,libmicrohttpd12,libssl3,libyaml-0-2"
pkgs="$pkgs,slirp4netns,ca-certificates"
recipe=$(printf '%s\n' "$suite" "$pkgs" "$(sed -n '/^# ---- image ----/,/^# ---- end image ----/p' "$0")" |
	sha256sum | cut -c1-16)

# ---- image ----
build_image() {
	rm -rf "$VM_DIR/root.tmp" "$VM_DIR/rootfs.img.tmp"
	mkdir -p "$VM_DIR"
	say "debootstrap $suite into $VM_DIR/root.tmp (from $MIRROR; a few minutes the first time)"
	timeout "$BUILD_TIMEOUT" debootstrap --variant=minbase --include="$pkgs" "$suite" \
		"$VM_DIR/root.tmp" "$MIRROR" >"$VM_DIR/debootstrap.log" 2>&1 ||
		fail "debootstrap failed or took over $BUILD_TIMEOUT s; see $VM_DIR/debootstrap.log"
	r=$VM_DIR/root.tmp
	echo kg-cgroup2 >"$r/etc/hostname"
	printf '/dev/vda / ext4 rw 0 1\n' >"$r/etc/fstab"
	for m in repo:/mnt/repo go:/usr/local/go runtime:/mnt/runtime; do
		mkdir -p "$r${m#*:}"
		printf '%s %s 9p trans=virtio,version=9p2000.L,ro,msize=262144,cache=loose,nofail 0 0\n' \
			"${m%%:*}" "${m#*:}" >>"$r/etc/fstab"
	done
	printf '9p\n9pnet\n9pnet_virtio\noverlay\n' >"$r/etc/modules-load.d/kg.conf"
	chroot "$r" useradd -m -u 1000 -s /bin/sh kg
	# a user manager for kg from boot, as a login would start it
	mkdir -p "$r/var/lib/systemd/linger"
	touch "$r/var/lib/systemd/linger/kg"
	chroot "$r" passwd -d root >/dev/null
	# the tests run once at boot, their output on the serial console, then the guest powers off
	cat >"$r/etc/systemd/system/kg-cgroup2.service" <<'UNIT'
[Unit]
Description=kode-gopher cgroup v2 tests
After=multi-user.target user@1000.service local-fs.target
Wants=user@1000.service

[Service]
Type=oneshot
StandardOutput=tty
StandardError=tty
TTYPath=/dev/ttyS0
ExecStart=/bin/sh /mnt/repo/tests/cgroup2/guest.sh
ExecStopPost=/bin/systemctl --no-block poweroff

[Install]
WantedBy=multi-user.target
UNIT
	chroot "$r" systemctl enable kg-cgroup2.service >/dev/null 2>&1
	chroot "$r" systemctl mask getty@tty1.service serial-getty@ttyS0.service >/dev/null 2>&1 || true
	cp -L "$r/vmlinuz" "$VM_DIR/vmlinuz.tmp"
	cp -L "$r/initrd.img" "$VM_DIR/initrd.img.tmp"
	say "ext4 image from the tree (mkfs.ext4 -d)"
	truncate -s 6G "$VM_DIR/rootfs.img.tmp"
	mkfs.ext4 -q -F -d "$r" "$VM_DIR/rootfs.img.tmp"
	mv "$VM_DIR/vmlinuz.tmp" "$VM_DIR/vmlinuz"
	mv "$VM_DIR/initrd.img.tmp" "$VM_DIR/initrd.img"
	mv "$VM_DIR/rootfs.img.tmp" "$VM_DIR/rootfs.img"
	rm -rf "$r"
	echo "$recipe" >"$VM_DIR/recipe"
}
# ---- end image ----

t0=$(date +%s)
if [ "$(cat "$VM_DIR/recipe" 2>/dev/null)" = "$recipe" ] && [ -f "$VM_DIR/rootfs.img" ]; then
	say "image $VM_DIR/rootfs.img is up to date (recipe $recipe)"
else
	build_image
	say "image built in $(( $(date +%s) - t0 )) s"
fi
[ "${CGROUP2_IMAGE_ONLY:-}" = 1 ] && exit 0
:

# ---- boot and test ----
# CGROUP2_ACCEL: tcg (the default) or kvm. KVM nested in this machine's own VM hangs the guest
# kernel before its first message (and -cpu host fails on MSR 0x10a), so the default is TCG,
# multi-threaded: slower, but it boots everywhere
case ${CGROUP2_ACCEL:-tcg} in
kvm) accel="-enable-kvm -cpu host,-arch-capabilities" ;;
*) accel="-accel tcg,thread=multi -cpu max" ;;
esac
log=$VM_DIR/last-run.log
say "booting $(basename "$VM_DIR")/vmlinuz ($MEM_MB MiB, 2 CPUs) with the repository, $GOROOT_HOST and $RUNTIME_DIR shared read-only; serial log in $log"
t1=$(date +%s)
set +e
# -snapshot: the guest's writes go to a temporary overlay, the image stays as built
timeout "$RUN_TIMEOUT" qemu-system-x86_64 $accel -m "$MEM_MB" -smp 2 -nographic -no-reboot -snapshot \
	-kernel "$VM_DIR/vmlinuz" -initrd "$VM_DIR/initrd.img" \
	-append "root=/dev/vda rw console=ttyS0 systemd.unified_cgroup_hierarchy=1 systemd.show_status=0 kg.build=$BUILD" \
	-drive "file=$VM_DIR/rootfs.img,format=raw,if=virtio" \
	-virtfs "local,path=$repo,mount_tag=repo,security_model=none,readonly=on" \
	-virtfs "local,path=$GOROOT_HOST,mount_tag=go,security_model=none,readonly=on" \
	-virtfs "local,path=$RUNTIME_DIR,mount_tag=runtime,security_model=none,readonly=on" \
	-vga none -nic none -serial mon:stdio </dev/null 2>&1 | sed -u 's/\r$//' | tee "$log" |
	grep --line-buffered -E '^(ok|not ok|guest:|#|cgroup2:) ' >&2
rc=$?
set -e
say "guest ran for $(( $(date +%s) - t1 )) s"
summary=$(grep -E '^cgroup2: [0-9]+ passed, [0-9]+ failed' "$log" | tail -1)
[ -n "$summary" ] || fail "no result from the guest (timed out after $RUN_TIMEOUT s, or it did not boot): see $log"
echo "$summary"
case $summary in *" 0 failed") exit 0 ;; *) exit 1 ;; esac
