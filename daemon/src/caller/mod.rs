//! Who calls, and what they may do: each connection's peer credentials, the allow lists checked
//! against them, the quota on what one caller has in flight, and their options.
//!
//! The socket's mode and group decide who can connect at all. Beyond that, the kernel tells the
//! daemon who connected (`SO_PEERCRED`: uid, gid and pid of the connecting process, as they
//! were at `connect`), which no client can forge. With allow lists, only listed uids, members of
//! listed groups (a caller's primary gid, or a group the user database gives its uid) and the
//! daemon's own uid may call: root is not trusted unless listed. Quotas count per uid, or
//! with `--pod-identity` per pod: the daemon reads the caller's cgroup (see [`pod`]) and
//! counts every process of one pod as one caller, whatever their uids, and two pods apart
//! whatever theirs.
//!
//! # Design: callers, admission and the audit log
//! The server reads each connection's peer credentials once, at accept (`Identify::caller`, tokio's
//! `peer_cred`: `SO_PEERCRED`), and hands them with every request to `Api::handle`, which calls
//! `Service::admit` before routing: `caller::Access` checks the allow lists (uid, primary gid,
//! then the groups the user database gives the uid: `sys/users.rs`); a refusal is 403, logged and
//! audited. With `--pod-identity`, `Identify::caller` also reads the peer's cgroup file
//! (`sys/cgroup.rs`: `/proc/<pid>/cgroup`, used only if the peer's pidfd from `SO_PEERPIDFD` says
//! it is still alive after the read) and `caller/pod.rs` places it (pod and container, matched
//! from the root down; relative paths from a cgroup namespace of the daemon's own placed by the
//! systemd names that spell their ancestors): `job::PodOf` on the `Caller`, serialized into every
//! audit line; one that cannot be placed is refused by `Service::admit` (`Refusal::CallerUnplaced`,
//! 403). `Caller::principal` is whom quotas count: the pod when there is one, else the uid.
//!
//! A gateway that serves several callers on one listener (`hlctl e2b-gateway --api-keys`) is a
//! delegate: a uid the operator trusts with `--delegate-uid`, whose requests may name the caller
//! they act for (`hyperlightd-on-behalf-of`, read by the HTTP front end into
//! `Caller::on_behalf_of`). `Service::admit` refuses the header from any other uid
//! (`Refusal::NotADelegate`, 403, audited), and the principal of a delegated request is the
//! name under its delegate's uid (`Principal::Delegated`), so each name has its own quotas,
//! sessions and tool executions, and two delegates' names never meet. The peer credentials stay
//! in every audit line beside the name: the log says who connected and whom it spoke for.
//!
//! Admission to the sandboxes is work-conserving. Each pool's queue (`sandbox/pool/queue.rs`)
//! keeps a line per caller (`job::Principal`: its uid, its pod, or a delegate's name) and hands the next free sandbox to the caller with the fewest
//! jobs running, the one served longest ago among equals: a caller alone may keep every sandbox
//! busy, and when several wait each gets its share, a caller at its share waiting behind the
//! others instead of being refused while sandboxes sit idle. Each caller's line holds at most
//! `--queue-depth` jobs (past it: 503 `overloaded`), so a flood fills its own line, not another's.
//! `--max-execs-per-caller`, when given, is a hard cap on what one caller has in flight (running
//! or waiting, session waits included): `caller::ExecQuota`, a counter the service takes for the
//! whole wait and run of a job and gives back on drop; past it, 429 `quota_exceeded`. The daemon's
//! own user is held to none. The session quota and ownership live in the session table
//! (`Sessions` keys every call by the caller's `Principal`, its uid or its pod; another's session
//! is `session_not_found`).
//!
//! `audit/` writes one JSON line per execution (the service, after the job and before the answer),
//! per session event (the service's session operations, and the reaper for expiries) and per
//! refused caller: serialized whole and written with one `write` to an `O_APPEND` file under a
//! mutex, so lines never interleave and a crash loses at most the line in flight. A failed write is
//! counted (health `audit`, `hyperlightd_audit_lines_total{outcome="failed"}`) and logged once per
//! new error; the request is answered as usual.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex, PoisonError};

pub mod pod;

use crate::job::{Caller, Language, PodOf, Principal};
use clap::Args;

use crate::sys;

