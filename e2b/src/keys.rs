//! API keys: the one a gateway of its own takes (from a file, or made at start), and a shared
//! listener's keys file of `NAME KEY` lines, each key acting for the caller NAME.

use std::path::Path;

/// The shortest key taken, from a file or a keys file.
pub const MIN_KEY_CHARS: usize = 16;

/// A keys file (`hlctl e2b-gateway --api-keys`, `hyperlightd --e2b-keys`): a `(name, key)` per line, names and keys each unique.
pub fn read_keys(path: &Path) -> Result<Vec<(String, String)>, String> {
    use std::os::unix::fs::PermissionsExt;
    let at = |line: usize, what: String| format!("{} line {line}: {what}", path.display());
    let unreadable =
        |e: std::io::Error| format!("cannot read the keys file {}: {e}", path.display());
    let file = std::fs::File::open(path).map_err(unreadable)?;
    let mode = file.metadata().map_err(unreadable)?.permissions().mode();
    if mode & 0o077 != 0 {
        return Err(format!(
            "the keys file {} may be read by others (mode {:o}): make it the gateway's user's \
             alone (chmod 600)",
            path.display(),
            mode & 0o777
        ));
    }
    let text = std::io::read_to_string(file).map_err(unreadable)?;
    let mut keys: Vec<(String, String)> = Vec::new();
    for (n, line) in text.lines().enumerate().map(|(n, l)| (n + 1, l.trim())) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let [name, key] = line.split_whitespace().collect::<Vec<_>>()[..] else {
            return Err(at(n, "a line is a name and a key, and nothing else".into()));
        };
        hyperlightd_api::check_delegated_name(name).map_err(|e| at(n, e))?;
        if key.len() < MIN_KEY_CHARS {
            let short = format!("{name}'s key is shorter than {MIN_KEY_CHARS} characters");
            return Err(at(n, short));
        }
        if keys.iter().any(|(other, _)| other == name) {
            return Err(at(n, format!("{name} has a key already")));
        }
        if keys.iter().any(|(_, other)| other == key) {
            return Err(at(n, format!("{name}'s key is another's too")));
        }
        keys.push((name.to_owned(), key.to_owned()));
    }
    if keys.is_empty() {
        return Err(format!("the keys file {} has no keys", path.display()));
    }
    Ok(keys)
}

pub fn read_key(path: &Path) -> Result<String, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read the key file {}: {e}", path.display()))?;
    let key = text.lines().next().unwrap_or("").trim().to_owned();
    if key.len() < MIN_KEY_CHARS {
        return Err(format!(
            "the key in {} is shorter than {MIN_KEY_CHARS} characters",
            path.display()
        ));
    }
    Ok(key)
}

/// 128 random bits from the host's entropy source, in hex, with E2B's key prefix.
pub fn new_key() -> Result<String, String> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes)
        .map_err(|e| format!("the host's entropy source failed, no key: {e}"))?;
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    Ok(format!("e2b_{hex}"))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::path::PathBuf;

    use super::*;

    #[test]
    fn a_key_file_gives_its_first_line_and_a_short_key_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("key");
        std::fs::write(&path, "e2b_0123456789abcdef\nignored\n").unwrap();
        assert_eq!(read_key(&path).unwrap(), "e2b_0123456789abcdef");
        std::fs::write(&path, "short\n").unwrap();
        assert!(read_key(&path).unwrap_err().contains("shorter than 16"));
        let made = new_key().unwrap();
        assert!(made.starts_with("e2b_") && made.len() == 36, "{made}");
    }

    fn keys_file(dir: &tempfile::TempDir, text: &str, mode: u32) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let path = dir.path().join("keys");
        std::fs::write(&path, text).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        path
    }

    #[test]
    fn a_keys_file_names_a_caller_per_key_and_is_refused_whole_when_wrong() {
        let dir = tempfile::tempdir().unwrap();
        let good = "# the agents\nalice e2b_aaaaaaaaaaaaaaaa\n\n  bob\te2b_bbbbbbbbbbbbbbbb  \n";
        let keys = read_keys(&keys_file(&dir, good, 0o600)).unwrap();
        assert_eq!(
            keys,
            [
                ("alice".to_owned(), "e2b_aaaaaaaaaaaaaaaa".to_owned()),
                ("bob".to_owned(), "e2b_bbbbbbbbbbbbbbbb".to_owned())
            ]
        );
        let refused = |text: &str, mode: u32| read_keys(&keys_file(&dir, text, mode)).unwrap_err();
        assert!(refused(good, 0o640).contains("chmod 600"));
        assert!(refused("", 0o600).contains("no keys"));
        assert!(refused("alice\n", 0o600).contains("line 1: a line is a name and a key"));
        assert!(refused("alice short\n", 0o600).contains("shorter than 16"));
        assert!(refused("a/b e2b_aaaaaaaaaaaaaaaa\n", 0o600).contains("line 1"));
        let twice = "alice e2b_aaaaaaaaaaaaaaaa\nalice e2b_bbbbbbbbbbbbbbbb\n";
        assert!(refused(twice, 0o600).contains("line 2: alice has a key already"));
        let shared = "alice e2b_aaaaaaaaaaaaaaaa\nbob e2b_aaaaaaaaaaaaaaaa\n";
        assert!(refused(shared, 0o600).contains("another's too"));
    }
}
