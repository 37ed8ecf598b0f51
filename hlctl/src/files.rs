//! Files for `hlctl exec` and `hlctl session exec`: `--input` reads local files into the
//! request, `--output-dir` saves the files the program wrote; `hlctl session files` lists,
//! fetches and changes a session's.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Component, Path, PathBuf};

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use hyperlightd_client::{Client, DisplayData, FileChange, FileData, FileMap};

use super::{exit, print_json, report};

/// The request's files from `--input` values: `PATH` (given under its file name) or
/// `NAME=PATH` (under NAME, which may name directories: `in/data.csv=./data.csv`).
pub fn inputs(specs: &[String]) -> Result<FileMap, String> {
    let mut files = FileMap::new();
    for spec in specs {
        let (name, path) = match spec.split_once('=') {
            Some((name, path)) => (name.to_owned(), PathBuf::from(path)),
            None => {
                let path = PathBuf::from(spec);
                let name = path
                    .file_name()
                    .and_then(|n| n.to_str())
                    .ok_or_else(|| format!("--input {spec}: name the file: --input NAME={spec}"))?
                    .to_owned();
                (name, path)
            }
        };
        let bytes = std::fs::read(&path).map_err(|e| format!("reading {}: {e}", path.display()))?;
        if files
            .insert(name.clone(), FileData::from_bytes(bytes))
            .is_some()
        {
            return Err(format!("--input: two files are named {name}"));
        }
    }
    Ok(files)
}

/// Saves `files` under `dir`, each at its path there; without a directory, says on stderr what
/// came back. A path that would leave `dir` (the daemon sends none) is refused.
pub fn save(files: &FileMap, dir: Option<&Path>) -> Result<(), String> {
    if files.is_empty() {
        return Ok(());
    }
    let Some(dir) = dir else {
        let names: Vec<&str> = files.keys().map(String::as_str).collect();
        eprintln!(
            "hlctl: the program wrote {} (--output-dir DIR saves them)",
            names.join(", ")
        );
        return Ok(());
    };
    for (name, data) in files {
        let relative = Path::new(name);
        if !relative
            .components()
            .all(|c| matches!(c, Component::Normal(_)))
        {
            return Err(format!("the daemon sent a file named {name:?}: not saved"));
        }
        let bytes = data
            .to_bytes()
            .map_err(|e| format!("the daemon sent {name}: {e}"))?;
        let path = dir.join(relative);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| format!("making {}: {e}", parent.display()))?;
        }
        std::fs::write(&path, bytes).map_err(|e| format!("writing {}: {e}", path.display()))?;
    }
    Ok(())
}

/// Prints a display item as it arrives: its text on stdout when it has no image (a table's
/// `text/plain`); an image is saved, or named, once the program ends.
pub fn show(data: &BTreeMap<String, String>) {
    if image(data).is_none()
        && let Some(text) = data.get("text/plain")
    {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{text}");
        let _ = out.flush();
    }
}

/// The image of a display item, with its file name extension.
fn image(data: &BTreeMap<String, String>) -> Option<(&'static str, &String)> {
    [
        ("image/png", "png"),
        ("image/jpeg", "jpg"),
        ("image/svg+xml", "svg"),
    ]
    .into_iter()
    .find_map(|(kind, extension)| Some((extension, data.get(kind)?)))
}

/// Saves the images of `display` under `dir` as `display-N.EXT` (N counts every display item
/// from 1); without a directory, says on stderr how many there were. A name the program's own
/// `files` took is not overwritten.
pub fn save_display(
    display: &[DisplayData],
    files: &FileMap,
    dir: Option<&Path>,
) -> Result<(), String> {
    let images: Vec<(usize, &str, &String)> = display
        .iter()
        .enumerate()
        .filter_map(|(i, item)| image(&item.data).map(|(ext, data)| (i + 1, ext, data)))
        .collect();
    if images.is_empty() {
        return Ok(());
    }
    let Some(dir) = dir else {
        eprintln!(
            "hlctl: the program showed {} image(s) (--output-dir DIR saves them)",
            images.len()
        );
        return Ok(());
    };
    for (n, extension, data) in images {
        let name = format!("display-{n}.{extension}");
        if files.contains_key(&name) {
            return Err(format!(
                "the program wrote a file named {name}: image {n} not saved"
            ));
        }
        let bytes = BASE64
            .decode(data)
            .map_err(|e| format!("the daemon sent image {n} not in base64: {e}"))?;
        let path = dir.join(&name);
        std::fs::create_dir_all(dir).map_err(|e| format!("making {}: {e}", dir.display()))?;
        std::fs::write(&path, bytes).map_err(|e| format!("writing {}: {e}", path.display()))?;
        eprintln!("hlctl: image {n} saved as {}", path.display());
    }
    Ok(())
}

