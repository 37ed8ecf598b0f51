//! The kernel's cap on a process's memory mappings (`vm.max_map_count`). A checkpoint a
//! session keeps in memory is mapped from pieces, a mapping each, once a sandbox is restored
//! from it, and a daemon at the cap cannot map another: the session's exec is refused.

use std::io;

const MAX_MAP_COUNT: &str = "/proc/sys/vm/max_map_count";

/// The most memory mappings the kernel lets a process have.
pub fn max_map_count() -> io::Result<u64> {
    let text = std::fs::read_to_string(MAX_MAP_COUNT)?;
    text.trim().parse().map_err(|e| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{MAX_MAP_COUNT} holds {text:?}: {e}"),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cap_is_a_number_the_kernel_says() {
        // Linux's smallest allowed value is well above a handful.
        assert!(max_map_count().unwrap() > 1_000);
    }
}
