//! Templates saved on disk (`--snapshot-dir`): a daemon saves each language's template, the
//! next start loads them instead of building, and one that is corrupt or was saved for other
//! settings is never used: it is built again, and replaced.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use hyperlightd_client::{ExecRequest, ExecStatus, Language};
use hyperlightd_e2e::{Daemon, saved_templates as saved};
use serde_json::json;

use super::{py, run};

/// How long saving the templates may take in the background.
const SAVE_LIMIT: Duration = Duration::from_secs(300);

async fn start(dir: &Path, extra: &[&str]) -> Daemon {
    let mut args = vec!["--snapshot-dir", dir.to_str().expect("a UTF-8 path")];
    args.extend_from_slice(extra);
    Daemon::start_with_python(&["javascript=1", "python=1"], &args).await
}

/// Waits until both languages' templates are saved, and returns them.
async fn wait_saved(dir: &Path, daemon: &Daemon) -> (PathBuf, PathBuf) {
    let saved = daemon
        .wait_saved(dir, &["javascript", "python"], SAVE_LIMIT)
        .await;
    (saved[0].clone(), saved[1].clone())
}

/// Both languages answer, with output and the library (the restored tables name its files).
async fn both_work(daemon: &Daemon) {
    let js = ExecRequest::new(
        Language::Javascript,
        "console.log('js'); [1, 2, 3].map((x) => x * 2)",
    );
    let reply = run(daemon, js).await;
    assert_eq!(reply.status, ExecStatus::Ok, "{reply:?}");
    assert_eq!(
        (reply.stdout.as_str(), &reply.result),
        ("js\n", &json!([2, 4, 6]))
    );
    let reply = run(
        daemon,
        py("import textwrap, json\nprint(textwrap.shorten('hello wide world', 12))\njson.dumps([1])"),
    )
    .await;
    assert_eq!(reply.status, ExecStatus::Ok, "{reply:?}");
    assert_eq!(
        (reply.stdout.as_str(), &reply.result),
        ("hello [...]\n", &json!("[1]"))
    );
}

/// Flips a byte in the middle of the largest blob of a saved template.
fn corrupt(template: &Path) {
    let blobs = template.join("oci/blobs/sha256");
    let largest = std::fs::read_dir(&blobs)
        .expect("the template's blobs")
        .flatten()
        .max_by_key(|entry| entry.metadata().map_or(0, |m| m.len()))
        .expect("a blob");
    let mut bytes = std::fs::read(largest.path()).expect("the blob");
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x55;
    std::fs::write(largest.path(), bytes).expect("writing the blob");
}

#[tokio::test]
async fn templates_are_saved_loaded_and_rebuilt_when_corrupt_or_stale() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let snapshots = dir.path().join("snapshots");

    // Nothing saved: built, and saved in the background.
    let daemon = start(&snapshots, &[]).await;
    assert_eq!(daemon.templates("javascript", "built").await, 1);
    assert_eq!(daemon.templates("python", "built").await, 1);
    both_work(&daemon).await;
    let (js, python) = wait_saved(&snapshots, &daemon).await;
    drop(daemon);

    // Saved: loaded, not built (Python's resource tables read back), and the sandboxes work;
    // but a corrupt snapshot is refused, removed, built again and saved again.
    corrupt(&js);
    let daemon = start(&snapshots, &[]).await;
    let log = daemon.log();
    assert_eq!(daemon.templates("python", "loaded").await, 1, "{log}");
    assert_eq!(daemon.templates("python", "built").await, 0, "{log}");
    assert_eq!(daemon.templates("javascript", "built").await, 1, "{log}");
    assert!(log.contains("is not used, and is removed"), "{log}");
    both_work(&daemon).await;
    let (js_again, python_again) = wait_saved(&snapshots, &daemon).await;
    assert_eq!(
        (&js_again, &python_again),
        (&js, &python),
        "the same keys, saved again"
    );
    drop(daemon);

    // Other settings: the saved JavaScript template is not theirs. Built; once saved, the old
    // one is gone. Python's is loaded again.
    let daemon = start(&snapshots, &["--guest-heap-mib", "48"]).await;
    assert_eq!(
        daemon.templates("javascript", "built").await,
        1,
        "{}",
        daemon.log()
    );
    assert_eq!(daemon.templates("python", "loaded").await, 1);
    both_work(&daemon).await;
    // Saved under the new key, and then the stale one removed.
    let started = Instant::now();
    while saved(&snapshots, "javascript").contains(&js) {
        assert!(
            started.elapsed() < SAVE_LIMIT,
            "the stale template is still there after {} s; daemon log:\n{}",
            SAVE_LIMIT.as_secs(),
            daemon.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (js_other, _) = wait_saved(&snapshots, &daemon).await;
    assert_ne!(js_other, js);
    assert!(!js.exists(), "the stale template is removed");
}