/// Who may call, and how much one caller may have at once.
#[derive(Debug, Clone, Default, Args)]
pub struct CallerOptions {
    /// Allow this user (a uid or a name) to call; repeat for more.
    ///
    /// With no --allow-uid and no --allow-gid, anyone who can open the socket may call; with them,
    /// only the users and groups listed and the daemon's own user (root only if listed).
    #[arg(long = "allow-uid", value_name = "UID")]
    pub allow_uids: Vec<String>,

    /// Allow the members of this group (a gid or a name) to call: a caller whose gid is this one,
    /// or whose user the user database puts in it.
    ///
    /// Repeat for more.
    #[arg(long = "allow-gid", value_name = "GID")]
    pub allow_gids: Vec<String>,

    /// Executions one caller (uid, or pod with --pod-identity) may have in flight (running or
    /// waiting for a sandbox) per language; past it, 429 quota_exceeded.
    ///
    /// Without it a caller alone may use a whole pool, and callers waiting together share it
    /// fairly: the next free sandbox goes to the one with the fewest running.
    #[arg(long, value_name = "N")]
    pub max_execs_per_caller: Option<usize>,

    /// Live sessions one caller (uid, or pod with --pod-identity) may hold; past it, 429
    /// quota_exceeded.
    ///
    /// Default: half of --max-sessions, at least 1.
    #[arg(long, value_name = "N")]
    pub max_sessions_per_caller: Option<usize>,

    /// Tell callers apart by pod: read each caller's cgroup, name its pod and container in the
    /// audit log, and count quotas per pod (a caller outside any pod: per uid).
    ///
    /// Needs the node's pid namespace (a DaemonSet's hostPID); a caller whose pod cannot be told
    /// (it exited, or its pid is not visible) is refused.
    #[arg(long, env = "HYPERLIGHTD_POD_IDENTITY")]
    pub pod_identity: bool,

    /// Trust this user (a uid or a name) to act for callers it names: a gateway that serves
    /// several callers on one listener, such as `hlctl e2b-gateway --api-keys`.
    ///
    /// Its requests may carry `hyperlightd-on-behalf-of: NAME`, and each name is then a caller
    /// of its own for quotas, sessions, the audit log (`on_behalf_of`) and tool answers; two
    /// delegates' names never meet. From any other user the header is refused. A delegate may
    /// call even when the allow lists do not name it. Repeat for more.
    #[arg(long = "delegate-uid", value_name = "UID")]
    pub delegate_uids: Vec<String>,
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
    /// No such delegate.
    #[error("--delegate-uid {0}: no such user")]
    NoSuchDelegate(String),
    /// A quota of zero would refuse everything.
    #[error("{0} must be at least 1")]
    Zero(&'static str),
    /// The node's init's cgroup, which places the daemon's cgroup namespace, is unreadable.
    #[error(
        "--pod-identity needs to see the node's processes, and cannot read /proc/1/cgroup ({0}): \
         in a pod, give it the node's pid namespace (hostPID); under systemd, ProtectProc=default"
    )]
    InitCgroup(String),
}

impl CallerOptions {
    /// The allow lists and delegates, names resolved; `own_uid` is always allowed.
    pub fn access(&self, own_uid: u32) -> Result<Access, CallerOptionError> {
        use CallerOptionError::{NoSuchDelegate, NoSuchGroup, NoSuchUser};
        let uids = resolve(&self.allow_uids, sys::users::uid_of, NoSuchUser)?;
        let gids = resolve(&self.allow_gids, sys::users::gid_of, NoSuchGroup)?;
        let delegates = resolve(&self.delegate_uids, sys::users::uid_of, NoSuchDelegate)?;
        Ok(Access::new(&uids, &gids, own_uid).with_delegates(&delegates))
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

    /// How callers are named: by pod too with `--pod-identity`.
    pub fn identify(&self) -> Result<Identify, CallerOptionError> {
        if !self.pod_identity {
            return Ok(Identify::BY_CREDENTIALS);
        }
        let init =
            sys::cgroup::of_init().map_err(|e| CallerOptionError::InitCgroup(e.to_string()))?;
        Ok(Identify {
            pods: Some(pod::namespace_depth(&init)),
        })
    }
}

/// Each of `names` (a number or a name) as `lookup` resolves it; the first it cannot, as
/// `unknown` says.
fn resolve(
    names: &[String],
    lookup: fn(&str) -> Option<u32>,
    unknown: fn(String) -> CallerOptionError,
) -> Result<Vec<u32>, CallerOptionError> {
    names
        .iter()
        .map(|name| lookup(name).ok_or_else(|| unknown(name.clone())))
        .collect()
}

/// How the daemon names a connection's caller.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Identify {
    /// With `--pod-identity`: how deep the daemon's cgroup namespace root lies.
    pods: Option<usize>,
}

