#!/bin/sh
# The container image under a real container engine: run by `cargo xtask test` in the VM booted
# with systemd, as root, after tests/systemd/package.sh (same boot: the package is installed
# and its templates are saved under /var/lib/hyperlightd). Usage: kube.sh IMAGE_ARCHIVE REPO.
#
# 1. Callers known by pod: the package's service with --pod-identity and a quota of one
#    execution per caller; two podman pods whose containers run as the same uid and gid call it.
#    The audit log names each one's pod and container, and each is held to its own quota.
# 2. The DaemonSet's pod (k8s/daemonset.yaml, as a Pod: tests/kube/pod_of.py) played with
#    `podman kube play`: its init container, /dev/kvm, the socket on the node's /run/hyperlightd,
#    the readiness and liveness commands, the client pod of k8s/client-example.yaml running a
#    Python and a JavaScript program through it, and a stop that drains.
set -u
archive=$1
repo=$2
socket=/run/hyperlightd/hyperlightd.sock
audit=/var/log/hyperlightd/audit.log
work=$(mktemp -d)

fail() {
    echo "FAIL: $*" >&2
    podman ps -a >&2 || true
    for c in $(podman ps -a --format '{{.Names}}' 2>/dev/null); do
        echo "--- podman logs $c (last lines)" >&2
        podman logs --tail 40 "$c" >&2 || true
    done
    journalctl --no-pager -u hyperlightd -n 40 >&2 || true
    exit 1
}
check() { echo "== $*"; }
# Runs hlctl in pod $1's container, as the pod's user.
in_pod() {
    pod=$1
    shift
    timeout 300 podman exec "$pod-client" hlctl --socket "$socket" "$@"
}

# The VM's root is an overlay, on which podman's overlay store cannot sit: the store goes on a
# tmpfs before podman first runs. (Run earlier, podman would find the host's store through the
# VM's root, fail to set up its driver there and remember that failure for the whole boot.)
mkdir -p /var/lib/containers && mount -t tmpfs -o size=4g containers /var/lib/containers \
    || fail "mounting the store"
check "podman $(podman version --format '{{.Client.Version}}'), its store on a tmpfs"
podman load -i "$archive" || fail "podman load"
podman image inspect localhost/hyperlightd:latest --format '{{.Config.User}} {{.Config.Entrypoint}}'
[ "$(podman image inspect localhost/hyperlightd:latest --format '{{.Config.User}}')" = 10001:10001 ] \
    || fail "the image does not run as 10001:10001"

check "1. the service with --pod-identity and --max-execs-per-caller=1"
# The unit hides other users' processes from the daemon (ProtectProc=invisible); telling
# callers apart by pod needs to see them, as the deployment guide says (docs/guide/deploy-host.md).
mkdir -p /etc/systemd/system/hyperlightd.service.d
printf '[Service]\nProtectProc=default\n' > /etc/systemd/system/hyperlightd.service.d/pods.conf
systemctl daemon-reload
echo 'HYPERLIGHTD_OPTS="--pool javascript=2 --pool python=1 --pod-identity --max-execs-per-caller=1"' \
    > /etc/default/hyperlightd
timeout 600 systemctl start hyperlightd || fail "starting the service"
group=$(getent group hyperlightd | cut -d: -f3)
for tenant in tenant-a tenant-b; do
    cat >> "$work/tenants.yaml" <<EOF
---
apiVersion: v1
kind: Pod
metadata:
  name: $tenant
spec:
  securityContext:
    runAsUser: 20000
    runAsGroup: $group
  containers:
    - name: client
      image: localhost/hyperlightd:latest
      command: ["sleep", "3600"]
      volumeMounts:
        - name: socket
          mountPath: /run/hyperlightd
  volumes:
    - name: socket
      hostPath:
        path: /run/hyperlightd
        type: Directory
EOF
done
timeout 300 podman kube play --network none "$work/tenants.yaml" || fail "playing the tenants' pods"
for tenant in tenant-a tenant-b; do
    [ "$(podman exec "$tenant-client" id -u)" = 20000 ] || fail "$tenant does not run as 20000"
    out=$(in_pod "$tenant" exec --lang js -e '6 * 7') || fail "$tenant's JavaScript"
    [ "$out" = 42 ] || fail "$tenant's JavaScript printed $out"
done
pod_a=$(podman pod inspect tenant-a --format '{{.Id}}')
pod_b=$(podman pod inspect tenant-b --format '{{.Id}}')
ctr_a=$(podman inspect tenant-a-client --format '{{.Id}}')
ctr_b=$(podman inspect tenant-b-client --format '{{.Id}}')
echo "tenant-a: pod $pod_a container $ctr_a"
echo "tenant-b: pod $pod_b container $ctr_b"
grep '"audit":"exec"' "$audit" | tail -n 2
grep -q "\"uid\":20000,.*\"pod\":\"$pod_a\",\"container\":\"$ctr_a\"" "$audit" \
    || fail "no exec line of tenant-a's pod and container"
grep -q "\"uid\":20000,.*\"pod\":\"$pod_b\",\"container\":\"$ctr_b\"" "$audit" \
    || fail "no exec line of tenant-b's pod and container"

check "each pod is held to its own quota"
in_pod tenant-a exec --lang js --timeout-ms 60000 \
    -e 'const end = Date.now() + 30000; while (Date.now() < end) {} "done"' > "$work/long" 2>&1 &
