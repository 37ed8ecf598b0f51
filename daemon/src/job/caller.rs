//! Who asked: the peer credentials of the connection a request came on (see
//! [`crate::caller`]), which no client can forge, with `--pod-identity` the pod its process runs
//! in, and, from a delegate the operator trusts (`--delegate-uid`), the caller it acts for.

use std::fmt;
use std::sync::Arc;

use serde::ser::{Serialize, SerializeMap, Serializer};

/// Who asked.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Caller {
    /// The connecting process's effective uid.
    pub uid: u32,
    /// Its effective gid.
    pub gid: u32,
    /// Its pid, when the kernel knows it (not across pid namespaces).
    pub pid: Option<i32>,
    /// Its pod, when the daemon reads it.
    #[serde(flatten)]
    pub pod: PodOf,
    /// The caller a delegate acts for (`hyperlightd-on-behalf-of`), as it names it; only a
    /// delegate's request gets this far with one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub on_behalf_of: Option<Arc<str>>,
}

impl Caller {
    /// Whom quotas count this caller as: the caller a delegate acts for, else its pod when it
    /// runs in one (the daemon reads it with `--pod-identity`), else its uid.
    pub fn principal(&self) -> Principal {
        if let Some(name) = &self.on_behalf_of {
            return Principal::Delegated {
                delegate: self.uid,
                name: name.clone(),
            };
        }
        match &self.pod {
            PodOf::Placed(Placement { pod: Some(pod), .. }) => Principal::Pod(pod.clone()),
            _ => Principal::Uid(self.uid),
        }
    }
}

/// Where a caller's process runs, as far as its cgroup says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    /// Its pod's UID (Kubernetes) or id (podman); None outside any pod.
    pub pod: Option<Arc<str>>,
    /// Its container's id, when it runs in one.
    pub container: Option<Arc<str>>,
}

impl Placement {
    /// A process outside any pod and container.
    pub fn outside() -> Self {
        Placement {
            pod: None,
            container: None,
        }
    }
}

/// A caller's pod, as the daemon read it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum PodOf {
    /// Not read: pod identity is off.
    #[default]
    Unread,
    /// Read and placed.
    Placed(Placement),
    /// Could not be read or placed, and why: such a caller is refused.
    Unknown(Arc<str>),
}

/// In the audit log, beside the uid: `"pod"` is the pod, `"none"` outside any, or `"unknown"`
/// (with `"pod_error"`); `"container"` the container's id when there is one. Nothing unread.
impl Serialize for PodOf {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(None)?;
        match self {
            PodOf::Unread => {}
            PodOf::Placed(placed) => {
                map.serialize_entry("pod", placed.pod.as_deref().unwrap_or("none"))?;
                if let Some(container) = &placed.container {
                    map.serialize_entry("container", container.as_ref())?;
                }
            }
            PodOf::Unknown(why) => {
                map.serialize_entry("pod", "unknown")?;
                map.serialize_entry("pod_error", why.as_ref())?;
            }
        }
        map.end()
    }
}

/// Whom a quota counts and a session belongs to: a uid, or with `--pod-identity` a pod
/// whatever its processes' uids, or a caller a delegate acts for. On disk (a session's record)
/// a uid is a number, a pod a string, and a delegated caller `{"delegate": uid, "for": name}`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Deserialize)]
#[serde(from = "RawPrincipal")]
pub enum Principal {
    /// A user.
    Uid(u32),
    /// A pod, by its UID.
    Pod(Arc<str>),
    /// A caller a delegate (`--delegate-uid`) acts for: the names of two delegates never meet.
    Delegated {
        /// The delegate's uid.
        delegate: u32,
        /// The caller, as the delegate names it.
        name: Arc<str>,
    },
}

