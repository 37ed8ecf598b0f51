//! The process's memory policy: no transparent huge pages.
//!
//! After every request a sandbox's scratch memory is released (`MADV_DONTNEED`) and the next
//! request faults back in only what it touches. With transparent huge pages, each of those
//! faults that lands in an aligned 2 MiB stretch of the scratch region allocates and clears a
//! whole 2 MiB page, host writes into the I/O buffers included, so a small program pays for
//! clearing megabytes on every request: with them, clearing huge pages was about half of a
//! worker thread's time. The flag applies to the whole process (its address space) and is
//! inherited by children.

/// Turns transparent huge pages off for this process. Call it before building sandboxes.
pub fn disable_transparent_huge_pages() -> nix::Result<()> {
    nix::sys::prctl::set_thp_disable(true)
}

/// Whether transparent huge pages are off for this process.
pub fn transparent_huge_pages_disabled() -> nix::Result<bool> {
    nix::sys::prctl::get_thp_disable()
}

/// The calling thread's minor page faults so far (first touches of memory; on a vCPU thread,
/// those KVM takes to back the guest's pages too). 0 if they cannot be read.
pub fn thread_minor_faults() -> u64 {
    use nix::sys::resource::{UsageWho, getrusage};
    getrusage(UsageWho::RUSAGE_THREAD)
        .map(|usage| u64::try_from(usage.minor_page_faults()).unwrap_or(0))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn disabling_transparent_huge_pages_sticks() {
        disable_transparent_huge_pages().unwrap();
        assert!(transparent_huge_pages_disabled().unwrap());
    }
}
