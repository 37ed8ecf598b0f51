#!/bin/sh
# The DaemonSet in a real Kubernetes: one node, run by `cargo xtask test --kubernetes` in the VM
# booted with systemd, as root. Usage: cluster.sh KUBERNETES_DIR IMAGE_ARCHIVE REPO, where
# KUBERNETES_DIR is what `cargo xtask kubernetes` built (Kubernetes 1.20's server binaries, the
# pause image, the device plugin stand-in) and IMAGE_ARCHIVE is `cargo xtask image`'s.
#
# The node: etcd and containerd as Debian packages them (their units), the API server,
# controller manager, scheduler and kubelet as transient units, the kubelet and containerd
# with the systemd cgroup driver on cgroup v2 (as kubeadm sets a node up), pods on a bridge.
# k8s/ is applied as a user would (`kubectl apply -k`), through an overlay that only names the
# image loaded here. What stands in for Hyperlight's device plugin, which cannot be had here: a
# device plugin of the test's own (tests/kube/device-plugin), containerd giving the device the
# container's user, and the node label, set with kubectl.
#
# Then: the DaemonSet's pod scheduled and Ready; k8s/client-example.yaml's pod in two
# namespaces; each exec's audit line naming its pod; the per-pod quota refusing one pod while
# the other runs; one pod's session invisible to the other; a rolling update under a client
# that keeps sending: no request lost, the old pod drained, the new one Ready, the session back.
set -u
k8s=$1
archive=$2
repo=$3
bin=$k8s/bin
work=/run/hl-cluster
mkdir -p "$work"
export KUBECONFIG=$work/kubeconfig
image=localhost/hyperlightd
tag=0.1.0-test
socket=/run/hyperlightd/hyperlightd.sock
started=$(date +%s)

elapsed() { echo "$(($(date +%s) - started))"; }
check() { echo "== [$(elapsed) s] $*"; }
fail() {
    echo "FAIL [$(elapsed) s]: $*" >&2
    kubectl get nodes -o wide >&2
    kubectl get pods -A -o wide >&2
    kubectl get events -A --sort-by=.lastTimestamp 2>/dev/null | tail -n 30 >&2
    kubectl -n hyperlightd logs -l app.kubernetes.io/name=hyperlightd --all-containers --tail=30 >&2
    for unit in kube-apiserver kube-controller-manager kube-scheduler kubelet containerd hl-device-plugin; do
        echo "--- journal of $unit (last lines)" >&2
        journalctl --no-pager -o cat -u "$unit" -n 8 | cut -c1-300 >&2
    done
    exit 1
}
# until LIMIT WHAT COMMAND...: runs COMMAND every 2 s until it succeeds; fails naming WHAT
# after LIMIT seconds.
until_ok() {
    limit=$1
    what=$2
    shift 2
    deadline=$(($(date +%s) + limit))
    until "$@" > /dev/null 2>&1; do
        [ "$(date +%s)" -lt "$deadline" ] || fail "$what: not within $limit s"
        sleep 2
    done
}
# rollout LIMIT: waits for the DaemonSet's rollout to finish, saying every 30 s where its pods
# are and what the daemon last logged.
rollout() {
    deadline=$(($(date +%s) + $1))
    until kubectl -n hyperlightd rollout status ds/hyperlightd --timeout=30s > /dev/null 2>&1; do
        [ "$(date +%s)" -lt "$deadline" ] || fail "the DaemonSet's rollout: not within $1 s"
        echo "   [$(elapsed) s] $(kubectl -n hyperlightd get pods --no-headers 2>&1 | tr -s ' ' | tr '\n' ';')" \
            "$(kubectl -n hyperlightd logs -l app.kubernetes.io/name=hyperlightd -c hyperlightd --tail=1 2>/dev/null | cut -c1-160)"
        kubectl -n hyperlightd get events --sort-by=.lastTimestamp --no-headers 2>/dev/null | tail -n 2 \
            | cut -c1-240 | sed 's/^/      /'
    done
}
unit() {
    name=$1
    shift
    systemd-run --quiet --unit="$name" --collect -p Restart=on-failure "$@" || fail "starting $name"
}

