//! Who calls, and what they may do: each connection's peer credentials, the allow lists checked
//! against them, the quota on what one caller has in flight, and their options.
//!
//! The socket's mode and group decide who can connect at all. Beyond that, the kernel tells the
//! daemon who connected (`SO_PEERCRED`: uid, gid and pid of the connecting process, as they
//! were at `connect`), which no client can forge. With allow lists, only listed uids, members of
//! listed groups (a caller's primary gid, or a group the user database gives its uid) and the
//! daemon's own uid may call: root is not trusted unless listed. Quotas count per uid.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, PoisonError};

pub mod pod;

use crate::job::{Caller, Language};
use clap::Args;

use crate::sys;

/// Who may call, and how much one caller may have at once.
#[derive(Debug, Clone, Default, Args)]
pub struct CallerOptions {
    /// Allow this user (a uid or a name) to call; repeat for more. With no --allow-uid and no
    /// --allow-gid, anyone who can open the socket may call; with them, only the users listed,
    /// members of the groups listed and the daemon's own user: root only if listed.
    #[arg(long = "allow-uid", value_name = "UID")]
    pub allow_uids: Vec<String>,

    /// Allow the members of this group (a gid or a name) to call: a caller whose gid is this
    /// one, or whose user the user database puts in it. Repeat for more.
    #[arg(long = "allow-gid", value_name = "GID")]
    pub allow_gids: Vec<String>,

    /// Executions one caller (uid) may have in flight (running or waiting for a sandbox) per
    /// language, a hard cap; past it, 429 quota_exceeded. Default: none. Without it a caller
    /// alone may use a whole pool, and callers waiting together share it fairly: the next free
    /// sandbox goes to the one with the fewest running.
    #[arg(long, value_name = "N")]
    pub max_execs_per_caller: Option<usize>,

    /// Live sessions one caller (uid) may hold; past it, 429 quota_exceeded. Default: half of
    /// --max-sessions, at least 1.
    #[arg(long, value_name = "N")]
    pub max_sessions_per_caller: Option<usize>,
}

/// A caller option that does not hold.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum CallerOptionError {
    /// No such user.
    #[error("--allow-uid {0}: no such user")]
    NoSuchUser(String),
    /// No such group.
    #[error("--allow-gid {0}: no such group")]
    NoSuchGroup(String),
    /// A quota of zero would refuse everything.
    #[error("{0} must be at least 1")]
    Zero(&'static str),
}

impl CallerOptions {
    /// The allow lists, names resolved; `own_uid` is always allowed.
    pub fn access(&self, own_uid: u32) -> Result<Access, CallerOptionError> {
        let uids = self
            .allow_uids
            .iter()
            .map(|u| sys::users::uid_of(u).ok_or_else(|| CallerOptionError::NoSuchUser(u.clone())))
            .collect::<Result<Vec<_>, _>>()?;
        let gids = self
            .allow_gids
            .iter()
            .map(|g| sys::users::gid_of(g).ok_or_else(|| CallerOptionError::NoSuchGroup(g.clone())))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Access::new(&uids, &gids, own_uid))
    }

    /// The hard cap on executions per caller, per language of `sizes`: none (an empty map)
    /// unless `--max-execs-per-caller` sets one.
    pub fn exec_quota(
        &self,
        sizes: &BTreeMap<Language, usize>,
    ) -> Result<BTreeMap<Language, usize>, CallerOptionError> {
        match self.max_execs_per_caller {
            Some(0) => Err(CallerOptionError::Zero("--max-execs-per-caller")),
            Some(cap) => Ok(sizes.keys().map(|&language| (language, cap)).collect()),
            None => Ok(BTreeMap::new()),
        }
    }

    /// The most sessions one caller may hold, of `max_sessions` in all.
    pub fn session_quota(&self, max_sessions: usize) -> Result<usize, CallerOptionError> {
        match self.max_sessions_per_caller {
            Some(0) => Err(CallerOptionError::Zero("--max-sessions-per-caller")),
            Some(n) => Ok(n),
            None => Ok((max_sessions / 2).max(1)),
        }
    }
}

