//! Platform- and privilege-specific code, kept in one place: the socket file (ownership, mode,
//! stale files), hypervisor detection, the signal mask of threads that run guests, and the
//! process's memory policy.

pub mod hypervisor;
pub mod memory;
pub mod signals;
pub mod socket;
