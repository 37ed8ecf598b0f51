// SPDX-License-Identifier: Apache-2.0
// Copyright 2025 The Hyperlight Authors.

//! A snapshot's memory on disk as layers, one blob per file it is
//! mapped from (Linux).
//!
//! In memory a snapshot is made of runs of files (see
//! [`ReadonlySharedMemory`]): a snapshot taken after a restore shares
//! the files of the snapshot it was restored from and adds one of its
//! own. On disk each file is a blob named by its SHA-256, and the
//! manifest lists one layer per run, in order, each with the range of
//! its blob it maps. A layout that already holds a blob (an earlier
//! save of a snapshot sharing that file) does not get it again, and a
//! caller may say where an identical blob already is on disk, to be
//! hard-linked rather than written: saving a chain of snapshots writes
//! each one's own pages once. A snapshot whose memory is one whole file
//! is saved as one layer without a range, which is the format as
//! published before layers.

use std::collections::HashMap;
use std::io::Write as _;
use std::path::Path;
use std::sync::Arc;

use hyperlight_common::vmem::PAGE_SIZE;
use oci_spec::image::{Descriptor, DescriptorBuilder, MediaType};
use tempfile::NamedTempFile;

use super::digest::{Digest256, oci_digest, parse_oci_digest, verify_blob_file};
use super::fsutil::open_no_follow;
use super::reference::OciDigest;
use super::{ExistingBlob, MT_SNAPSHOT_CURRENT, MT_SNAPSHOT_V1};
use crate::mem::shared_mem::{MemoryFile, ReadonlySharedMemory, SnapshotRun};

/// Annotations of a memory layer that maps part of its blob: the first
/// byte it maps and how many.
const ANNOTATION_OFFSET: &str = "dev.hyperlight.snapshot.memory.offset";
const ANNOTATION_LENGTH: &str = "dev.hyperlight.snapshot.memory.length";

/// Most layers a snapshot's memory may have on load. A snapshot in
/// memory is made of a few dozen runs at most (see `MAX_RUNS` and
/// `MAX_TABLE_RUNS` in the snapshot module, which a save merges where
/// they continue one another); this only bounds the work a hostile
/// manifest can ask for.
const MAX_LAYERS: usize = 256;

/// A layer of a snapshot's memory: `len` bytes from `offset` of `file`.
pub(super) struct Layer {
    file: Arc<MemoryFile>,
    offset: u64,
    len: u64,
}

/// The layers of `memory`: its runs, with neighbours that continue one
/// another in one file merged.
pub(super) fn of(memory: &ReadonlySharedMemory) -> Vec<Layer> {
    let mut layers: Vec<Layer> = Vec::new();
    for run in memory.runs() {
        if let Some(last) = layers.last_mut()
            && Arc::ptr_eq(&last.file, &run.file)
            && last.offset + last.len == run.offset
        {
            last.len += run.len as u64;
            continue;
        }
        layers.push(Layer {
            file: run.file.clone(),
            offset: run.offset,
            len: run.len as u64,
        });
    }
    layers
}

/// Writes the blob of every file of `layers` into `blobs_dir` (unless
/// it is there, or `existing` names one to link) and returns the
/// layers' descriptors, in order.
pub(super) fn write(
    blobs_dir: &Path,
    layers: &[Layer],
    existing: ExistingBlob<'_>,
) -> crate::Result<Vec<Descriptor>> {
    let whole = matches!(layers, [one] if one.offset == 0 && one.len == one.file.len());
    let mut written = HashMap::new();
    let mut descriptors = Vec::with_capacity(layers.len());
    for layer in layers {
        let key = Arc::as_ptr(&layer.file);
        let hex = match written.get(&key) {
            Some(hex) => Clone::clone(hex),
            None => {
                let hex = layer
                    .file
                    .sha256()
                    .map_err(|e| crate::new_error!("failed to read snapshot memory: {}", e))?
                    .to_owned();
                put_file_blob(blobs_dir, &hex, &layer.file, existing)?;
                written.insert(key, hex.clone());
                hex
            }
        };
        let digest = oci_digest(&Digest256 { hex })?;
        let mut builder = DescriptorBuilder::default()
            .media_type(MediaType::Other(MT_SNAPSHOT_CURRENT.to_string()))
            .digest(digest)
            .size(layer.file.len());
        if !whole {
            builder = builder.annotations(HashMap::from([
                (ANNOTATION_OFFSET.to_string(), layer.offset.to_string()),
                (ANNOTATION_LENGTH.to_string(), layer.len.to_string()),
            ]));
        }
        descriptors.push(
            builder
                .build()
                .map_err(|e| crate::new_error!("failed to build snapshot descriptor: {}", e))?,
        );
    }
    Ok(descriptors)
}