impl Caller {
    /// The peer credentials of `stream`, read when it is accepted.
    pub fn of(stream: &tokio::net::UnixStream) -> std::io::Result<Caller> {
        let credentials = stream.peer_cred()?;
        Ok(Caller {
            uid: credentials.uid(),
            gid: credentials.gid(),
            pid: credentials.pid().filter(|&pid| pid > 0),
        })
    }
}

/// Who may call, beyond the socket's mode.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Access {
    uids: BTreeSet<u32>,
    gids: BTreeSet<u32>,
    /// The daemon's own uid, always allowed: it is the daemon's own principal.
    own_uid: u32,
}

impl Access {
    /// Only `uids`, members of `gids` and `own_uid` may call; anyone who can connect when both
    /// lists are empty.
    pub fn new(uids: &[u32], gids: &[u32], own_uid: u32) -> Self {
        Access {
            uids: uids.iter().copied().collect(),
            gids: gids.iter().copied().collect(),
            own_uid,
        }
    }

    /// Whether only listed callers may call.
    pub fn is_restricted(&self) -> bool {
        !self.uids.is_empty() || !self.gids.is_empty()
    }

    /// Whether `caller` may call. Looks the caller's groups up in the user database only when
    /// its uid and primary gid are not enough.
    pub fn allows(&self, caller: &Caller) -> bool {
        if !self.is_restricted()
            || caller.uid == self.own_uid
            || self.uids.contains(&caller.uid)
            || self.gids.contains(&caller.gid)
        {
            return true;
        }
        !self.gids.is_empty()
            && sys::users::groups_of(caller.uid, caller.gid)
                .iter()
                .any(|gid| self.gids.contains(gid))
    }
}

/// The most executions one caller may have in flight (running or waiting for a sandbox) per
/// language, and how many each has.
#[derive(Debug, Default)]
pub struct ExecQuota {
    /// Per language; a language not listed has no quota.
    limits: BTreeMap<Language, usize>,
    /// A uid held to no quota: the daemon's own user, its operator rather than a tenant.
    exempt: Option<u32>,
    in_flight: Mutex<HashMap<(u32, Language), usize>>,
}

/// A caller is at its quota.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error(
    "this caller (uid {uid}) already has {limit} {language} executions in flight, as many as one \
     caller may (--max-execs-per-caller); nothing ran. Wait for one to finish"
)]
pub struct OverQuota {
    /// The caller's uid.
    pub uid: u32,
    /// The language.
    pub language: Language,
    /// The quota.
    pub limit: usize,
}

impl ExecQuota {
    /// A quota of `limits` per caller and language, for every caller but `exempt`.
    pub fn new(limits: BTreeMap<Language, usize>, exempt: Option<u32>) -> Arc<Self> {
        Arc::new(ExecQuota {
            limits,
            exempt,
            in_flight: Mutex::new(HashMap::new()),
        })
    }

    /// The quota per language.
    pub fn limits(&self) -> &BTreeMap<Language, usize> {
        &self.limits
    }

    /// Counts one more execution of `uid` in `language` until the returned slot is dropped,
    /// unless that would pass the quota.
    pub fn admit(self: &Arc<Self>, uid: u32, language: Language) -> Result<Slot, OverQuota> {
        let mut in_flight = self
            .in_flight
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let count = in_flight.entry((uid, language)).or_insert(0);
        if let Some(&limit) = self.limits.get(&language)
            && *count >= limit
            && self.exempt != Some(uid)
        {
            return Err(OverQuota {
                uid,
                language,
                limit,
            });
        }
        *count += 1;
        Ok(Slot {
            quota: self.clone(),
            key: (uid, language),
        })
    }

    /// Executions `uid` has in flight in `language`.
    pub fn in_flight(&self, uid: u32, language: Language) -> usize {
        let in_flight = self
            .in_flight
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        in_flight.get(&(uid, language)).copied().unwrap_or(0)
    }
}