impl Serialize for Principal {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Principal::Uid(uid) => serializer.serialize_u32(*uid),
            Principal::Pod(pod) => serializer.serialize_str(pod),
            Principal::Delegated { delegate, name } => {
                let mut map = serializer.serialize_map(Some(2))?;
                map.serialize_entry("delegate", delegate)?;
                map.serialize_entry("for", name.as_ref())?;
                map.end()
            }
        }
    }
}

/// [`Principal`] as serde reads it (`Arc<str>` aside).
#[derive(serde::Deserialize)]
#[serde(untagged)]
enum RawPrincipal {
    Uid(u32),
    Pod(String),
    Delegated {
        delegate: u32,
        #[serde(rename = "for")]
        name: String,
    },
}

impl From<RawPrincipal> for Principal {
    fn from(raw: RawPrincipal) -> Self {
        match raw {
            RawPrincipal::Uid(uid) => Principal::Uid(uid),
            RawPrincipal::Pod(pod) => Principal::Pod(pod.into()),
            RawPrincipal::Delegated { delegate, name } => Principal::Delegated {
                delegate,
                name: name.into(),
            },
        }
    }
}

impl fmt::Display for Principal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Principal::Uid(uid) => write!(f, "uid {uid}"),
            Principal::Pod(pod) => write!(f, "pod {pod}"),
            Principal::Delegated { delegate, name } => write!(f, "{name} via uid {delegate}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caller(pod: PodOf) -> Caller {
        Caller {
            uid: 1000,
            gid: 1000,
            pid: Some(7),
            pod,
            on_behalf_of: None,
        }
    }

    #[test]
    fn the_audit_names_the_pod_only_when_read() {
        let json = |pod| serde_json::to_value(caller(pod)).unwrap();
        assert_eq!(
            json(PodOf::Unread),
            serde_json::json!({"uid": 1000, "gid": 1000, "pid": 7})
        );
        assert_eq!(json(PodOf::Placed(Placement::outside()))["pod"], "none");
        let placed = json(PodOf::Placed(Placement {
            pod: Some("p".into()),
            container: Some("c".into()),
        }));
        assert_eq!(
            (&placed["pod"], &placed["container"]),
            (&"p".into(), &"c".into())
        );
        let unknown = json(PodOf::Unknown("exited".into()));
        assert_eq!(
            (&unknown["pod"], &unknown["pod_error"]),
            (&"unknown".into(), &"exited".into())
        );
    }

    #[test]
    fn quotas_count_a_pod_when_there_is_one_else_the_uid() {
        assert_eq!(caller(PodOf::Unread).principal(), Principal::Uid(1000));
        assert_eq!(
            caller(PodOf::Placed(Placement::outside())).principal(),
            Principal::Uid(1000)
        );
        let in_pod = caller(PodOf::Placed(Placement {
            pod: Some("p".into()),
            container: None,
        }));
        assert_eq!(in_pod.principal(), Principal::Pod("p".into()));
        assert_eq!(in_pod.principal().to_string(), "pod p");
    }

    #[test]
    fn a_delegate_acts_for_the_caller_it_names_whatever_its_pod() {
        let delegated = Caller {
            on_behalf_of: Some("alice".into()),
            ..caller(PodOf::Placed(Placement {
                pod: Some("p".into()),
                container: None,
            }))
        };
        let principal = delegated.principal();
        assert_eq!(
            principal,
            Principal::Delegated {
                delegate: 1000,
                name: "alice".into()
            }
        );
        assert_eq!(principal.to_string(), "alice via uid 1000");
        assert_eq!(
            serde_json::to_value(&delegated).unwrap()["on_behalf_of"],
            "alice"
        );
        // A session's record keeps its owner, and reads every kind back as it was.
        for owner in [principal, Principal::Uid(7), Principal::Pod("p".into())] {
            let json = serde_json::to_string(&owner).unwrap();
            assert_eq!(
                serde_json::from_str::<Principal>(&json).unwrap(),
                owner,
                "{json}"
            );
        }
    }
}
