//! What a wheel says of itself: its `*.dist-info/METADATA` (name, version, the Python it
//! needs, the packages it needs), read from the archive on the host. Only that file is read
//! here; the archive is unpacked in the guest.

use std::io::{Cursor, Read};
use std::str::FromStr;

use pep508_rs::pep440_rs::{Version, VersionSpecifiers};
use pep508_rs::{PackageName, Requirement};

/// The most bytes of a METADATA file read (a long description can make it large).
const MAX_METADATA: u64 = 4 * 1024 * 1024;

/// A wheel's metadata, the parts a resolution needs.
#[derive(Debug, Clone)]
pub struct Metadata {
    pub name: PackageName,
    pub version: Version,
    pub requires_python: Option<VersionSpecifiers>,
    pub requires_dist: Vec<Requirement>,
}

/// Reads the metadata of the wheel `bytes`; else why it cannot be installed.
pub fn read(bytes: &[u8]) -> Result<Metadata, String> {
    let mut archive =
        zip::ZipArchive::new(Cursor::new(bytes)).map_err(|e| format!("not a zip archive: {e}"))?;
    let paths: Vec<String> = archive
        .file_names()
        .filter_map(Result::ok)
        .filter(|path| {
            path.split_once('/')
                .is_some_and(|(top, rest)| top.ends_with(".dist-info") && rest == "METADATA")
        })
        .map(|path| path.into_owned())
        .collect();
    let [path] = paths.as_slice() else {
        return Err(format!(
            "a wheel has one *.dist-info/METADATA, this one has {}",
            paths.len()
        ));
    };
    let file = archive
        .by_name(path)
        .map_err(|e| format!("cannot read {path}: {e}"))?;
    let mut text = String::new();
    file.take(MAX_METADATA)
        .read_to_string(&mut text)
        .map_err(|e| format!("cannot read {path}: {e}"))?;
    parse(&text).map_err(|e| format!("{path}: {e}"))
}

/// Reads the header fields of a METADATA text (an email-style header, then the description).
pub fn parse(text: &str) -> Result<Metadata, String> {
    let mut fields: Vec<(String, String)> = Vec::new();
    for line in text.lines() {
        if line.is_empty() {
            break;
        }
        if line.starts_with([' ', '\t']) {
            if let Some((_, value)) = fields.last_mut() {
                value.push(' ');
                value.push_str(line.trim());
            }
            continue;
        }
        let Some((key, value)) = line.split_once(':') else {
            return Err(format!("{line:?} is not a header field"));
        };
        fields.push((key.trim().to_ascii_lowercase(), value.trim().to_owned()));
    }
    let field = |key: &str| fields.iter().find(|(k, _)| k == key).map(|(_, v)| v);
    let name = field("name").ok_or("no Name")?;
    let name = PackageName::from_str(name).map_err(|e| format!("Name {name:?}: {e}"))?;
    let version = field("version").ok_or("no Version")?;
    let version = Version::from_str(version).map_err(|e| format!("Version {version:?}: {e}"))?;
    let requires_python = field("requires-python")
        .map(|text| {
            VersionSpecifiers::from_str(text).map_err(|e| format!("Requires-Python {text:?}: {e}"))
        })
        .transpose()?;
    let requires_dist = fields
        .iter()
        .filter(|(key, _)| key == "requires-dist")
        .map(|(_, text)| {
            Requirement::from_str(text).map_err(|e| format!("Requires-Dist {text:?}: {e}"))
        })
        .collect::<Result<_, _>>()?;
    Ok(Metadata {
        name,
        version,
        requires_python,
        requires_dist,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "Metadata-Version: 2.1\nName: Markdown-It-Py\nVersion: 3.0.0\n\
        Requires-Python: >=3.8\nRequires-Dist: mdurl ~=0.1\n\
        Requires-Dist: pytest ; extra == \"testing\"\nSummary: a\n  long summary\n\n\
        Requires-Dist: not-a-field-in-the-description\n";

    #[test]
    fn the_header_is_read_and_the_description_is_not() {
        let metadata = parse(TEXT).unwrap();
        assert_eq!(metadata.name.as_ref(), "markdown-it-py");
        assert_eq!(metadata.version.to_string(), "3.0.0");
        assert_eq!(metadata.requires_python.unwrap().to_string(), ">=3.8");
        let names: Vec<String> = metadata
            .requires_dist
            .iter()
            .map(|r| r.name.to_string())
            .collect();
        assert_eq!(names, ["mdurl", "pytest"]);
    }

    #[test]
    fn a_wheel_without_one_metadata_file_is_refused() {
        assert!(read(b"not a zip").unwrap_err().contains("not a zip"));
        let empty = crate::packages::testing::wheel("m", "1.0", &[], &[]);
        let archive = crate::packages::testing::zip(&[("m/__init__.py", b"")]);
        assert!(read(&empty).is_ok());
        assert!(read(&archive).unwrap_err().contains("has 0"));
        assert!(parse("Name: m\n").unwrap_err().contains("no Version"));
        assert!(
            parse("Name: m\nVersion: x y\n")
                .unwrap_err()
                .contains("Version")
        );
    }
}
