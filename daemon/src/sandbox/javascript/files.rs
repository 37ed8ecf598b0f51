//! The runner's `files` API on the host: the program's working directory, a [`Workspace`] in
//! the host's memory, answered for the host functions `hyperlightd.file_*`. Every path is
//! resolved by the workspace from the working directory, so nothing outside it can be named.
//!
//! Each answer is `{"ok": value}` or `{"error": message, "code": "ENOENT" | ...}`, and the
//! runner throws the latter as an `Error` with that `code` (Node's names). Contents travel as
//! base64, both ways.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Value, json};

use crate::job::files::{self, FileError};
use crate::job::workspace::{Entry, Workspace};

/// The host functions, by name.
pub const FUNCTIONS: &[&str] = &[
    "file_read",
    "file_write",
    "file_list",
    "file_remove",
    "file_stat",
];

/// Answers `function` with its JSON-array arguments `args`; None: not a files function.
pub fn call(work: &Workspace, function: &str, args: &str) -> Option<Result<String, String>> {
    let args: Vec<Value> = match serde_json::from_str(args) {
        Ok(args) => args,
        Err(e) => return Some(Err(format!("bad arguments {args:?}: {e}"))),
    };
    let text = |i: usize| args.get(i).and_then(Value::as_str).unwrap_or_default();
    let answer = match function {
        "file_read" => read(work, text(0)),
        "file_write" => write(work, text(0), text(1)),
        "file_list" => Ok(list(work)),
        "file_remove" => remove(work, text(0)),
        "file_stat" => stat(work, text(0)),
        _ => return None,
    };
    let answer = match answer {
        Ok(value) => json!({ "ok": value }),
        Err(e) => json!({ "error": e.to_string(), "code": code(e) }),
    };
    Some(Ok(answer.to_string()))
}

fn read(work: &Workspace, path: &str) -> Result<Value, FileError> {
    let path = files::resolve("", path)?;
    let (bytes, _) = work.read(&path, 0, u64::MAX)?;
    Ok(Value::String(STANDARD.encode(bytes)))
}

fn write(work: &Workspace, path: &str, base64: &str) -> Result<Value, FileError> {
    let path = files::resolve("", path)?;
    let bytes = STANDARD.decode(base64).map_err(|_| FileError::BadName)?;
    work.put(&path, &bytes)?;
    Ok(Value::Null)
}

fn list(work: &Workspace) -> Value {
    work.files()
        .into_iter()
        .map(|(path, size)| json!({ "path": path, "size": size }))
        .collect()
}

fn remove(work: &Workspace, path: &str) -> Result<Value, FileError> {
    let path = files::resolve("", path)?;
    match work.entry(&path)? {
        Entry::File { .. } => work.remove_file(&path)?,
        Entry::Dir => work.remove_dir(&path)?,
    }
    Ok(Value::Null)
}

fn stat(work: &Workspace, path: &str) -> Result<Value, FileError> {
    let path = files::resolve("", path)?;
    Ok(match work.entry(&path) {
        Ok(Entry::Dir) => json!({ "directory": true, "size": 0 }),
        Ok(Entry::File { size }) => json!({ "directory": false, "size": size }),
        Err(FileError::NotFound) => Value::Null,
        Err(e) => return Err(e),
    })
}

/// Node's name for the error.
fn code(e: FileError) -> &'static str {
    match e {
        FileError::NotFound => "ENOENT",
        FileError::NotDirectory => "ENOTDIR",
        FileError::IsDirectory => "EISDIR",
        FileError::Exists => "EEXIST",
        FileError::NotEmpty => "ENOTEMPTY",
        FileError::Escapes | FileError::NoLinks => "EPERM",
        FileError::BadName => "EINVAL",
        FileError::TooManyFiles => "EDQUOT",
        FileError::TooLarge => "ENOSPC",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::{FileLimits, Files};

    fn answer(work: &Workspace, function: &str, args: &str) -> Value {
        serde_json::from_str(&call(work, function, args).unwrap().unwrap()).unwrap()
    }

    #[test]
    fn files_are_written_read_listed_and_removed() {
        let work = Workspace::default();
        let given: Files = [("in.txt".to_owned(), b"hi".to_vec())].into();
        work.begin(
            &given,
            FileLimits {
                max_entries: 4,
                max_bytes: 8,
            },
        );
        assert_eq!(answer(&work, "file_read", r#"["in.txt"]"#)["ok"], "aGk=");
        assert_eq!(
            answer(&work, "file_write", r#"["out/a.bin", "AP8="]"#)["ok"],
            Value::Null
        );
        assert_eq!(
            answer(&work, "file_list", "[]")["ok"],
            json!([{"path": "in.txt", "size": 2}, {"path": "out/a.bin", "size": 2}])
        );
        assert_eq!(
            answer(&work, "file_stat", r#"["out"]"#)["ok"]["directory"],
            true
        );
        assert_eq!(answer(&work, "file_stat", r#"["nope"]"#)["ok"], Value::Null);
        assert_eq!(
            answer(&work, "file_remove", r#"["in.txt"]"#)["ok"],
            Value::Null
        );
        let (files, over) = work.take();
        assert_eq!(files, [("out/a.bin".to_owned(), vec![0, 255])].into());
        assert_eq!(over, None);
    }

    #[test]
    fn refusals_carry_node_codes() {
        let work = Workspace::default();
        work.begin(
            &Files::new(),
            FileLimits {
                max_entries: 4,
                max_bytes: 3,
            },
        );
        for (function, args, code) in [
            ("file_read", r#"["../etc/passwd"]"#, "EPERM"),
            ("file_read", r#"["/etc/passwd"]"#, "EPERM"),
            ("file_read", r#"["missing"]"#, "ENOENT"),
            ("file_write", r#"["big", "AAAAAAAA"]"#, "ENOSPC"),
            ("file_write", r#"["a\u0000b", "AA=="]"#, "EINVAL"),
            ("file_remove", r#"["missing"]"#, "ENOENT"),
        ] {
            let answer = answer(&work, function, args);
            assert_eq!(answer["code"], code, "{function} {args}: {answer}");
            assert!(answer["error"].is_string());
        }
        assert!(call(&work, "file_read", "not json").unwrap().is_err());
        assert!(call(&work, "exec", "[]").is_none());
    }
}
