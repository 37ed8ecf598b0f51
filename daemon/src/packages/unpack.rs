//! A pure wheel's files, for a guest whose installed packages live in the session's working
//! directory (the WebAssembly Python guest, whose runner puts [`SITE`] on `sys.path`): read on
//! the host, each laid under [`SITE`]. Nothing in them runs on the host; the paths are checked
//! as any path a caller gives.

use std::io::{Cursor, Read};

use crate::job::files;

/// Where the packages are, in the working directory.
pub const SITE: &str = ".hyperlightd/site-packages";

/// The files of the wheel `bytes`, by path under [`SITE`]: what its archive holds, its
/// `.data` directory's `purelib` and `platlib` laid beside them (its scripts, headers and data
/// are not installed); else why not. At most `left` bytes are unpacked, and `left` is lowered
/// by what is: a small archive may expand to far more (a zip bomb), and more than a working
/// directory holds is refused before it is read.
pub fn files(bytes: &[u8], left: &mut u64) -> Result<Vec<(String, Vec<u8>)>, String> {
    let max_bytes = *left;
    let mut archive =
        zip::ZipArchive::new(Cursor::new(bytes)).map_err(|e| format!("not a zip archive: {e}"))?;
    let mut unpacked = Vec::new();
    for index in 0..archive.len() {
        let mut entry = archive
            .by_index(index)
            .map_err(|e| format!("cannot read its entry {index}: {e}"))?;
        if entry.is_dir() {
            continue;
        }
        let name = entry
            .name()
            .map_err(|e| format!("its entry {index} has no readable name: {e}"))?
            .into_owned();
        let Some(path) = installed_path(&name) else {
            continue;
        };
        files::check_given(&path)
            .map_err(|e| format!("{name:?} is not a path it may hold: {e}"))?;
        let too_much = || {
            format!(
                "it unpacks to more than the {max_bytes} bytes left to the working directory \
                 (--max-file-bytes)"
            )
        };
        if entry.size() > *left {
            return Err(too_much());
        }
        let mut content = Vec::with_capacity(usize::try_from(entry.size()).unwrap_or(0));
        // The size its header gives is not trusted: at most what is left is read.
        (&mut entry)
            .take(*left + 1)
            .read_to_end(&mut content)
            .map_err(|e| format!("cannot read {name:?}: {e}"))?;
        *left = left
            .checked_sub(content.len() as u64)
            .ok_or_else(too_much)?;
        unpacked.push((format!("{SITE}/{path}"), content));
    }
    Ok(unpacked)
}

/// Where an archive's entry is installed, relative to the site directory; None for what is
/// not installed (a `.data` directory's scripts, headers and data).
fn installed_path(name: &str) -> Option<String> {
    let (top, rest) = name.split_once('/').unwrap_or((name, ""));
    if !top.ends_with(".data") {
        return Some(name.to_owned());
    }
    let (scheme, path) = rest.split_once('/')?;
    matches!(scheme, "purelib" | "platlib").then(|| path.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packages::testing::zip;

    #[test]
    fn a_wheel_s_files_go_under_the_site_directory_its_data_s_libraries_beside_them() {
        let wheel = zip(&[
            ("m/__init__.py", b"x = 1"),
            ("m-1.0.dist-info/METADATA", b"Name: m"),
            ("m-1.0.data/purelib/extra.py", b"y = 2"),
            ("m-1.0.data/scripts/tool", b"#!"),
        ]);
        let paths: Vec<String> = files(&wheel, &mut (1 << 20))
            .unwrap()
            .into_iter()
            .map(|(p, _)| p)
            .collect();
        assert_eq!(
            paths,
            [
                ".hyperlightd/site-packages/m/__init__.py",
                ".hyperlightd/site-packages/m-1.0.dist-info/METADATA",
                ".hyperlightd/site-packages/extra.py",
            ]
        );
    }

    #[test]
    fn a_path_outside_the_directory_is_refused() {
        for name in ["../evil.py", "m/../../evil.py", "/etc/x"] {
            let wheel = zip(&[(name, b"x")]);
            assert!(files(&wheel, &mut (1 << 20)).is_err(), "{name}");
        }
        assert!(files(b"not a zip", &mut (1 << 20)).is_err());
    }

    #[test]
    fn a_wheel_that_unpacks_past_the_bound_is_refused() {
        let big = vec![0u8; 1 << 16];
        let wheel = zip(&[("m/a.py", &big[..]), ("m/b.py", &big[..])]);
        assert!(wheel.len() < 4096, "compressed, it is small");
        let mut left = (2 << 16) + 5;
        assert_eq!(files(&wheel, &mut left).unwrap().len(), 2);
        assert_eq!(left, 5, "lowered by what was unpacked");
        let refused = files(&wheel, &mut ((2 << 16) - 1)).unwrap_err();
        assert!(refused.contains("more than the 131071 bytes"), "{refused}");
    }
}