check "the node: modules, an address, directories, keys"
modprobe bridge && modprobe veth && modprobe dummy || fail "the bridge, veth and dummy modules"
# The VM has no network: the node's address (which the API server reaches the kubelet at, for
# logs and exec) is on a dummy interface.
node_ip=10.99.0.1
ip link add hl-node type dummy && ip addr add "$node_ip/32" dev hl-node && ip link set hl-node up \
    || fail "the node's address"
# The VM's root is an overlay, on which containerd's overlay snapshotter cannot sit.
systemctl stop containerd
mkdir -p /var/lib/containerd && mount -t tmpfs -o size=6g containerd /var/lib/containerd \
    || fail "a tmpfs for containerd"
openssl genrsa -out "$work/sa.key" 2048 2>/dev/null && openssl rsa -in "$work/sa.key" -pubout \
    -out "$work/sa.pub" 2>/dev/null || fail "the service account keys"
echo "test-token,admin,admin,system:masters" > "$work/tokens.csv"
cat > "$KUBECONFIG" <<EOF
apiVersion: v1
kind: Config
clusters: [{name: test, cluster: {server: "https://127.0.0.1:6443", insecure-skip-tls-verify: true}}]
users: [{name: admin, user: {token: test-token}}]
contexts: [{name: test, context: {cluster: test, user: admin}}]
current-context: test
EOF

check "the control plane: etcd, the API server, the controller manager, the scheduler"
systemctl restart etcd || fail "etcd"
unit kube-apiserver "$bin/kube-apiserver" --etcd-servers=http://127.0.0.1:2379 \
    --bind-address=127.0.0.1 --advertise-address=127.0.0.1 --secure-port=6443 --insecure-port=0 \
    --cert-dir="$work/certs" --token-auth-file="$work/tokens.csv" --authorization-mode=AlwaysAllow \
    --service-account-issuer=https://kubernetes.default.svc --service-account-key-file="$work/sa.pub" \
    --service-account-signing-key-file="$work/sa.key" --service-cluster-ip-range=10.96.0.0/24 \
    --kubelet-preferred-address-types=InternalIP
until_ok 300 "the API server ready" kubectl get --raw /readyz
check "the API server is ready"
unit kube-controller-manager "$bin/kube-controller-manager" --kubeconfig="$KUBECONFIG" \
    --service-account-private-key-file="$work/sa.key" --leader-elect=false --port=0 \
    --use-service-account-credentials=false
unit kube-scheduler "$bin/kube-scheduler" --kubeconfig="$KUBECONFIG" --leader-elect=false --port=0

check "the node's runtime: containerd (systemd cgroups, device owners from the pod) and a bridge"
mkdir -p /etc/cni/net.d
cat > /etc/cni/net.d/10-bridge.conflist <<EOF
{"cniVersion": "0.4.0", "name": "pods", "plugins": [
  {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false,
   "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.88.0.0/16"}]], "routes": [{"dst": "0.0.0.0/0"}]}},
  {"type": "loopback"}]}
EOF
mkdir -p /etc/containerd
cat > /etc/containerd/config.toml <<EOF
version = 2
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "localhost/pause:3.2"
  # What Hyperlight's device plugin does through CDI: the device is the pod's user's.
  device_ownership_from_security_context = true
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
      SystemdCgroup = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "/etc/cni/net.d"
EOF
systemctl start containerd || fail "containerd"
until_ok 120 "containerd" ctr version
ctr -n k8s.io images import "$k8s/pause.tar" > /dev/null || fail "importing the pause image"
ctr -n k8s.io images import --base-name "$image" "$archive" > /dev/null || fail "importing the image"
ctr -n k8s.io images tag "$image:latest" "$image:$tag" > /dev/null || fail "tagging the image"
ctr -n k8s.io images ls -q | grep -x "$image:$tag" || fail "no $image:$tag after the import"

