//! Platform- and privilege-specific code, kept in one place: the socket file (ownership, mode,
//! stale files) and hypervisor detection.

pub mod hypervisor;
pub mod socket;
