//! Reading a whole file without copying it: the file mapped read-only into the daemon's
//! memory, every page read in at once.
//!
//! Used to check saved templates (hundreds of MiB each, every byte checked at every start):
//! the copy out of the page cache that `read` makes, not the checksum, was most of a start from
//! saved templates.

use std::fs::File;
use std::io;

/// Calls `with` on the bytes of `file`, mapped read-only for the length of the call.
///
/// The one `unsafe` of the workspace. A mapping of a file is sound only while nothing
/// truncates or rewrites the file: a truncation makes reading the lost pages raise SIGBUS,
/// and a rewrite changes bytes under a `&[u8]`. The files passed here are saved templates in
/// the daemon's own directory (mode 0700, written once and renamed into place, never
/// rewritten), which hyperlight-host itself maps for as long as the template lives
/// (`Snapshot::load`): mapping them for the length of a checksum adds no hazard that loading
/// them does not already have. Do not pass files other users can write.
#[allow(unsafe_code)]
pub fn with_mapped<R>(file: &File, with: impl FnOnce(&[u8]) -> R) -> io::Result<R> {
    // SAFETY: see above: `file` is a saved template in the daemon's private directory, which
    // nothing truncates or rewrites while the daemon reads it; the mapping is dropped before
    // this returns, so no borrow of it outlives the call.
    let map = unsafe { memmap2::MmapOptions::new().populate().map(file)? };
    Ok(with(&map))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn gives_the_file_s_bytes_empty_or_not() {
        let mut file = tempfile::tempfile().unwrap();
        assert_eq!(with_mapped(&file, |b| b.to_vec()).unwrap(), b"");
        file.write_all(b"saved template").unwrap();
        assert_eq!(
            with_mapped(&file, |b| b.to_vec()).unwrap(),
            b"saved template"
        );
    }
}
