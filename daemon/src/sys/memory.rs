//! The process's memory policy: no transparent huge pages.
//!
//! After every request a sandbox's scratch memory is released (`MADV_DONTNEED`) and the next
//! request faults back in only what it touches. With transparent huge pages, each of those
//! faults that lands in an aligned 2 MiB stretch of the scratch region allocates and clears a
//! whole 2 MiB page, host writes into the I/O buffers included, so a small program pays for
//! clearing megabytes on every request. Measured in the nested-KVM VM (pool of one, 8 MiB
//! heap): clearing huge pages was about half of the worker thread's time, and a restore took
//! about 21 ms against 1.6 ms for the same guest with 4 KiB pages. The flag applies to the
//! whole process (its address space) and is inherited by children.

/// Turns transparent huge pages off for this process. Call it before building sandboxes.
pub fn disable_transparent_huge_pages() -> nix::Result<()> {
    nix::sys::prctl::set_thp_disable(true)
}

/// Whether transparent huge pages are off for this process.
pub fn transparent_huge_pages_disabled() -> nix::Result<bool> {
    nix::sys::prctl::get_thp_disable()
}

/// The process's resident memory, in bytes (0 if it cannot be read).
pub fn resident_bytes() -> u64 {
    // statm: size resident shared text lib data dt, in pages.
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|statm| statm.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * page_size())
}

fn page_size() -> u64 {
    nix::unistd::sysconf(nix::unistd::SysconfVar::PAGE_SIZE)
        .ok()
        .flatten()
        .and_then(|size| u64::try_from(size).ok())
        .unwrap_or(4096)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resident_memory_grows_with_touched_pages() {
        let before = resident_bytes();
        assert!(before > 0);
        let touched = vec![1u8; 64 << 20];
        let after = resident_bytes();
        assert!(after >= before + (32 << 20), "{before} -> {after}");
        drop(touched);
    }

    #[test]
    fn disabling_transparent_huge_pages_sticks() {
        disable_transparent_huge_pages().unwrap();
        assert!(transparent_huge_pages_disabled().unwrap());
    }
}
