//! Checkpoints in a daemon's state directory (`--state-dir`), as the tests look at them: when
//! one reaches the disk, and the files its memory is made of.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use hyperlightd_client::Client;
use serde_json::Value;

use crate::{STEP_LIMIT, within};

/// The directory of checkpoint `number` of session `id` under the state directory `state`.
pub fn checkpoint_dir(state: &Path, id: &str, number: u64) -> PathBuf {
    state
        .join("sessions")
        .join(id)
        .join("checkpoints")
        .join(number.to_string())
}

/// Waits until checkpoint `number` of session `id` is on disk, at most `limit`.
pub async fn wait_durable(client: &Client, id: &str, number: u64, limit: Duration) {
    let started = Instant::now();
    loop {
        let checkpoints = within("checkpoints", STEP_LIMIT, client.session_checkpoints(id))
            .await
            .expect("the session's checkpoints");
        if checkpoints
            .iter()
            .any(|c| c.checkpoint == number && c.durable)
        {
            return;
        }
        assert!(
            started.elapsed() < limit,
            "checkpoint {number} of {id} did not reach the disk: {checkpoints:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The files of the memory of the checkpoint in `dir`, in the order its snapshot's layers map
/// them (its OCI layout: `index.json` names the manifest, whose memory layers name their
/// blobs by digest): the template's first, the checkpoint's own pages last.
pub fn memory_blobs(dir: &Path) -> Vec<PathBuf> {
    layout_memory_blobs(&dir.join("state/oci"))
}

/// The files of the memory of the snapshot in the OCI layout `oci`, in the order its layers
/// map them.
pub fn layout_memory_blobs(oci: &Path) -> Vec<PathBuf> {
    let blob = |digest: &Value| {
        let digest = digest.as_str().and_then(|d| d.strip_prefix("sha256:"));
        let digest = digest.expect("a sha256 digest");
        oci.join("blobs/sha256").join(digest)
    };
    let read = |path: &Path| -> Value {
        let bytes = std::fs::read(path).expect("a file of the layout");
        serde_json::from_slice(&bytes).expect("JSON")
    };
    let index = read(&oci.join("index.json"));
    let manifest = read(&blob(&index["manifests"][0]["digest"]));
    let mut files = Vec::new();
    for layer in manifest["layers"]
        .as_array()
        .expect("the manifest's layers")
    {
        let path = blob(&layer["digest"]);
        if layer["mediaType"] == "application/vnd.hyperlight.snapshot.memory.v1"
            && !files.contains(&path)
        {
            files.push(path);
        }
    }
    files
}

/// The file of the pages the checkpoint in `dir` holds of its own: the last its layers map.
pub fn own_blob(dir: &Path) -> PathBuf {
    memory_blobs(dir).pop().expect("a memory layer")
}

/// The inode of the file at `path`: two paths of one inode are one file, hard-linked.
pub fn inode(path: &Path) -> u64 {
    std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(path).expect("the file"))
}
