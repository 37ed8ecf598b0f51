use seccompiler::SeccompAction;

use super::*;

#[test]
fn every_kind_s_filter_compiles() {
    let arch: TargetArch = std::env::consts::ARCH.try_into().unwrap();
    for kind in Kind::ALL {
        let program = compile(kind, SeccompAction::Trap, arch).unwrap();
        assert!(!program.is_empty(), "{kind:?}");
    }
}

#[test]
fn the_spawner_allows_every_call_any_kind_allows_with_at_least_its_arguments() {
    let spawner = lists::of(Kind::Spawner);
    for kind in [Kind::Guest, Kind::Runtime, Kind::Egress, Kind::Writer] {
        for (call, rules) in lists::of(kind) {
            let theirs = spawner
                .get(&call)
                .unwrap_or_else(|| panic!("{kind:?}: call {call} is not the spawner's"));
            assert!(
                theirs.is_empty()
                    || (!rules.is_empty() && rules.iter().all(|r| theirs.contains(r))),
                "{kind:?}: call {call}'s arguments are narrower in the spawner's list"
            );
        }
    }
}

#[test]
fn only_the_egress_client_may_open_internet_sockets_and_only_guests_reach_the_hypervisor() {
    let socket = |kind| lists::of(kind).remove(&nix::libc::SYS_socket);
    assert!(socket(Kind::Guest).is_none());
    assert!(socket(Kind::Writer).is_none());
    assert_eq!(socket(Kind::Runtime).unwrap().len(), 1, "AF_UNIX only");
    assert_eq!(
        socket(Kind::Egress).unwrap().len(),
        4,
        "AF_UNIX, AF_INET, AF_INET6, AF_NETLINK"
    );
    let ioctls = |kind| lists::of(kind)[&nix::libc::SYS_ioctl].len();
    assert!(ioctls(Kind::Guest) > ioctls(Kind::Runtime) + 20);
    assert_eq!(ioctls(Kind::Runtime), ioctls(Kind::Writer));
    assert_eq!(ioctls(Kind::Runtime) + 1, ioctls(Kind::Egress), "FIONREAD");
}
