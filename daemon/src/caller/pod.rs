//! Which pod and container a caller's process runs in, read from its cgroup (v2; the
//! `0::` line of `/proc/<pid>/cgroup`) as the kubelet and the container engines lay it out:
//!
//! | who | cgroup of a container's process |
//! |---|---|
//! | kubelet, systemd driver (containerd, CRI-O, cri-dockerd) | `/kubepods.slice[/kubepods-<qos>.slice]/kubepods[-<qos>]-pod<uid, _ for ->.slice/{cri-containerd,crio,docker}-<id>.scope` |
//! | kubelet, cgroupfs driver | `/kubepods[/<qos>]/pod<uid>/[crio-\|docker-]<id>` |
//! | podman (rootful, systemd) | `/machine.slice[/machine-libpod_pod_<pod id>.slice]/libpod-<id>.scope` |
//! | Docker (systemd) | `/system.slice/docker-<id>.scope` |
//!
//! Only the cgroups near the root name anything: the kubelet and the engines create them, and a
//! process cannot create cgroups there. Below a container's own cgroup the container may create
//! its own (when it is given its cgroup subtree), with any names, including one that imitates
//! another pod's: so the pattern is matched from the root down, once, and whatever lies below
//! the container's cgroup is ignored. For the same reason a rootless engine's cgroups (under
//! `user@<uid>.service`, which the user owns) name no pod: anything there is the user's to
//! name, and such a caller counts by its uid.
//!
//! A daemon in a cgroup namespace of its own (a container's, on cgroup v2) sees other cgroups
//! relative to its namespace's root: `/../../kubepods-burstable.slice/…` climbs two levels,
//! then descends. The levels climbed are shared with the daemon's own ancestors, which the
//! daemon cannot name; the systemd driver's names can (`kubepods-burstable-pod<uid>.slice`
//! lies in `kubepods.slice/kubepods-burstable.slice`: a slice's name spells its ancestors), so
//! such a path is placed when the first name after the climb spells exactly the levels shared.
//! The cgroupfs driver's names do not, and such a path is not placed. A process inside the
//! daemon's namespace (the daemon's own container: its probes) is placed outside any pod.

use std::sync::Arc;

use crate::job::Placement;

/// Why a cgroup path was not placed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Unplaced {
    /// No cgroup v2 line.
    #[error("the process's cgroup file has no cgroup v2 line")]
    NoUnifiedLine,
    /// Above the daemon's cgroup namespace, in a layout whose names do not spell their place.
    #[error(
        "the process's cgroup lies outside the daemon's cgroup namespace in a layout that \
         cannot be placed from there (run the daemon in the node's cgroup namespace)"
    )]
    OutsideNamespace,
}

/// Where the process whose `/proc/<pid>/cgroup` is `file` runs; `own_depth` is how deep the
/// daemon's cgroup namespace root lies below the real root (0 in the node's namespace; see
/// [`namespace_depth`]).
pub fn place(file: &str, own_depth: usize) -> Result<Placement, Unplaced> {
    let path = unified_path(file).ok_or(Unplaced::NoUnifiedLine)?;
    let names: Vec<&str> = path.split('/').filter(|n| !n.is_empty()).collect();
    let climbed = names.iter().take_while(|&&n| n == "..").count();
    let below = &names[climbed..];
    if climbed == 0 && own_depth > 0 {
        // Inside the daemon's own namespace: its own container (its probes, say).
        return Ok(Placement::outside());
    }
    let shared = own_depth
        .checked_sub(climbed)
        .ok_or(Unplaced::OutsideNamespace)?;
    if shared == 0 {
        return Ok(from_root(below));
    }
    // The first name after the climb must spell exactly the `shared` levels above it.
    let first = below.first().ok_or(Unplaced::OutsideNamespace)?;
    let ancestors = slice_ancestors(first).ok_or(Unplaced::OutsideNamespace)?;
    if ancestors.len() != shared {
        return Err(Unplaced::OutsideNamespace);
    }
    let whole: Vec<&str> = ancestors
        .iter()
        .map(String::as_str)
        .chain(below.iter().copied())
        .collect();
    Ok(from_root(&whole))
}

/// How deep the daemon's cgroup namespace root lies, from the cgroup of pid 1 (`file`): in
/// the node's pid namespace that is the node's init, whose cgroup is the root or a child of
/// it, so the levels it climbs are the namespace root's depth.
pub fn namespace_depth(init_file: &str) -> usize {
    unified_path(init_file).map_or(0, |path| path.split('/').filter(|n| *n == "..").count())
}

/// The cgroup v2 path of a `/proc/<pid>/cgroup` file: its `0::` line's.
fn unified_path(file: &str) -> Option<&str> {
    file.lines().find_map(|line| line.strip_prefix("0::"))
}

