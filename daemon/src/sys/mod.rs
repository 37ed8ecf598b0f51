//! Platform- and privilege-specific code, kept in one place: the socket file (ownership, mode,
//! stale files), hypervisor detection, and the signal mask of threads that run guests.

pub mod hypervisor;
pub mod signals;
pub mod socket;
