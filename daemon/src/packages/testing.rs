//! Wheels made for tests: zip archives with a METADATA, and a fake index over them.

use std::collections::BTreeMap;
use std::io::Write;
use std::str::FromStr;
use std::sync::Mutex;

use bytes::Bytes;
use pep508_rs::PackageName;

use super::Refusal;
use super::cache::sha256_hex;
use super::index::IndexFile;
use super::resolve::{Fetched, Source};

/// A zip archive of `files`.
pub fn zip(files: &[(&str, &[u8])]) -> Vec<u8> {
    let mut archive = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    for (path, bytes) in files {
        archive
            .start_file(*path, zip::write::SimpleFileOptions::default())
            .unwrap();
        archive.write_all(bytes).unwrap();
    }
    archive.finish().unwrap().into_inner()
}

/// A wheel of `name` `version` that needs `requires` (Requires-Dist lines), with `files`.
pub fn wheel(name: &str, version: &str, requires: &[&str], files: &[(&str, &[u8])]) -> Vec<u8> {
    let dist = format!("{}-{version}.dist-info", name.replace('-', "_"));
    let mut metadata = format!("Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n");
    for requirement in requires {
        metadata.push_str(&format!("Requires-Dist: {requirement}\n"));
    }
    let metadata_path = format!("{dist}/METADATA");
    let mut all: Vec<(&str, &[u8])> = vec![(&metadata_path, metadata.as_bytes())];
    all.extend_from_slice(files);
    zip(&all)
}

/// An index in memory: files by project, and the fetches made.
#[derive(Debug, Default)]
pub struct FakeIndex {
    pub projects: BTreeMap<String, Vec<(IndexFile, Bytes)>>,
    pub fetched: Mutex<Vec<String>>,
}

impl FakeIndex {
    /// Lists `filename` (with `bytes`, hashed) under its project `name`.
    pub fn add(&mut self, name: &str, filename: &str, bytes: Vec<u8>) -> &mut IndexFile {
        let name = PackageName::from_str(name).unwrap().to_string();
        let entry = self.projects.entry(name).or_default();
        entry.push((
            IndexFile {
                filename: filename.to_owned(),
                url: format!("https://files.example/{filename}"),
                sha256: Some(sha256_hex(&bytes)),
                requires_python: None,
                yanked: false,
            },
            Bytes::from(bytes),
        ));
        &mut entry.last_mut().unwrap().0
    }

    /// Lists a pure wheel of `name` `version` that needs `requires`.
    pub fn pure(&mut self, name: &str, version: &str, requires: &[&str]) -> &mut IndexFile {
        let filename = format!("{}-{version}-py3-none-any.whl", name.replace('-', "_"));
        self.add(name, &filename, wheel(name, version, requires, &[]))
    }
}

impl Source for FakeIndex {
    async fn files(&self, name: &PackageName) -> Result<Vec<IndexFile>, Refusal> {
        Ok(self
            .projects
            .get(name.as_ref())
            .map(|files| files.iter().map(|(f, _)| f.clone()).collect())
            .unwrap_or_default())
    }

    async fn wheel(
        &self,
        name: &PackageName,
        file: &IndexFile,
        max: u64,
    ) -> Result<Fetched, Refusal> {
        self.fetched.lock().unwrap().push(file.filename.clone());
        let bytes = self.projects[name.as_ref()]
            .iter()
            .find(|(f, _)| f.filename == file.filename)
            .map(|(_, b)| b.clone())
            .unwrap();
        if bytes.len() as u64 > max {
            return Err(Refusal::TooLarge {
                name: name.clone(),
                filename: file.filename.clone(),
                max,
            });
        }
        if file.sha256.as_deref() != Some(sha256_hex(&bytes).as_str()) {
            return Err(Refusal::HashMismatch {
                filename: file.filename.clone(),
            });
        }
        Ok(Fetched {
            bytes,
            cached: false,
        })
    }
}
