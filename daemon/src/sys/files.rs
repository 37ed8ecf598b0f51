//! The process's limit on open files. Every client connection holds one, so the daemon raises
//! its soft limit to the hard one at startup (as systemd suggests for services that need many
//! descriptors) and checks that `--max-connections` fits.

use nix::sys::resource::{Resource, getrlimit, setrlimit};

/// Raises the soft limit on open files to the hard limit, and returns the limit now in force.
pub fn raise_open_file_limit() -> nix::Result<u64> {
    let (soft, hard) = getrlimit(Resource::RLIMIT_NOFILE)?;
    if soft < hard {
        setrlimit(Resource::RLIMIT_NOFILE, hard, hard)?;
    }
    Ok(getrlimit(Resource::RLIMIT_NOFILE)?.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raising_the_limit_reaches_the_hard_limit() {
        let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
        assert_eq!(raise_open_file_limit().unwrap(), hard);
    }
}