/// `hlctl session files ID [PATH]`: the session's files as a list, or one file's bytes on
/// stdout.
pub async fn session_files(client: &Client, id: &str, path: Option<String>, json: bool) -> u8 {
    let Some(path) = path else {
        return match client.session_files(id).await {
            Ok(list) if json => print_json(&list),
            Ok(list) => {
                for file in &list.files {
                    println!("{:>10}  {}", file.size, file.path);
                }
                exit::OK
            }
            Err(e) => report(&e),
        };
    };
    match client.session_file(id, &path).await {
        Ok(bytes) => {
            let mut out = std::io::stdout().lock();
            match out.write_all(&bytes).and_then(|()| out.flush()) {
                Ok(()) => exit::OK,
                Err(e) => {
                    eprintln!("hlctl: writing the file to stdout: {e}");
                    exit::USAGE
                }
            }
        }
        Err(e) => report(&e),
    }
}

/// `hlctl session files ID --put/--mv/--rm`: the changes, puts first, then renames, then
/// removals, made all or none; prints the checkpoint they made.
pub async fn change_session_files(
    client: &Client,
    id: &str,
    puts: &[String],
    moves: &[String],
    removes: Vec<String>,
) -> u8 {
    let changes = match changes(puts, moves, removes) {
        Ok(changes) => changes,
        Err(why) => {
            eprintln!("hlctl: {why}");
            return exit::USAGE;
        }
    };
    match client.change_session_files(id, changes).await {
        Ok(changed) => {
            println!("checkpoint {}", changed.checkpoint);
            exit::OK
        }
        Err(e) => report(&e),
    }
}

fn changes(
    puts: &[String],
    moves: &[String],
    removes: Vec<String>,
) -> Result<Vec<FileChange>, String> {
    let mut changes: Vec<FileChange> = inputs(puts)?
        .into_iter()
        .map(|(path, data)| FileChange::Write { path, data })
        .collect();
    for spec in moves {
        let (from, to) = spec
            .split_once('=')
            .ok_or_else(|| format!("--mv {spec}: give FROM=TO"))?;
        changes.push(FileChange::Move {
            from: from.to_owned(),
            to: to.to_owned(),
        });
    }
    changes.extend(removes.into_iter().map(|path| FileChange::Remove { path }));
    Ok(changes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_are_puts_then_renames_then_removals() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.txt");
        std::fs::write(&path, "a").unwrap();
        let put = [format!("in/a.txt={}", path.display())];
        let made = changes(&put, &["in/a.txt=b.txt".to_owned()], vec!["in".to_owned()]);
        assert_eq!(
            made.unwrap(),
            [
                FileChange::Write {
                    path: "in/a.txt".into(),
                    data: FileData::Text("a".into())
                },
                FileChange::Move {
                    from: "in/a.txt".into(),
                    to: "b.txt".into()
                },
                FileChange::Remove { path: "in".into() },
            ]
        );
        assert!(changes(&[], &["no-equals".to_owned()], Vec::new()).is_err());
    }

    #[test]
    fn inputs_are_named_by_file_name_or_as_asked() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("data.csv");
        std::fs::write(&path, "a,b\n").unwrap();
        let spec = path.display().to_string();
        let files = inputs(&[spec.clone(), format!("in/x.csv={spec}")]).unwrap();
        assert_eq!(files["data.csv"], FileData::Text("a,b\n".into()));
        assert_eq!(files["in/x.csv"], FileData::Text("a,b\n".into()));
        assert!(
            inputs(&[spec.clone(), spec])
                .unwrap_err()
                .contains("two files")
        );
        assert!(
            inputs(&["/nonexistent/x".into()])
                .unwrap_err()
                .contains("reading")
        );
    }

    #[test]
    fn saved_files_stay_under_the_directory() {
        let dir = tempfile::tempdir().unwrap();
        let mut files = FileMap::new();
        files.insert("out/a.txt".into(), FileData::Text("hi".into()));
        save(&files, Some(dir.path())).unwrap();
        assert_eq!(std::fs::read(dir.path().join("out/a.txt")).unwrap(), b"hi");
        files.insert("../escape".into(), FileData::Text("no".into()));
        assert!(save(&files, Some(dir.path())).is_err());
        assert!(!dir.path().join("../escape").exists());
    }
}