/// The ancestors a systemd unit name spells (`a-b-c.slice` lies in `a.slice/a-b.slice`); a
/// scope or service names no ancestors by itself. None for a name that is not a unit's.
fn slice_ancestors(name: &str) -> Option<Vec<String>> {
    let stem = name.strip_suffix(".slice")?;
    let parts: Vec<&str> = stem.split('-').collect();
    if parts.iter().any(|p| p.is_empty()) {
        return None;
    }
    Some(
        (1..parts.len())
            .map(|n| format!("{}.slice", parts[..n].join("-")))
            .collect(),
    )
}

/// Where a process whose cgroup is `names`, from the real root, runs.
fn from_root(names: &[&str]) -> Placement {
    match names {
        ["kubepods.slice", rest @ ..] => kubepods_systemd(rest),
        ["kubepods", rest @ ..] => kubepods_cgroupfs(rest),
        ["machine.slice", rest @ ..] => podman(rest),
        ["system.slice", unit, ..] => Placement {
            pod: None,
            container: container_scope(unit, &["docker-"]),
        },
        _ => Placement::outside(),
    }
}

/// Below `/kubepods.slice`: an optional QoS slice, then the pod's slice, then its containers.
fn kubepods_systemd(names: &[&str]) -> Placement {
    let (prefix, rest) = match names {
        [
            qos @ ("kubepods-burstable.slice" | "kubepods-besteffort.slice"),
            rest @ ..,
        ] => (qos.trim_end_matches(".slice"), rest),
        _ => ("kubepods", names),
    };
    let Some((pod_slice, rest)) = rest.split_first() else {
        return Placement::outside();
    };
    let uid = pod_slice
        .strip_prefix(prefix)
        .and_then(|n| n.strip_prefix("-pod"))
        .and_then(|n| n.strip_suffix(".slice"))
        .map(|n| n.replace('_', "-"))
        .filter(|uid| is_pod_uid(uid));
    let Some(uid) = uid else {
        return Placement::outside();
    };
    Placement {
        pod: Some(uid.into()),
        container: rest
            .first()
            .and_then(|n| container_scope(n, &["cri-containerd-", "crio-", "docker-"])),
    }
}

/// Below `/kubepods`: an optional QoS directory, then `pod<uid>`, then its containers.
fn kubepods_cgroupfs(names: &[&str]) -> Placement {
    let rest = match names {
        ["burstable" | "besteffort", rest @ ..] => rest,
        _ => names,
    };
    let uid = rest
        .first()
        .and_then(|n| n.strip_prefix("pod"))
        .filter(|uid| is_pod_uid(uid));
    let Some(uid) = uid else {
        return Placement::outside();
    };
    let container = rest.get(1).and_then(|n| {
        let id = n
            .strip_prefix("crio-")
            .or_else(|| n.strip_prefix("docker-"))
            .unwrap_or(n);
        is_container_id(id).then(|| id.into())
    });
    Placement {
        pod: Some(uid.into()),
        container,
    }
}

/// Below `/machine.slice`: podman's pods' slices and containers' scopes.
fn podman(names: &[&str]) -> Placement {
    match names {
        [pod_slice, rest @ ..] if pod_slice.starts_with("machine-libpod_pod_") => {
            let id = pod_slice
                .strip_prefix("machine-libpod_pod_")
                .and_then(|n| n.strip_suffix(".slice"))
                .filter(|id| is_container_id(id));
            match id {
                Some(id) => Placement {
                    pod: Some(id.into()),
                    container: rest.first().and_then(|n| container_scope(n, &["libpod-"])),
                },
                None => Placement::outside(),
            }
        }
        [scope, ..] => Placement {
            pod: None,
            container: container_scope(scope, &["libpod-"]),
        },
        [] => Placement::outside(),
    }
}

/// The container id of a scope named `<prefix><64 hex>.scope`, for one of `prefixes`.
fn container_scope(name: &str, prefixes: &[&str]) -> Option<Arc<str>> {
    let stem = name.strip_suffix(".scope")?;
    prefixes
        .iter()
        .find_map(|p| stem.strip_prefix(p))
        .filter(|id| is_container_id(id))
        .map(Arc::from)
}

/// 64 lowercase hex digits, as every engine names containers (and podman pods).
fn is_container_id(id: &str) -> bool {
    id.len() == 64 && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// A Kubernetes pod UID: a UUID, lowercase, with dashes.
fn is_pod_uid(uid: &str) -> bool {
    let groups: Vec<&str> = uid.split('-').collect();
    groups.len() == 5
        && groups.iter().zip([8, 4, 4, 4, 12]).all(|(g, len)| {
            g.len() == len && g.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
        })
}

#[cfg(test)]
#[path = "pod_tests.rs"]
mod tests;
