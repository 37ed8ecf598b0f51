//! Templates shared by the daemons of one test process. Building a template (booting the
//! guest, importing its libraries) takes seconds to a minute and a half under emulation, and
//! saving a native Python one writes a GiB; loading a saved one takes a second or two. Each
//! daemon a test starts gets a snapshot directory of its own, holding, as hard links, every
//! template an earlier daemon of the process saved: it loads the one whose key is its own
//! (the key names the daemon's executable, the guest's sizes and files) and builds only where
//! none is, and what it saves is added to the pool for the daemons after it. A directory of its
//! own because a daemon removes its language's templates of other keys once it has saved its
//! own: that removes links, never another daemon's template. A test's results never depend on
//! which way a template was made; tests that look at how templates are saved and loaded choose
//! their own `--snapshot-dir`.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use nix::sys::signal::kill;
use nix::unistd::Pid;

/// The prefix of the process's directory under the temporary directory, followed by the test
/// process's id.
const PREFIX: &str = "hyperlightd-e2e-templates-";

/// A fresh snapshot directory for one daemon started with `args`, holding the pool's templates;
/// `None` where the test chose its own (`--snapshot-dir`).
pub(crate) fn directory_for(args: &[&str]) -> Option<PathBuf> {
    if args.contains(&"--snapshot-dir") {
        return None;
    }
    static SWEPT: std::sync::Once = std::sync::Once::new();
    SWEPT.call_once(|| remove_those_of_ended_runs(&std::env::temp_dir()));
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let root = process_dir();
    let dir = root.join(format!("daemon-{}", NEXT.fetch_add(1, Ordering::Relaxed)));
    fs::create_dir_all(pool()).expect("the pool of templates");
    fs::create_dir(&dir).expect("a daemon's snapshot directory");
    for entry in fs::read_dir(pool())
        .expect("the pool of templates")
        .flatten()
    {
        link_tree(&entry.path(), &dir.join(entry.file_name())).expect("linking a template");
    }
    Some(dir)
}

/// Adds the templates the daemon saved in `dir` (finished saves: those with their `key.json`)
/// to the pool, unless it has them.
pub(crate) fn keep_saved(dir: &Path) {
    for entry in fs::read_dir(dir)
        .expect("a daemon's snapshot directory")
        .flatten()
    {
        let into = pool().join(entry.file_name());
        if into.exists() || !entry.path().join("key.json").is_file() {
            continue;
        }
        // Linked beside, then renamed in: the pool never holds half a template.
        let partial = pool().join(format!(".partial-{}", entry.file_name().to_string_lossy()));
        let _ = fs::remove_dir_all(&partial);
        link_tree(&entry.path(), &partial).expect("linking a saved template into the pool");
        if fs::rename(&partial, &into).is_err() {
            let _ = fs::remove_dir_all(&partial);
        }
    }
}

fn process_dir() -> PathBuf {
    std::env::temp_dir().join(format!("{PREFIX}{}", std::process::id()))
}

fn pool() -> PathBuf {
    process_dir().join("pool")
}

/// Makes `to` a copy of the tree `from` whose files are hard links to `from`'s.
fn link_tree(from: &Path, to: &Path) -> io::Result<()> {
    if from.is_dir() {
        fs::create_dir(to)?;
        for entry in fs::read_dir(from)? {
            let entry = entry?;
            link_tree(&entry.path(), &to.join(entry.file_name()))?;
        }
        Ok(())
    } else {
        fs::hard_link(from, to)
    }
}

/// Removes the directories of test processes that have ended (a GiB each with native Python):
/// nothing else would, on a host that keeps its temporary directory.
fn remove_those_of_ended_runs(temp: &Path) {
    let Ok(entries) = fs::read_dir(temp) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = name.strip_prefix(PREFIX).and_then(|p| p.parse().ok()) else {
            continue;
        };
        if kill(Pid::from_raw(pid), None) == Err(nix::errno::Errno::ESRCH) {
            let _ = fs::remove_dir_all(entry.path());
        }
    }
}