impl Identify {
    /// By peer credentials alone (no `--pod-identity`).
    pub const BY_CREDENTIALS: Identify = Identify { pods: None };

    /// Whether callers are told apart by pod.
    pub fn by_pod(&self) -> bool {
        self.pods.is_some()
    }

    /// The caller at the other end of `stream`: its peer credentials, and its pod when callers
    /// are told apart by pod, read when the connection is accepted.
    pub fn caller(&self, stream: &tokio::net::UnixStream) -> std::io::Result<Caller> {
        let credentials = stream.peer_cred()?;
        let mut caller = Caller {
            uid: credentials.uid(),
            gid: credentials.gid(),
            pid: credentials.pid().filter(|&pid| pid > 0),
            pod: PodOf::Unread,
            on_behalf_of: None,
        };
        if let Some(depth) = self.pods {
            caller.pod = match sys::cgroup::of_peer(stream, caller.pid, caller.uid) {
                Ok(file) => pod::place(&file, depth)
                    .map_or_else(|e| PodOf::Unknown(e.to_string().into()), PodOf::Placed),
                Err(e) => PodOf::Unknown(e.to_string().into()),
            };
        }
        Ok(caller)
    }
}

/// Who may call, beyond the socket's mode.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Access {
    uids: BTreeSet<u32>,
    gids: BTreeSet<u32>,
    /// The daemon's own uid, always allowed: it is the daemon's own principal.
    own_uid: u32,
    /// The uids trusted to act for callers they name (`--delegate-uid`).
    delegates: BTreeSet<u32>,
}

impl Access {
    /// Only `uids`, members of `gids` and `own_uid` may call; anyone who can connect when both
    /// lists are empty.
    pub fn new(uids: &[u32], gids: &[u32], own_uid: u32) -> Self {
        Access {
            uids: uids.iter().copied().collect(),
            gids: gids.iter().copied().collect(),
            own_uid,
            delegates: BTreeSet::new(),
        }
    }

    /// The same, trusting `uids` to act for callers they name (and letting them call).
    pub fn with_delegates(mut self, uids: &[u32]) -> Self {
        self.delegates = uids.iter().copied().collect();
        self
    }

    /// Whether `uid` may act for callers it names.
    pub fn is_delegate(&self, uid: u32) -> bool {
        self.delegates.contains(&uid)
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
            || self.delegates.contains(&caller.uid)
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
    in_flight: Mutex<HashMap<(Principal, Language), usize>>,
}

/// A caller is at its quota.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "this caller ({caller}) already has {limit} {language} executions in flight, as many as one \
     caller may (--max-execs-per-caller); nothing ran. Wait for one to finish"
)]
pub struct OverQuota {
    /// Whom the quota counts: the caller's uid, or its pod.
    pub caller: Principal,
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

    /// Counts one more execution of `caller` (a uid, or a pod) in `language` until the
    /// returned slot is dropped, unless that would pass the quota.
    pub fn admit(
        self: &Arc<Self>,
        caller: &Principal,
        language: Language,
    ) -> Result<Slot, OverQuota> {
        let mut in_flight = self
            .in_flight
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let key = (caller.clone(), language);
        let count = in_flight.entry(key.clone()).or_insert(0);
        let exempt = self
            .exempt
            .is_some_and(|uid| *caller == Principal::Uid(uid));
        if let Some(&limit) = self.limits.get(&language)
            && *count >= limit
            && !exempt
        {
            return Err(OverQuota {
                caller: caller.clone(),
                language,
                limit,
            });
        }
        *count += 1;
        Ok(Slot {
            quota: self.clone(),
            key,
        })
    }

    /// Executions `caller` has in flight in `language`.
    pub fn in_flight(&self, caller: &Principal, language: Language) -> usize {
        let in_flight = self
            .in_flight
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        in_flight
            .get(&(caller.clone(), language))
            .copied()
            .unwrap_or(0)
    }
}

