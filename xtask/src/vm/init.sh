#!/bin/busybox sh
# /init of the harness VM's initramfs (written by `cargo xtask vm`).
#
# Loads KVM (nested SVM under QEMU's `-cpu max`), mounts the host's root filesystem read-only
# over 9p, mounts the run's writable share at the same path it has on the host, chroots into the
# host's root and runs the command script the harness wrote there. Each step is recorded in the
# share's `stage` file so that a timeout can say where the VM was; the command's exit status goes
# to the share's `status` file. Parameters come from the kernel command line as environment
# variables: hlshare (the share's path on the host), hlkeep (colon-separated host paths under
# /tmp, such as a checkout cloned there, that must stay visible under the VM's own /tmp) and
# hlrw (colon-separated host directories shared writable as rw0, rw1, ..., mounted at their paths).
B=/bin/busybox

stage() { echo "$1" > /share/stage 2>/dev/null; }

# Hands the VM to systemd, which runs the command as hl-command.service (after basic.target:
# journald, udev, tmpfiles, sysusers) and powers off after it. The host's fstab names disks
# this VM does not have, so it is emptied.
boot_systemd() {
    stage "booting systemd"
    units=/host/etc/systemd/system
    $B mkdir -p "$units"
    : > /host/etc/fstab
    {
        echo "[Unit]"
        echo "Description=The harness's command"
        echo "Requires=basic.target hl-command.service"
        echo "After=basic.target"
        echo "AllowIsolate=yes"
    } > "$units/hl-command.target"
    {
        echo "[Unit]"
        echo "Description=The harness's command"
        echo "After=basic.target"
        echo "[Service]"
        echo "Type=oneshot"
        echo "StandardOutput=journal+console"
        echo "ExecStart=/bin/sh $hlshare/systemd-command.sh"
    } > "$units/hl-command.service"
    {
        echo "echo 'running the command' > $hlshare/stage"
        echo "/bin/sh $hlshare/cmd.sh > $hlshare/stdout 2> $hlshare/stderr"
        echo "echo \$? > $hlshare/status.tmp"
        echo "mv $hlshare/status.tmp $hlshare/status"
        echo "echo 'powering off' > $hlshare/stage"
        echo "sync"
        echo "systemctl poweroff --force --force"
    } > "/host$hlshare/systemd-command.sh"
    exec $B switch_root /host /lib/systemd/systemd --unit=hl-command.target
}
die() {
    echo "vm init: $1" > /dev/console
    echo "$1" > /share/init-error 2>/dev/null
    $B sync
    $B poweroff -f
}

$B mkdir -p /proc /sys /dev /host /share /oldtmp
$B mount -t proc proc /proc
$B mount -t sysfs sys /sys
$B mount -t devtmpfs dev /dev
# Loopback only (the VM has no other network): the egress tests serve on 127.0.0.1.
$B ip link set lo up || die "bringing the loopback interface up failed"

for m in virtio_ring virtio virtio_pci_modern_dev virtio_pci_legacy_dev virtio_pci 9pnet 9pnet_virtio netfs fscache 9p; do
    $B insmod /modules/$m.ko || die "loading module $m failed"
done
$B mount -t 9p -o trans=virtio,version=9p2000.L,msize=524288 share /share || die "mounting the share failed"
stage "loading the KVM modules"
for m in irqbypass ccp kvm; do
    $B insmod /modules/$m.ko || die "loading module $m failed"
done
$B insmod /modules/kvm-amd.ko nested=1 || die "loading kvm-amd failed (does QEMU expose SVM? it needs -cpu max)"
[ -c /dev/kvm ] || die "/dev/kvm did not appear after loading kvm-amd"

stage "mounting the host filesystem"
# cache=loose: without it every program start re-reads its binary over 9p and takes seconds.
if [ -n "$hlsystemd" ]; then
    # systemd needs a writable root: the host's, read-only, under a tmpfs overlay.
    $B insmod /modules/overlay.ko || die "loading module overlay failed"
    $B mkdir -p /lower /ovl
    $B mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=524288,cache=loose hostroot /lower \
        || die "mounting the host root failed"
    $B mount -t tmpfs -o mode=0755 ovl /ovl
    $B mkdir -p /ovl/upper /ovl/work
    $B mount -t overlay -o lowerdir=/lower,upperdir=/ovl/upper,workdir=/ovl/work overlay /host \
        || die "mounting the overlay of the host root failed"
else
    $B mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=524288,cache=loose hostroot /host \
        || die "mounting the host root failed"
fi
$B mount -t proc proc /host/proc
$B mount -t sysfs sys /host/sys
# KVM's counters (exits, page faults), which the benchmark's capacity part reads.
$B mount -t debugfs debugfs /host/sys/kernel/debug 2>/dev/null || true
$B mount -t devtmpfs dev /host/dev
$B mkdir -p /host/dev/shm /host/dev/pts
$B mount -t tmpfs -o mode=1777 shm /host/dev/shm
$B mount -o bind /host/tmp /oldtmp
$B mount -t tmpfs -o mode=1777 tmp /host/tmp
IFS=:
for keep in $hlkeep; do
    $B mkdir -p "/host$keep"
    $B mount -o bind "/oldtmp${keep#/tmp}" "/host$keep" || die "keeping $keep visible under /tmp failed"
done
unset IFS
$B mount -t tmpfs -o mode=0755 run /host/run
$B mount -o bind /share "/host$hlshare" || die "bind-mounting the share at $hlshare failed"
IFS=:
n=0
for dir in $hlrw; do
    $B mount -t 9p -o trans=virtio,version=9p2000.L,msize=524288 "rw$n" "/host$dir" \
        || die "mounting $dir writable failed"
    n=$((n + 1))
done
unset IFS

if [ -n "$hlsystemd" ]; then
    boot_systemd
fi

stage "running the command"
$B chroot /host /bin/sh "$hlshare/cmd.sh" > /share/stdout 2> /share/stderr
echo $? > /share/status.tmp
$B mv /share/status.tmp /share/status
stage "powering off"
$B sync
$B poweroff -f
