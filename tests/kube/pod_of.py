#!/usr/bin/env python3
"""Writes the pod of k8s/daemonset.yaml as a Pod for `podman kube play`, which plays Pods and
Deployments but not DaemonSets (podman 4.3, Debian bookworm's).

Usage: pod_of.py DAEMONSET KVM_GID > pod.yaml

The pod template is kept as it is, but for what podman 4.3 cannot do, each said on stderr:
- `hostPID` is ignored by podman before 4.5, so `--pod-identity`, which needs it, is taken out
  (the daemon would refuse every caller: the kernel gives it no pid of a process in another pid
  namespace);
- podman 4.3 removes a finished init container ("once", its default) in a race with the
  container's own exit now and then ("failed to remove once init container ... it is running",
  fixed in podman 4.6): the pod asks for podman's "always" type instead (the init container is
  kept, and runs again at each start of the pod, as a kubelet's does);
- the device plugin's resource (`hyperlight.dev/hypervisor`) means nothing to podman: the test
  gives /dev/kvm through containers.conf instead, and the node's kvm group (KVM_GID) is added to
  the pod's supplementalGroups, as the device's owner group on a node;
- the probes' `timeoutSeconds` is raised to PROBE_TIMEOUT: podman runs a probe's command with
  `podman exec`, which in the emulated (TCG) test VM takes seconds to start a process while the
  daemon fills its pools; what is tested is that the command passes, not how fast a node is.
"""
import sys

import yaml

PROBE_TIMEOUT = 60


def main() -> None:
    daemonset_path, kvm_gid = sys.argv[1], int(sys.argv[2])
    with open(daemonset_path, encoding="utf-8") as f:
        daemonset = yaml.safe_load(f)
    template = daemonset["spec"]["template"]
    spec = template["spec"]
    said = []
    if spec.pop("hostPID", False):
        said.append("hostPID: dropped (podman 4.3 ignores it)")
    for container in spec["containers"]:
        args = container.get("args", [])
        if "--pod-identity" in args:
            args.remove("--pod-identity")
            said.append(f"{container['name']}: --pod-identity dropped (it needs hostPID)")
        for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
            if probe in container and container[probe].get("timeoutSeconds", 1) < PROBE_TIMEOUT:
                container[probe]["timeoutSeconds"] = PROBE_TIMEOUT
                said.append(f"{container['name']}: {probe}'s timeout raised to {PROBE_TIMEOUT} s")
        limits = container.get("resources", {}).get("limits", {})
        if limits.pop("hyperlight.dev/hypervisor", None) is not None:
            said.append(f"{container['name']}: the device plugin's resource dropped")
    groups = spec.setdefault("securityContext", {}).setdefault("supplementalGroups", [])
    groups.append(kvm_gid)
    said.append(f"supplementalGroups: the node's kvm group ({kvm_gid}) added")
    annotations = {"io.podman.annotations.init.container.type": "always"}
    said.append("init containers: podman's type 'always' (4.3 races removing 'once' ones)")
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "hyperlightd",
            "labels": template["metadata"]["labels"],
            "annotations": annotations,
        },
        "spec": spec,
    }
    for line in said:
        print(f"pod_of: {line}", file=sys.stderr)
    yaml.safe_dump(pod, sys.stdout, sort_keys=False)


if __name__ == "__main__":
    main()