/// Puts `file` in `blobs_dir` under `hex`: kept if a blob of that name
/// is there and hashes to it, else hard-linked from where `existing`
/// says one is (of the same size), else copied, pages of zeroes left as
/// holes, synced, and renamed into place.
fn put_file_blob(
    blobs_dir: &Path,
    hex: &str,
    file: &MemoryFile,
    existing: ExistingBlob<'_>,
) -> crate::Result<()> {
    let target = blobs_dir.join(hex);
    if let Ok(meta) = std::fs::symlink_metadata(&target)
        && meta.is_file()
        && meta.len() == file.len()
        && let Ok(mut present) = std::fs::File::open(&target)
        && verify_blob_file("existing snapshot", &mut present, hex).is_ok()
    {
        return Ok(());
    }
    let digest = OciDigest::from_oci_spec_digest(&oci_digest(&Digest256 {
        hex: hex.to_owned(),
    })?);
    if let Some(from) = existing(&digest)
        && std::fs::symlink_metadata(&from).is_ok_and(|m| m.is_file() && m.len() == file.len())
    {
        let _ = std::fs::remove_file(&target);
        if std::fs::hard_link(&from, &target).is_ok() {
            return Ok(());
        }
    }
    let io = |what: &str, e: std::io::Error| {
        crate::new_error!("failed to {} snapshot blob {:?}: {}", what, target, e)
    };
    let mut tmp = NamedTempFile::new_in(blobs_dir).map_err(|e| io("create", e))?;
    let mut at = 0u64;
    file.for_each_chunk(|chunk| {
        use std::os::unix::fs::FileExt;
        for page in chunk.chunks(PAGE_SIZE) {
            if page.iter().any(|&b| b != 0) {
                tmp.as_file().write_all_at(page, at)?;
            }
            at += page.len() as u64;
        }
        Ok(())
    })
    .map_err(|e| io("write", e))?;
    tmp.as_file()
        .set_len(file.len())
        .map_err(|e| io("size", e))?;
    tmp.flush().map_err(|e| io("write", e))?;
    tmp.as_file().sync_all().map_err(|e| io("sync", e))?;
    tmp.persist(&target).map_err(|e| io("persist", e.error))?;
    Ok(())
}

