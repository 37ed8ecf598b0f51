//! Platform- and privilege-specific code, kept in one place: the socket file (ownership, mode,
//! stale files), hypervisor detection, files read through a mapping, signals (stop requests, and the mask of threads that run
//! guests), the process's memory policy, its open-file limit, the kernel's cap on its memory mappings, the user database, the service
//! manager's notifications, a connected peer's cgroup, descriptors passed over a socket, and the system call filters of each kind
//! of thread.

pub mod cgroup;
pub mod durable;
pub mod files;
pub mod hypervisor;
pub mod mapped;
pub mod maps;
pub mod memory;
pub mod notify;
pub mod passing;
pub mod seccomp;
pub mod signals;
pub mod socket;
pub mod users;
