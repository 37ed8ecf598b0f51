//! Property-based fuzzing of what an install reads from a package index, and of the lines a
//! program asks with: project pages (JSON and HTML), wheel file names, METADATA, the wheel
//! archives the WebAssembly runtime's installs unpack on the host, `%pip` lines and
//! requirements. Any input is read or refused without a panic; an archive never unpacks a path
//! outside the site directory, nor more than its bound; `%pip` lines keep the program's line
//! numbers. `PROPTEST_CASES` sets the cases (256 by default; developing.md has a longer run).

use proptest::prelude::*;

use super::testing::{wheel, zip};
use super::{index, metadata, pip, unpack, wheel::WheelName};
use crate::job::files;

/// `bytes` with a few bytes overwritten and cut at `cut` (a damaged or hostile copy).
fn damage(mut bytes: Vec<u8>, flips: &[(usize, u8)], cut: usize) -> Vec<u8> {
    if !bytes.is_empty() {
        for &(at, value) in flips {
            let len = bytes.len();
            bytes[at % len] = value;
        }
    }
    bytes.truncate(cut);
    bytes
}

fn flips() -> impl Strategy<Value = Vec<(usize, u8)>> {
    proptest::collection::vec((any::<usize>(), any::<u8>()), 0..6)
}

/// A project page's body: JSON or HTML shaped like one, or anything.
fn page() -> impl Strategy<Value = (String, Vec<u8>)> {
    let json = (
        "[a-z0-9_.\\-/%]{0,30}",
        "[0-9a-f]{0,64}",
        any::<bool>(),
        "[<>=!~0-9., ]{0,12}",
    )
        .prop_map(|(name, hash, yanked, python)| {
            let page = format!(
                r#"{{"meta":{{"api-version":"1.0"}},"name":"m","files":[{{"filename":"{name}",
                "url":"{name}","hashes":{{"sha256":"{hash}"}},"yanked":{yanked},
                "requires-python":"{python}"}}]}}"#
            );
            (
                "application/vnd.pypi.simple.v1+json".to_owned(),
                page.into_bytes(),
            )
        });
    let html = (
        "[a-z0-9_.\\-/%#=&;\"' <>]{0,60}",
        "[<>=!~0-9.,; &gta]{0,16}",
    )
        .prop_map(|(href, python)| {
            let page = format!(
                "<html><body><a href=\"{href}\" data-requires-python=\"{python}\" \
                 data-yanked>m-1.0-py3-none-any.whl</a></body></html>"
            );
            ("text/html".to_owned(), page.into_bytes())
        });
    let anything = (
        "(application/vnd.pypi.simple.v1\\+json|text/html|application/json|[ -~]{0,20})",
        any::<Vec<u8>>(),
    );
    prop_oneof![json, html, anything]
}

proptest! {
    #[test]
    fn any_project_page_is_read_or_refused((content_type, body) in page()) {
        let _ = index::parse(&content_type, &body);
    }

    #[test]
    fn any_wheel_file_name_is_read_or_refused(
        name in "([a-zA-Z0-9_.+\\-]{0,12}){1,6}(\\.whl|\\.tar\\.gz)?",
        dots in 0usize..2000,
    ) {
        let _ = WheelName::parse(&name);
        // Tag sets of thousands of names: read or refused, in little memory (this binary's
        // tests would fail to allocate the product of three).
        let many = |tag: &str| vec![tag; dots + 1].join(".");
        let name = format!("m-1.0-{}-{}-{}.whl", many("py3"), many("none"), many("any"));
        let _ = WheelName::parse(&name);
    }

    #[test]
    fn any_metadata_is_read_or_refused(text in any::<String>(), header in "[A-Za-z\\-]{1,20}") {
        let _ = metadata::parse(&text);
        let _ = metadata::parse(&format!("Name: m\nVersion: 1.0\n{header}: {text}\n"));
    }

    #[test]
    fn a_damaged_wheel_is_refused_or_unpacks_inside_its_bound(
        flips in flips(),
        cut in any::<usize>(),
        name in "[a-z./\\\\]{1,12}",
        bound in 0u64..4096,
    ) {
        let content = vec![b'x'; 2048];
        let good = wheel("m", "1.0", &["n>=1"], &[(name.as_str(), &content[..])]);
        let cut = cut % (good.len() + 1);
        let bytes = damage(good, &flips, cut);
        let _ = metadata::read(&bytes);
        let mut left = bound;
        if let Ok(unpacked) = unpack::files(&bytes, &mut left) {
            let total: u64 = unpacked.iter().map(|(_, b)| b.len() as u64).sum();
            prop_assert!(total <= bound);
            prop_assert_eq!(left, bound - total);
            for (path, _) in unpacked {
                prop_assert!(path.starts_with(unpack::SITE), "{}", path);
                prop_assert!(files::check_given(&path).is_ok(), "{}", path);
            }
        }
    }

    #[test]
    fn any_archive_s_entries_unpack_inside_the_site_directory(
        names in proptest::collection::btree_set("[a-z./\\\\:]{0,10}", 1..4),
    ) {
        let entries: Vec<(&str, &[u8])> = names.iter().map(|n| (n.as_str(), &b"x"[..])).collect();
        if let Ok(unpacked) = unpack::files(&zip(&entries), &mut (1 << 20)) {
            for (path, _) in unpacked {
                prop_assert!(files::check_given(&path).is_ok(), "{}", path);
            }
        }
    }

    #[test]
    fn pip_lines_come_out_and_the_line_numbers_stay(
        lines in proptest::collection::vec(
            prop_oneof![
                "(%|!)pip3? install( [a-zA-Z0-9_.<>=!~\\[\\],\\-]{1,12}){0,3}( -[qUr])?",
                "!python -m pip (install|list|uninstall)( [a-z\\-]{1,8})?",
                "[ -~]{0,30}",
            ],
            0..8,
        ),
    ) {
        let code = lines.join("\n");
        if let Ok(Some(split)) = pip::split(&code) {
            prop_assert_eq!(split.code.split('\n').count(), code.split('\n').count());
            let _ = pip::requirements(&split.requirements);
        }
    }

    #[test]
    fn any_requirement_is_read_or_refused(texts in proptest::collection::vec(any::<String>(), 0..4)) {
        let _ = pip::requirements(&texts);
    }
}
