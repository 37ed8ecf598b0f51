use super::*;

const POD: &str = "7e5b1f2c-3d4a-4b1e-9f0a-2c6d8e9b1a3f";
const POD_SYSTEMD: &str = "7e5b1f2c_3d4a_4b1e_9f0a_2c6d8e9b1a3f";
const CTR: &str = "4c1b6f0e9a2d3c5b7e8f9a0b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e6f7a8b9c0d";
const OTHER: &str = "11111111-2222-4333-8444-555555555555";

fn pod(uid: &str, container: Option<&str>) -> Placement {
    Placement {
        pod: Some(uid.into()),
        container: container.map(Arc::from),
    }
}

fn at(path: &str) -> Placement {
    place(&format!("0::{path}\n"), 0).unwrap()
}

#[test]
fn the_kubelets_systemd_layouts_name_pod_and_container() {
    for (qos, prefix) in [
        ("", "kubepods"),
        ("kubepods-burstable.slice/", "kubepods-burstable"),
        ("kubepods-besteffort.slice/", "kubepods-besteffort"),
    ] {
        for runtime in ["cri-containerd", "crio", "docker"] {
            let path = format!(
                "/kubepods.slice/{qos}{prefix}-pod{POD_SYSTEMD}.slice/{runtime}-{CTR}.scope"
            );
            assert_eq!(at(&path), pod(POD, Some(CTR)), "{path}");
        }
    }
    // CRI-O's container monitor runs in the pod, in no container.
    let conmon = format!(
        "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{POD_SYSTEMD}.slice/crio-conmon-{CTR}.scope"
    );
    assert_eq!(at(&conmon), pod(POD, None));
}

#[test]
fn the_kubelets_cgroupfs_layouts_name_pod_and_container() {
    for qos in ["", "burstable/", "besteffort/"] {
        for id in [
            CTR.to_owned(),
            format!("crio-{CTR}"),
            format!("docker-{CTR}"),
        ] {
            let path = format!("/kubepods/{qos}pod{POD}/{id}");
            assert_eq!(at(&path), pod(POD, Some(CTR)), "{path}");
        }
    }
    // Recorded on a k3s node (cgroup v1's lines before the v2 line are skipped).
    let file = format!(
        "11:devices:/kubepods/besteffort/pod{POD}/{CTR}\n1:name=systemd:/kubepods/besteffort/pod{POD}/{CTR}\n0::/kubepods/besteffort/pod{POD}/{CTR}\n"
    );
    assert_eq!(place(&file, 0).unwrap(), pod(POD, Some(CTR)));
}

#[test]
fn podman_names_its_pods_and_a_container_outside_one() {
    let pod_id = CTR.replace('4', "5");
    let path = format!("/machine.slice/machine-libpod_pod_{pod_id}.slice/libpod-{CTR}.scope");
    assert_eq!(at(&path), pod(&pod_id, Some(CTR)));
    // crun's own sub-cgroup of the container is below the container: ignored.
    assert_eq!(at(&format!("{path}/container")), pod(&pod_id, Some(CTR)));
    let alone = at(&format!("/machine.slice/libpod-{CTR}.scope"));
    assert_eq!((alone.pod, alone.container), (None, Some(CTR.into())));
    let docker = at(&format!("/system.slice/docker-{CTR}.scope"));
    assert_eq!((docker.pod, docker.container), (None, Some(CTR.into())));
}

#[test]
fn a_process_outside_any_pod_is_none() {
    for path in [
        "/",
        "/init.scope",
        "/system.slice/hyperlightd.service",
        "/system.slice/containerd.service",
        "/user.slice/user-1000.slice/session-3.scope",
        "/kubepods.slice",
        "/kubepods.slice/kubepods-burstable.slice",
        "/kubepods/burstable",
        "/machine.slice",
    ] {
        assert_eq!(at(path), Placement::outside(), "{path}");
    }
}

#[test]
fn a_path_that_imitates_a_pod_below_the_root_names_none() {
    // A user's own systemd manager may create any cgroup below user@<uid>.service.
    let imitation = format!(
        "/user.slice/user-1000.slice/user@1000.service/kubepods.slice/kubepods-pod{POD_SYSTEMD}.slice/cri-containerd-{CTR}.scope"
    );
    assert_eq!(at(&imitation), Placement::outside());
    // Rootless podman's pods are the user's to name.
    let rootless = format!(
        "/user.slice/user-1000.slice/user@1000.service/user.slice/user-libpod_pod_{CTR}.slice/libpod-{CTR}.scope"
    );
    assert_eq!(at(&rootless), Placement::outside());
    // Names that almost match.
    for path in [
        format!(
            "/kubepods.slice/kubepods-pod{}.slice/cri-containerd-{CTR}.scope",
            "not-a-uid"
        ),
        format!(
            "/kubepods.slice/kubepods-burstable.slice/kubepods-besteffort-pod{POD_SYSTEMD}.slice"
        ),
        format!("/kubepods/pod{}/{CTR}", POD.to_uppercase()),
        format!(
            "/machine.slice/machine-libpod_pod_{}.slice/libpod-{CTR}.scope",
            "x".repeat(64)
        ),
    ] {
        assert_eq!(at(&path).pod, None, "{path}");
    }
    // A container id that is not one is left out, the pod kept.
    let short = format!("/kubepods/pod{POD}/abc");
    assert_eq!(at(&short), pod(POD, None));
}