check "the kubelet (systemd cgroup driver) and the device plugin stand-in"
unit kubelet "$bin/kubelet" --kubeconfig="$KUBECONFIG" --hostname-override=node --node-ip="$node_ip" \
    --container-runtime=remote --container-runtime-endpoint=unix:///run/containerd/containerd.sock \
    --cgroup-driver=systemd --pod-infra-container-image=localhost/pause:3.2 --fail-swap-on=false
until_ok 300 "the kubelet's device plugin socket" test -S /var/lib/kubelet/device-plugins/kubelet.sock
unit hl-device-plugin -p RestartSec=2 "$bin/hyperlightd-device-plugin" --device=/dev/kvm \
    --resource=hyperlight.dev/hypervisor --count=64
until_ok 300 "the node Ready" sh -c 'kubectl get node node | grep -qw Ready'
kubectl label node node hyperlight.dev/hypervisor=kvm > /dev/null || fail "labelling the node"
allocatable() { kubectl get node node -o jsonpath='{.status.allocatable.hyperlight\.dev/hypervisor}'; }
until_ok 120 "the node offering hyperlight.dev/hypervisor" sh -c "[ \"\$(kubectl get node node -o jsonpath='{.status.allocatable.hyperlight\.dev/hypervisor}')\" = 64 ]"
check "node Ready, offering hyperlight.dev/hypervisor: $(allocatable); Kubernetes $(kubectl get --raw /version | sed -n 's/.*"gitVersion": "\([^"]*\)".*/\1/p')"

check "kubectl apply -k: k8s/, the image named by an overlay"
overlay=$work/overlay
mkdir -p "$overlay"
cat > "$overlay/kustomization.yaml" <<EOF
# The test's only change to k8s/: the image it loaded into containerd (no registry here). A
# tag other than latest, so that the kubelet does not try to pull it.
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - $(realpath --relative-to="$overlay" "$repo/k8s")
images:
  - name: hyperlightd
    newName: $image
    newTag: $tag
EOF
kubectl apply -k "$overlay" || fail "kubectl apply -k"
daemon_pod() {
    kubectl -n hyperlightd get pods -l app.kubernetes.io/name=hyperlightd \
        --field-selector=status.phase=Running -o jsonpath='{.items[0].metadata.name}'
}
# Build and save the templates (native Python's imports its scientific stack) on first start.
rollout 1500
pod=$(daemon_pod)
check "the DaemonSet's pod $pod is Ready"
kubectl -n hyperlightd get pod "$pod" -o jsonpath='{.spec.nodeName} {.spec.schedulerName}{"\n"}'
kubectl -n hyperlightd get events --field-selector "involvedObject.name=$pod,reason=Scheduled" \
    -o jsonpath='{.items[0].message}{"\n"}' | grep -q "to node" || fail "no Scheduled event for $pod"
[ "$(kubectl -n hyperlightd get pod "$pod" -o jsonpath='{.status.conditions[?(@.type=="Ready")].status}')" = True ] \
    || fail "$pod is not Ready"
[ "$(stat -c '%u %a' /run/hyperlightd)" = "10001 755" ] \
    || fail "the init container did not hand /run/hyperlightd over: $(stat -c '%u %a' /run/hyperlightd)"
user=$(kubectl -n hyperlightd exec "$pod" -c hyperlightd -- id -u)
kvm=$(kubectl -n hyperlightd exec "$pod" -c hyperlightd -- ls -ln /dev/kvm | awk '{print $1, $3, $4}')
echo "the daemon runs as $user; /dev/kvm in its container: $kvm"
[ "$user" = 10001 ] && [ "$kvm" = "crw-rw---- 10001 10001" ] \
    || fail "/dev/kvm in the daemon's container is not its user's"
kubectl describe node node | grep -A8 'Allocated resources' | grep 'hyperlight.dev/hypervisor'

check "k8s/client-example.yaml in two namespaces"
for tenant in tenant-a tenant-b; do
    mkdir -p "$work/$tenant"
    cp "$repo/k8s/client-example.yaml" "$work/$tenant/"
    cat > "$work/$tenant/kustomization.yaml" <<EOF
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
namespace: $tenant
resources:
  - client-example.yaml
  - tenant.yaml
images:
  - name: hyperlightd
    newName: $image
    newTag: $tag
EOF
    # A pod of the same user as the example's, kept running for the checks that follow.
    cat > "$work/$tenant/tenant.yaml" <<EOF
apiVersion: v1
kind: Pod
metadata:
  name: tenant
spec:
  automountServiceAccountToken: false
  securityContext:
    runAsNonRoot: true
    runAsUser: 20000
    runAsGroup: 20000
    supplementalGroups: [10001]
  containers:
    - name: client
      image: hyperlightd:latest
      command: ["sleep", "3600"]
      volumeMounts:
        - name: hyperlightd
          mountPath: /run/hyperlightd
          readOnly: true
  volumes:
    - name: hyperlightd
      hostPath:
        path: /run/hyperlightd
        type: Directory
EOF
    kubectl create namespace "$tenant" > /dev/null || fail "namespace $tenant"
    until_ok 120 "the default service account of $tenant" kubectl -n "$tenant" get serviceaccount default
    kubectl apply -k "$work/$tenant" > /dev/null || fail "applying $tenant's pods"
done
for tenant in tenant-a tenant-b; do
    until_ok 600 "$tenant's client-example pod Succeeded" sh -c \
        "[ \"\$(kubectl -n $tenant get pod hyperlightd-client-example -o jsonpath='{.status.phase}')\" = Succeeded ]"
    logs=$(kubectl -n "$tenant" logs hyperlightd-client-example)
    echo "$tenant: $logs" | tr '\n' ' '
    echo
    echo "$logs" | grep -q '^hello from a micro-VM: 3\.' && echo "$logs" | grep -q '^hello from JavaScript' \
        || fail "$tenant's client-example printed: $logs"
    until_ok 300 "$tenant's tenant pod Running" sh -c \
        "[ \"\$(kubectl -n $tenant get pod tenant -o jsonpath='{.status.phase}')\" = Running ]"
done

check "each exec's audit line names its pod and container"
audit() { kubectl -n hyperlightd logs "$pod" -c hyperlightd --tail=-1 | grep '"audit":"exec"'; }
for tenant in tenant-a tenant-b; do
    uid=$(kubectl -n "$tenant" get pod hyperlightd-client-example -o jsonpath='{.metadata.uid}')
    container=$(kubectl -n "$tenant" get pod hyperlightd-client-example \
        -o jsonpath='{.status.containerStatuses[0].containerID}' | sed 's|^containerd://||')
    lines=$(audit | grep -c "\"pod\":\"$uid\",\"container\":\"$container\"")
    echo "$tenant: pod $uid, container $container: $lines exec lines"
    [ "$lines" = 2 ] || { audit | tail -n 4; fail "$tenant's two execs are not audited under its pod"; }
done

in_tenant() {
    tenant=$1
    shift
    timeout 300 kubectl -n "$tenant" exec tenant -- hlctl --socket "$socket" "$@"
}
check "a per-pod quota (--max-execs-per-caller): tenant-a refused at it while tenant-b runs"
quota=$(kubectl -n hyperlightd get ds hyperlightd -o jsonpath='{.spec.template.spec.containers[0].args}' \
    | tr ',' '\n' | sed -n 's/.*--max-execs-per-caller=\([0-9]*\).*/\1/p')
[ -n "$quota" ] || fail "the DaemonSet sets no --max-execs-per-caller"
# Long enough that the refused one and tenant-b's, sent at once after they are counted, arrive
# while they run (under emulation one `kubectl exec` takes seconds), with room under the
# daemon's 60 s limit for a wait for a sandbox (a 57 s one timed out after such a wait). They
# wait on a timer (the guest sleeps in the host) rather than spin: two programs spinning kept
# both vCPUs busy, the node's control plane starved (its lease updates timed out) and in CI
# one `kubectl exec` then took 45 s.
long='await new Promise((done) => setTimeout(done, 45000)); "done"'
i=0
while [ "$i" -lt "$quota" ]; do
    i=$((i + 1))
    in_tenant tenant-a exec --lang js --timeout-ms 60000 -e "$long" > "$work/long-$i" 2>&1 &
done
# Running or waiting for a sandbox, read from the daemon's metrics by the node's root.
until_ok 120 "tenant-a's $quota executions in flight" sh -c \
    "curl -sf --unix-socket $socket http://localhost/metrics | grep -qx 'hyperlightd_executions_in_flight $quota'"
in_tenant tenant-b exec --lang python -e 'print(6 * 7)' > "$work/beside" 2>&1 &
beside=$!
in_tenant tenant-a exec --lang js -e 1 > "$work/refused" 2>&1
code=$?
cat "$work/refused"
uid_a=$(kubectl -n tenant-a get pod tenant -o jsonpath='{.metadata.uid}')
[ "$code" = 4 ] && grep -q "quota_exceeded" "$work/refused" && grep -q "$uid_a" "$work/refused" \
    || { kubectl -n hyperlightd logs "$pod" -c hyperlightd --tail=12 | cut -c1-400; fail "tenant-a's execution past its quota exited $code"; }
wait "$beside" || fail "tenant-b beside tenant-a at its quota: $(cat "$work/beside")"
[ "$(cat "$work/beside")" = 42 ] || fail "tenant-b printed $(cat "$work/beside")"
wait
# tenant-b's exec ran while tenant-a was at its quota: its audit line (written as it ended) is
# older than the first of tenant-a's long executions to end (the refused one's line says
# "rejected"). The lines' times are UTC in one format, so they compare as text.
uid_b=$(kubectl -n tenant-b get pod tenant -o jsonpath='{.metadata.uid}')
ended() { audit | grep "\"pod\":\"$1\"" | sed -n 's/^{"time":"\([^"]*\)".*/\1/p'; }
b_ended=$(ended "$uid_b" | tail -n 1)
a_ended=$(audit | grep "\"pod\":\"$uid_a\"" | grep '"status":"ok"' \
    | sed -n 's/^{"time":"\([^"]*\)".*/\1/p' | sort | head -n 1)
echo "tenant-b's exec ended at $b_ended; tenant-a's first long execution at $a_ended"
[ -n "$b_ended" ] && [ -n "$a_ended" ] && [ "$b_ended" \< "$a_ended" ] \
    || fail "tenant-b's exec did not run while tenant-a was at its quota"
i=0
while [ "$i" -lt "$quota" ]; do
    i=$((i + 1))
    grep -q done "$work/long-$i" || fail "tenant-a's execution $i: $(cat "$work/long-$i")"
done

check "a session of tenant-a's pod is invisible to tenant-b's"
session=$(in_tenant tenant-a session new --lang python) || fail "tenant-a's session"
in_tenant tenant-a session exec "$session" -e 'x = 41' > /dev/null || fail "tenant-a's session exec"
in_tenant tenant-b session exec "$session" -e 'print(x)' > "$work/foreign" 2>&1
code=$?
cat "$work/foreign"
[ "$code" = 4 ] && grep -q session_not_found "$work/foreign" || fail "tenant-b reached tenant-a's session (exit $code)"
in_tenant tenant-b session ls | grep -q "$session" && fail "tenant-b lists tenant-a's session"

check "a rolling update (a changed annotation) under a client that keeps sending"
old=$pod
old_container=$(kubectl -n hyperlightd get pod "$old" \
    -o jsonpath='{.status.containerStatuses[0].containerID}' | sed 's|^containerd://||')
# The client: one JavaScript exec after another. An answer must carry the program's result; a
# refusal that says nothing ran (503 shutting_down, overloaded, no sandbox; the socket gone) is
# retried; anything else (a connection lost mid-request, a timeout, a wrong result) is LOST.
cat > "$work/client.sh" <<'EOF'
i=0
while [ ! -e /tmp/stop ] && [ "$i" -lt 2000 ]; do
    i=$((i + 1))
    out=$(hlctl exec --lang js --timeout-ms 60000 -e "$i * 2" 2>&1)
    code=$?
    if [ "$code" = 0 ] && [ "$out" = "$((i * 2))" ]; then
        echo "ok $i"
    elif [ "$code" = 5 ] || { [ "$code" = 4 ] && echo "$out" | grep -qE 'shutting_down|overloaded|no_sandbox_available'; }; then
        echo "retry $i $code $(echo "$out" | head -c 160)"
        sleep 1
    else
        echo "LOST $i $code $out"
    fi
done
EOF
timeout 1800 kubectl -n tenant-b exec -i tenant -- sh -s < "$work/client.sh" > "$work/client.log" 2>&1 &
client=$!
until_ok 120 "the client's first answers" grep -q '^ok 3$' "$work/client.log"
timeout 1500 kubectl -n hyperlightd logs -f "$old" > "$work/old.log" 2>&1 &
follow=$!
timeout 1500 kubectl -n hyperlightd get pod "$old" -w \
    -o jsonpath='{.metadata.deletionGracePeriodSeconds}{"\n"}' > "$work/old.watch" 2>&1 &
watch=$!
# The runtime's events: the old container's exit and its status.
timeout 1500 ctr -n k8s.io events > "$work/events" 2>&1 &
events=$!
kubectl -n hyperlightd patch ds hyperlightd --type merge \
    -p '{"spec":{"template":{"metadata":{"annotations":{"hyperlightd.test/rollout":"2"}}}}}' \
    || fail "patching the DaemonSet"
rollout 1500
pod=$(daemon_pod)
[ "$pod" != "$old" ] || fail "the DaemonSet's pod was not replaced"
check "the new pod $pod is Ready; the client keeps sending for a while"
before=$(grep -c '^ok' "$work/client.log")
until_ok 300 "the client's answers from the new pod" sh -c \
    "[ \$(grep -c '^ok' $work/client.log) -ge $((before + 5)) ]"
kubectl -n tenant-b exec tenant -- sh -c ': > /tmp/stop' || fail "stopping the client"
wait "$client"
wait "$follow"
kill "$watch" "$events" 2>/dev/null
ok=$(grep -c '^ok' "$work/client.log")
retried=$(grep -c '^retry' "$work/client.log")
echo "the client: $ok answered, $retried refused as retryable; the refusals:"
grep '^retry' "$work/client.log" | cut -c1-120 | sort -k3,3 -s | uniq -c -f2 | head -n 5
grep '^LOST' "$work/client.log" && fail "requests lost during the rolling update"
[ "$retried" -gt 0 ] || fail "the client saw no refusal: did the update happen while it sent?"
[ "$(grep -c . "$work/client.log")" = "$((ok + retried))" ] || { tail -n 5 "$work/client.log"; fail "the client's log has other lines"; }
check "the old pod drained: SIGTERM with a grace period of 120 s, exit 0"
grep -E 'draining|all connections closed|stopped' "$work/old.log" | cut -c1-200
grep -q 'SIGTERM: draining' "$work/old.log" || fail "the old pod's log has no drain"
grep -q '"stopped"\|stopped$' "$work/old.log" || fail "the old daemon did not stop cleanly: $(tail -n 3 "$work/old.log")"
grep -qx 120 "$work/old.watch" || { sort -u "$work/old.watch"; fail "the old pod was not given its 120 s"; }
# The kubelet deletes the pod once its container is gone, without posting the terminated
# state first: the exit status is the runtime's event (`ctr events` prints the protobuf's
# JSON, where a zero exit_status is left out).
exited=$(grep " /tasks/exit {\"container_id\":\"$old_container\",\"id\":\"$old_container\"," "$work/events")
echo "$exited" | cut -c1-300
[ -n "$exited" ] || { grep /tasks/exit "$work/events" | cut -c1-200; fail "no exit of the old pod's container $old_container"; }
echo "$exited" | grep -q '"exit_status":' && fail "the old pod's container did not exit 0"

check "tenant-a's session is back after the update"
out=$(in_tenant tenant-a session exec "$session" -e 'print(x + 1)') || fail "tenant-a's session after the update"
[ "$out" = 42 ] || fail "tenant-a's session printed $out after the update"
check "the cluster test passed in $(elapsed) s"