/// The runs of a snapshot's memory of `memory_size` bytes from its
/// `layers` in `blobs_dir`: every blob opened once (and checked against
/// its digest when `verify`), every range within its blob and whole
/// pages, the ranges adding up to the memory.
pub(super) fn read(
    blobs_dir: &Path,
    layers: &[Descriptor],
    memory_size: u64,
    verify: bool,
) -> crate::Result<Vec<SnapshotRun>> {
    if layers.is_empty() || layers.len() > MAX_LAYERS {
        return Err(crate::new_error!(
            "expected 1 to {} OCI layers (the snapshot's memory), found {}",
            MAX_LAYERS,
            layers.len()
        ));
    }
    let mut files: HashMap<String, Arc<MemoryFile>> = HashMap::new();
    let mut runs = Vec::with_capacity(layers.len());
    let mut total = 0u64;
    for desc in layers {
        let media = desc.media_type().to_string();
        if media != MT_SNAPSHOT_V1 {
            return Err(crate::new_error!(
                "unexpected snapshot layer media type {:?} (supported: {:?})",
                media,
                MT_SNAPSHOT_V1
            ));
        }
        let hex = parse_oci_digest(desc.digest())?;
        let file = match files.get(&hex) {
            Some(file) => file.clone(),
            None => {
                let file = open_blob(blobs_dir, &hex, desc.size(), verify)?;
                files.insert(hex, file.clone());
                file
            }
        };
        let (offset, len) = range(desc)?;
        let in_blob = offset.checked_add(len).is_some_and(|end| end <= file.len());
        if len == 0 || !in_blob || offset % PAGE_SIZE as u64 != 0 || len % PAGE_SIZE as u64 != 0 {
            return Err(crate::new_error!(
                "snapshot layer maps {} bytes from {} of a blob of {}: not whole pages within it",
                len,
                offset,
                file.len()
            ));
        }
        total = total.saturating_add(len);
        runs.push(SnapshotRun {
            file,
            offset,
            len: usize::try_from(len)?,
        });
    }
    if total != memory_size {
        return Err(crate::new_error!(
            "snapshot layers map {} bytes, expected {} (memory_size)",
            total,
            memory_size
        ));
    }
    Ok(runs)
}

/// `runs` cut where the guest's part of the memory, its first `guest`
/// bytes, ends: a layer may hold both sides (a snapshot's own file holds
/// its pages, then its page tables), but a snapshot made from this one
/// shares the guest's part alone, which must end a run.
pub(super) fn split_at(runs: Vec<SnapshotRun>, guest: usize) -> Vec<SnapshotRun> {
    let mut at = 0;
    let mut split = Vec::with_capacity(runs.len() + 1);
    for run in runs {
        let end = at + run.len;
        if at < guest && guest < end {
            let head = guest - at;
            split.push(SnapshotRun {
                file: run.file.clone(),
                offset: run.offset,
                len: head,
            });
            split.push(SnapshotRun {
                file: run.file,
                offset: run.offset + head as u64,
                len: run.len - head,
            });
        } else {
            split.push(run);
        }
        at = end;
    }
    split
}

/// The blob `hex` of `size` bytes, opened without following links and
/// checked against its digest when `verify`.
fn open_blob(
    blobs_dir: &Path,
    hex: &str,
    size: u64,
    verify: bool,
) -> crate::Result<Arc<MemoryFile>> {
    let mut file = open_no_follow(&blobs_dir.join(hex))?;
    let len = file
        .metadata()
        .map_err(|e| crate::new_error!("failed to stat snapshot blob: {}", e))?
        .len();
    if len != size {
        return Err(crate::new_error!(
            "snapshot blob size {} disagrees with OCI descriptor size {}",
            len,
            size
        ));
    }
    if verify {
        verify_blob_file("snapshot", &mut file, hex)?;
    }
    Ok(Arc::new(MemoryFile::with_sha256(file, len, hex.to_owned())))
}

/// The range of its blob a layer maps: its annotations, or the whole
/// blob when it has neither.
fn range(desc: &Descriptor) -> crate::Result<(u64, u64)> {
    let annotation = |key: &str| desc.annotations().as_ref().and_then(|a| a.get(key));
    match (annotation(ANNOTATION_OFFSET), annotation(ANNOTATION_LENGTH)) {
        (None, None) => Ok((0, desc.size())),
        (Some(offset), Some(len)) => {
            let number = |s: &String| {
                s.parse::<u64>().map_err(|e| {
                    crate::new_error!("snapshot layer annotation {:?} is not a number: {}", s, e)
                })
            };
            Ok((number(offset)?, number(len)?))
        }
        _ => Err(crate::new_error!(
            "snapshot layer has one of {:?} and {:?} without the other",
            ANNOTATION_OFFSET,
            ANNOTATION_LENGTH
        )),
    }
}