long=$!
waited=0
until curl -sf --unix-socket "$socket" http://localhost/metrics \
    | grep -q '^hyperlightd_executions_in_flight 1$'; do
    [ "$waited" -lt 60 ] || fail "tenant-a's long execution is not in flight after 60 s"
    sleep 1
    waited=$((waited + 1))
done
in_pod tenant-a exec --lang js -e '1' > "$work/second" 2>&1
code=$?
kill -0 "$long" 2>/dev/null || fail "tenant-a's long execution ended early: $(cat "$work/long")"
[ "$code" = 4 ] && grep -q "pod $pod_a" "$work/second" \
    || fail "tenant-a's second execution exited $code: $(cat "$work/second")"
cat "$work/second"
out=$(in_pod tenant-b exec --lang js -e '6 * 7') || fail "tenant-b, beside tenant-a at its quota"
[ "$out" = 42 ] || fail "tenant-b printed $out"
wait "$long" || fail "tenant-a's long execution: $(cat "$work/long")"
grep -q done "$work/long" || fail "tenant-a's long execution printed $(cat "$work/long")"
grep -q "\"pod\":\"$pod_a\".*\"status\":\"rejected\",\"error_kind\":\"quota_exceeded\"" "$audit" \
    || fail "no audit line of tenant-a's refused execution"
timeout 120 podman kube down "$work/tenants.yaml" > /dev/null || fail "removing the tenants' pods"
timeout 120 systemctl stop hyperlightd || fail "stopping the service"

check "2. the DaemonSet's pod under podman kube play"
kvm=$(stat -c %g /dev/kvm)
/usr/bin/python3 "$repo/tests/kube/pod_of.py" "$repo/k8s/daemonset.yaml" "$kvm" > "$work/daemon.yaml" \
    || fail "the DaemonSet's pod"
# The node's /var/lib/hyperlightd holds the templates the service saved; the pod's user takes
# it over (its init container makes only the directory its own), and loads them.
chown -R 10001:10001 /var/lib/hyperlightd
# /dev/kvm for the daemon's container: containers.conf's devices, for this play only.
printf '[containers]\ndevices = ["/dev/kvm:/dev/kvm:rw"]\n' > "$work/containers.conf"
started=$(date +%s)
CONTAINERS_CONF="$work/containers.conf" timeout 300 podman kube play --network none "$work/daemon.yaml" \
    || fail "playing the DaemonSet's pod"
[ "$(stat -c '%u %a' /run/hyperlightd)" = "10001 755" ] \
    || fail "the init container did not hand /run/hyperlightd over: $(stat -c '%u %a' /run/hyperlightd)"
ready="hlctl --socket $socket health"
waited=0
until podman exec hyperlightd-hyperlightd $ready > /dev/null 2>&1; do
    [ "$waited" -lt 900 ] || fail "the pod's readiness command did not pass within 900 s"
    sleep 5
    waited=$((waited + 5))
done
echo "ready in $(( $(date +%s) - started )) s"
podman exec hyperlightd-hyperlightd id
[ "$(podman exec hyperlightd-hyperlightd id -u)" = 10001 ] || fail "the daemon does not run as 10001"
[ "$(podman inspect hyperlightd-hyperlightd --format '{{.HostConfig.ReadonlyRootfs}}')" = true ] \
    || fail "the root filesystem is writable"
probed=$(date +%s%N)
podman healthcheck run hyperlightd-hyperlightd || fail "the liveness probe (podman's health check)"
echo "the liveness probe passed in $(( ($(date +%s%N) - probed) / 1000000 )) ms"
[ "$(stat -c '%a %g' "$socket")" = "660 10001" ] || fail "socket: $(stat -c '%a %g' "$socket")"

check "the client pod of k8s/client-example.yaml"
timeout 600 podman kube play --network none "$repo/k8s/client-example.yaml" || fail "playing the client pod"
waited=0
while [ "$(podman inspect hyperlightd-client-example-client --format '{{.State.Status}}')" != exited ]; do
    [ "$waited" -lt 600 ] || fail "the client pod did not finish within 600 s"
    sleep 2
    waited=$((waited + 2))
done
podman logs hyperlightd-client-example-client
[ "$(podman inspect hyperlightd-client-example-client --format '{{.State.ExitCode}}')" = 0 ] \
    || fail "the client pod failed"
podman logs hyperlightd-client-example-client 2>&1 | grep -q "hello from a micro-VM" \
    || fail "no Python output from the client pod"
podman logs hyperlightd-client-example-client 2>&1 | grep -q "hello from JavaScript" \
    || fail "no JavaScript output from the client pod"
podman logs hyperlightd-hyperlightd 2>&1 | grep '"audit":"exec"' | tail -n 2

check "a stop drains"
timeout 200 podman pod stop -t 120 hyperlightd || fail "stopping the pod"
[ "$(podman inspect hyperlightd-hyperlightd --format '{{.State.ExitCode}}')" = 0 ] \
    || fail "the daemon exited $(podman inspect hyperlightd-hyperlightd --format '{{.State.ExitCode}}')"
podman logs hyperlightd-hyperlightd 2>&1 | grep -q '"stopped"' || fail "the daemon did not log its stop"
[ ! -e "$socket" ] || fail "the socket is still there"
echo "PASS"