#[test]
fn a_process_that_moved_below_its_container_stays_in_its_pod() {
    // A container given its cgroup subtree makes cgroups imitating another pod inside it and
    // moves there: the outermost pod is the one that counts.
    let moved = format!(
        "/kubepods.slice/kubepods-pod{POD_SYSTEMD}.slice/cri-containerd-{CTR}.scope/kubepods.slice/kubepods-pod{}.slice/cri-containerd-{CTR}.scope",
        OTHER.replace('-', "_")
    );
    assert_eq!(at(&moved), pod(POD, Some(CTR)));
    let moved = format!("/kubepods/pod{POD}/{CTR}/kubepods/pod{OTHER}/{CTR}");
    assert_eq!(at(&moved), pod(POD, Some(CTR)));
}

#[test]
fn from_a_namespace_of_its_own_the_systemd_layout_is_placed_by_its_names() {
    // The daemon in /kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod<D>.slice/
    // cri-containerd-<D>.scope, in a cgroup namespace rooted there (depth 4): the node's init
    // in /init.scope climbs four levels.
    let depth = namespace_depth("0::/../../../../init.scope\n");
    assert_eq!(depth, 4);
    // A burstable pod shares kubepods.slice with the daemon: three levels up, then down.
    let burstable = format!(
        "0::/../../../kubepods-burstable.slice/kubepods-burstable-pod{POD_SYSTEMD}.slice/cri-containerd-{CTR}.scope\n"
    );
    assert_eq!(place(&burstable, depth).unwrap(), pod(POD, Some(CTR)));
    // Another best-effort pod shares two levels.
    let besteffort = format!(
        "0::/../../kubepods-besteffort-pod{POD_SYSTEMD}.slice/cri-containerd-{CTR}.scope\n"
    );
    assert_eq!(place(&besteffort, depth).unwrap(), pod(POD, Some(CTR)));
    // A host process: all the way up, then an absolute path.
    let host = "0::/../../../../system.slice/sshd.service\n";
    assert_eq!(place(host, depth).unwrap(), Placement::outside());
    // The daemon's own container (its probes): inside the namespace.
    assert_eq!(place("0::/\n", depth).unwrap(), Placement::outside());
}

#[test]
fn from_a_namespace_of_its_own_a_name_that_does_not_spell_its_place_is_not_placed() {
    let depth = 4;
    // The name after the climb spells one level where two are shared.
    let wrong = format!("0::/../../kubepods-pod{POD_SYSTEMD}.slice/cri-containerd-{CTR}.scope\n");
    assert_eq!(place(&wrong, depth), Err(Unplaced::OutsideNamespace));
    // The cgroupfs driver's names spell nothing.
    let cgroupfs = format!("0::/../../pod{POD}/{CTR}\n");
    assert_eq!(place(&cgroupfs, depth), Err(Unplaced::OutsideNamespace));
    // More levels climbed than the namespace is deep.
    let above = "0::/../../../../../init.scope\n";
    assert_eq!(place(above, depth), Err(Unplaced::OutsideNamespace));
    // A cgroup v1 only file.
    assert_eq!(place("1:name=systemd:/\n", 0), Err(Unplaced::NoUnifiedLine));
    assert_eq!(namespace_depth("0::/init.scope\n"), 0);
}

mod fuzz {
    //! Property-based fuzzing of the cgroup file a caller's `/proc/<pid>/cgroup` gives
    //! (`PROPTEST_CASES` sets the cases): any file is placed or refused without a panic, and
    //! cgroups a container makes below its own never change its pod.

    use proptest::prelude::*;

    use super::*;

    /// A cgroup name a container may make below its own, imitations of the layouts included.
    fn name() -> impl Strategy<Value = String> {
        prop_oneof![
            "[a-z0-9._@:-]{1,16}",
            Just(format!("kubepods-pod{}.slice", OTHER.replace('-', "_"))),
            Just(format!("pod{OTHER}")),
            Just(format!("cri-containerd-{CTR}.scope")),
            Just("..".to_owned()),
        ]
    }

    proptest! {
        #[test]
        fn any_cgroup_file_is_placed_or_refused(file in any::<String>(), depth in 0usize..4) {
            let _ = place(&file, depth);
            let _ = place(&format!("0::{file}\n"), depth);
        }

        #[test]
        fn cgroups_below_a_container_do_not_change_its_pod(
            below in proptest::collection::vec(name(), 1..6),
            systemd in any::<bool>(),
        ) {
            let container = match systemd {
                true => format!(
                    "/kubepods.slice/kubepods-burstable.slice/\
                     kubepods-burstable-pod{POD_SYSTEMD}.slice/cri-containerd-{CTR}.scope"
                ),
                false => format!("/kubepods/burstable/pod{POD}/{CTR}"),
            };
            let path = format!("{container}/{}", below.join("/"));
            let placed = place(&format!("0::{path}\n"), 0);
            prop_assert_eq!(placed.map(|p| p.pod), Ok(Some(POD.into())), "{}", path);
        }
    }
}
