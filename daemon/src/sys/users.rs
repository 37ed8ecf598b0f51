//! The user database: users and groups by name, and the groups a user belongs to.

use std::ffi::CString;

use nix::unistd::{Gid, Group, Uid, User, getgrouplist};

/// The uid `user` names: a number, or a user's name.
pub fn uid_of(user: &str) -> Option<u32> {
    user.parse()
        .ok()
        .or_else(|| Some(User::from_name(user).ok()??.uid.as_raw()))
}

/// The gid `group` names: a number, or a group's name.
pub fn gid_of(group: &str) -> Option<u32> {
    group
        .parse()
        .ok()
        .or_else(|| Some(Group::from_name(group).ok()??.gid.as_raw()))
}

/// The groups the user database gives `uid` (its primary group `gid` included), or just `gid`
/// when `uid` has no entry (a user of another container, say) or the lookup fails.
///
/// Not the connecting process's own supplementary groups: the kernel gives those too
/// (`SO_PEERGROUPS`), but nix 0.30 has no wrapper for it and this workspace forbids `unsafe`.
/// A process that dropped a group its user has still counts as a member here.
pub fn groups_of(uid: u32, gid: u32) -> Vec<u32> {
    let groups = || -> Option<Vec<u32>> {
        let user = User::from_uid(Uid::from_raw(uid)).ok()??;
        let name = CString::new(user.name).ok()?;
        let groups = getgrouplist(&name, Gid::from_raw(gid)).ok()?;
        Some(groups.into_iter().map(Gid::as_raw).collect())
    };
    groups().unwrap_or_else(|| vec![gid])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_user_is_in_its_primary_group_and_an_unknown_user_only_there() {
        let (uid, gid) = (Uid::current().as_raw(), Gid::current().as_raw());
        assert!(groups_of(uid, gid).contains(&gid));
        assert_eq!(groups_of(3_999_999_999, 4242), vec![4242]);
    }

    #[test]
    fn users_and_groups_by_number_or_name() {
        assert_eq!(uid_of("1234"), Some(1234));
        assert_eq!(uid_of("root"), Some(0));
        assert_eq!(gid_of("root"), Some(0));
        assert_eq!(gid_of("77"), Some(77));
        assert_eq!(uid_of("no-such-user-here"), None);
        assert_eq!(gid_of("no-such-group-here"), None);
    }
}