/// One execution counted against its caller's quota, until dropped.
#[derive(Debug)]
pub struct Slot {
    quota: Arc<ExecQuota>,
    key: (Principal, Language),
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
            pod: PodOf::Unread,
            on_behalf_of: None,
        }
    }

    #[test]
    fn a_delegate_may_call_and_only_it_may_act_for_others() {
        let access = Access::new(&[1000], &[], 999).with_delegates(&[1500]);
        assert!(access.allows(&caller(1500, 1500)));
        assert!(access.is_delegate(1500));
        assert!(!access.is_delegate(1000) && !access.is_delegate(999));
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
        let first = quota
            .admit(&Principal::Uid(1000), Language::Javascript)
            .unwrap();
        let second = quota
            .admit(&Principal::Uid(1000), Language::Javascript)
            .unwrap();
        let refused = quota
            .admit(&Principal::Uid(1000), Language::Javascript)
            .unwrap_err();
        assert_eq!(
            refused,
            OverQuota {
                caller: Principal::Uid(1000),
                language: Language::Javascript,
                limit: 2
            }
        );
        assert!(refused.to_string().contains("uid 1000"), "{refused}");
        // Another caller, and a language without a quota, are not affected.
        let other = quota
            .admit(&Principal::Uid(1001), Language::Javascript)
            .unwrap();
        let python: Vec<Slot> = (0..5)
            .map(|_| {
                quota
                    .admit(&Principal::Uid(1000), Language::Python)
                    .unwrap()
            })
            .collect();
        // The daemon's own user is held to none.
        let own: Vec<Slot> = (0..5)
            .map(|_| {
                quota
                    .admit(&Principal::Uid(999), Language::Javascript)
                    .unwrap()
            })
            .collect();
        assert_eq!(
            quota.in_flight(&Principal::Uid(999), Language::Javascript),
            5
        );
        drop(own);
        drop(first);
        assert_eq!(
            quota.in_flight(&Principal::Uid(1000), Language::Javascript),
            1
        );
        let again = quota
            .admit(&Principal::Uid(1000), Language::Javascript)
            .unwrap();
        drop((second, again, other, python));
        assert_eq!(
            quota.in_flight(&Principal::Uid(1000), Language::Javascript),
            0
        );
        assert!(quota.in_flight.lock().unwrap().is_empty(), "no entry left");
    }

    #[test]
    fn by_pod_the_quota_counts_a_pod_whatever_its_uids_and_two_pods_apart() {
        let quota = ExecQuota::new(BTreeMap::from([(Language::Python, 1)]), Some(999));
        let in_pod = |pod: &str, uid: u32| Caller {
            pod: PodOf::Placed(crate::job::Placement {
                pod: Some(pod.into()),
                container: None,
            }),
            ..caller(uid, uid)
        };
        let held = quota
            .admit(&in_pod("a", 1000).principal(), Language::Python)
            .unwrap();
        // Another uid in pod a: the same caller.
        let refused = quota
            .admit(&in_pod("a", 1001).principal(), Language::Python)
            .unwrap_err();
        assert!(
            refused.to_string().contains("this caller (pod a)"),
            "{refused}"
        );
        // Pod b, with the same uid as pod a's first process: another caller.
        let other = quota
            .admit(&in_pod("b", 1000).principal(), Language::Python)
            .unwrap();
        // A pod whose processes run as the daemon's own user is a tenant all the same.
        let _own = quota
            .admit(&in_pod("c", 999).principal(), Language::Python)
            .unwrap();
        assert!(
            quota
                .admit(&in_pod("c", 999).principal(), Language::Python)
                .is_err()
        );
        drop((held, other));
        assert_eq!(
            quota.in_flight(&Principal::Pod("a".into()), Language::Python),
            0
        );
    }

    #[tokio::test]
    async fn by_pod_a_connection_names_its_callers_place() {
        let (ours, _theirs) = tokio::net::UnixStream::pair().unwrap();
        let plain = Identify::BY_CREDENTIALS.caller(&ours).unwrap();
        assert_eq!(plain.pod, PodOf::Unread);
        assert_eq!(plain.uid, nix::unistd::geteuid().as_raw());
        let options = CallerOptions {
            pod_identity: true,
            ..CallerOptions::default()
        };
        let identify = options.identify().unwrap();
        assert!(identify.by_pod());
        // This test runs in no pod: its place is read and is none (or, inside a container
        // engine's test runner, its container); it is never left unknown.
        let caller = identify.caller(&ours).unwrap();
        match &caller.pod {
            PodOf::Placed(placed) => assert_eq!(
                caller.principal() == Principal::Uid(caller.uid),
                placed.pod.is_none()
            ),
            other => panic!("{other:?}"),
        }
    }
}