/// One execution counted against its caller's quota, until dropped.
#[derive(Debug)]
pub struct Slot {
    quota: Arc<ExecQuota>,
    key: (u32, Language),
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut in_flight = self
            .quota
            .in_flight
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(count) = in_flight.get_mut(&self.key) {
            *count -= 1;
            if *count == 0 {
                in_flight.remove(&self.key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caller(uid: u32, gid: u32) -> Caller {
        Caller {
            uid,
            gid,
            pid: Some(1),
        }
    }

    #[test]
    fn without_lists_anyone_who_connects_may_call() {
        let open = Access::new(&[], &[], 999);
        assert!(!open.is_restricted());
        assert!(open.allows(&caller(0, 0)) && open.allows(&caller(1234, 1234)));
    }

    #[test]
    fn with_lists_only_listed_uids_gids_and_the_daemon_itself_may_call() {
        let access = Access::new(&[1000], &[2000], 999);
        assert!(access.is_restricted());
        assert!(access.allows(&caller(1000, 1000)), "listed uid");
        assert!(access.allows(&caller(1500, 2000)), "listed primary gid");
        assert!(access.allows(&caller(999, 999)), "the daemon's own uid");
        assert!(!access.allows(&caller(1001, 1001)), "neither");
        // No user database entry for this uid: only its primary gid counts.
        assert!(!access.allows(&caller(3_999_999_999, 1001)));
    }

    #[test]
    fn root_is_refused_unless_listed() {
        assert!(!Access::new(&[1000], &[], 999).allows(&caller(0, 0)));
        assert!(Access::new(&[0], &[], 999).allows(&caller(0, 0)));
        assert!(Access::new(&[], &[0], 999).allows(&caller(0, 0)));
    }

    #[test]
    fn a_group_of_the_user_database_counts() {
        // The current user's groups as the user database gives them, primary group aside.
        let (uid, gid) = (
            nix::unistd::getuid().as_raw(),
            nix::unistd::getgid().as_raw(),
        );
        let groups = sys::users::groups_of(uid, gid);
        if let Some(&other) = groups.iter().find(|&&g| g != gid) {
            assert!(Access::new(&[], &[other], u32::MAX).allows(&caller(uid, gid)));
        }
        assert!(!Access::new(&[], &[4_000_000_000], u32::MAX).allows(&caller(uid, gid)));
    }

    #[test]
    fn the_quota_counts_per_caller_and_language_and_frees_on_drop() {
        let quota = ExecQuota::new(BTreeMap::from([(Language::Javascript, 2)]), Some(999));
        let first = quota.admit(1000, Language::Javascript).unwrap();
        let second = quota.admit(1000, Language::Javascript).unwrap();
        let refused = quota.admit(1000, Language::Javascript).unwrap_err();
        assert_eq!(
            refused,
            OverQuota {
                uid: 1000,
                language: Language::Javascript,
                limit: 2
            }
        );
        assert!(refused.to_string().contains("uid 1000"), "{refused}");
        // Another caller, and a language without a quota, are not affected.
        let other = quota.admit(1001, Language::Javascript).unwrap();
        let python: Vec<Slot> = (0..5)
            .map(|_| quota.admit(1000, Language::Python).unwrap())
            .collect();
        // The daemon's own user is held to none.
        let own: Vec<Slot> = (0..5)
            .map(|_| quota.admit(999, Language::Javascript).unwrap())
            .collect();
        assert_eq!(quota.in_flight(999, Language::Javascript), 5);
        drop(own);
        drop(first);
        assert_eq!(quota.in_flight(1000, Language::Javascript), 1);
        let again = quota.admit(1000, Language::Javascript).unwrap();
        drop((second, again, other, python));
        assert_eq!(quota.in_flight(1000, Language::Javascript), 0);
        assert!(quota.in_flight.lock().unwrap().is_empty(), "no entry left");
    }
}
