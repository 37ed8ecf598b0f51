//! The daemon's package options, read into [`Packages`]: off without `--package-index`.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use super::Packages;
use super::cache::Cache;
use super::fetch::Indexes;
use super::policy::{Pattern, Policy};
use crate::egress::client::Client;
use crate::egress::target::Target;
use crate::metrics::PackageMetrics;

/// Packages Python sessions may install at runtime: off unless an index is named.
#[derive(Debug, Clone, Args)]
pub struct PackageOptions {
    /// A package index that Python programs may install wheels from (`%pip install`, `POST
    /// /v1/sessions/{id}/packages`): the simple repository API, in JSON or HTML, such as
    /// `https://pypi.org/simple/` or a mirror. Repeat for more, asked in order (a package is
    /// taken from the first index that has it). Without one, nothing is installed.
    #[arg(id = "package-index", long = "package-index", value_name = "URL")]
    pub indexes: Vec<String>,

    /// Packages that may be installed, dependencies included: a name, a prefix ending in `*`,
    /// or `*` for any. Repeat for more.
    #[arg(
        id = "package-allow",
        long = "package-allow",
        value_name = "NAME",
        default_value = "*"
    )]
    pub allow: Vec<String>,

    /// Packages that may not be installed, whatever `--package-allow` says (same forms).
    /// Repeat for more.
    #[arg(id = "package-deny", long = "package-deny", value_name = "NAME")]
    pub deny: Vec<String>,

    /// The largest wheel installed, in MiB.
    #[arg(
        id = "package-max-wheel-mib",
        long = "package-max-wheel-mib",
        default_value_t = 64
    )]
    pub max_wheel_mib: u64,

    /// The most packages one session installs, dependencies included.
    #[arg(
        id = "package-max-per-session",
        long = "package-max-per-session",
        default_value_t = 32
    )]
    pub max_per_session: usize,

    /// Where wheels are kept by their SHA-256, shared by every session and kept across
    /// restarts (made if missing, mode 0700).
    #[arg(
        id = "package-cache",
        long = "package-cache",
        value_name = "DIR",
        default_value = "/var/cache/hyperlightd/packages"
    )]
    pub cache: PathBuf,

    /// The most the wheel cache holds, in MiB (the least recently used go first).
    #[arg(
        id = "package-cache-mib",
        long = "package-cache-mib",
        default_value_t = 2048
    )]
    pub cache_mib: u64,

    /// How long a project's page, once read from its index, is used before it is read again,
    /// in seconds.
    #[arg(
        id = "package-page-max-age-s",
        long = "package-page-max-age-s",
        default_value_t = 600
    )]
    pub page_max_age_s: u64,

    /// How long one request to an index may take, in milliseconds.
    #[arg(
        id = "package-timeout-ms",
        long = "package-timeout-ms",
        default_value_t = 60_000
    )]
    pub timeout_ms: u64,
}

impl PackageOptions {
    /// The installs these options describe; None without an index. `client` is the egress's
    /// client (the system's roots and `--egress-ca-file`, the helper if there is one).
    pub fn packages(
        &self,
        client: impl FnOnce() -> Result<Client, String>,
        metrics: Option<PackageMetrics>,
    ) -> Result<Option<Packages>, String> {
        if self.indexes.is_empty() {
            return Ok(None);
        }
        let roots = self
            .indexes
            .iter()
            .map(|url| root(url).map_err(|e| format!("--package-index {url}: {e}")))
            .collect::<Result<Vec<_>, _>>()?;
        let patterns = |option: &str, texts: &[String]| {
            texts
                .iter()
                .map(|text| Pattern::parse(text).map_err(|e| format!("{option} {e}")))
                .collect::<Result<Vec<_>, _>>()
        };
        let zero = [
            ("--package-max-wheel-mib", self.max_wheel_mib == 0),
            ("--package-max-per-session", self.max_per_session == 0),
            ("--package-timeout-ms", self.timeout_ms == 0),
        ];
        if let Some((option, _)) = zero.iter().find(|(_, is_zero)| *is_zero) {
            return Err(format!("{option} must be above 0"));
        }
        let policy = Policy {
            allow: patterns("--package-allow", &self.allow)?,
            deny: patterns("--package-deny", &self.deny)?,
            max_wheel_bytes: self.max_wheel_mib.saturating_mul(1024 * 1024),
            max_per_session: self.max_per_session,
        };
        let cache = Cache::open(&self.cache, self.cache_mib.saturating_mul(1024 * 1024))
            .map_err(|e| format!("--package-cache: {e}"))?;
        let indexes = Indexes::new(
            roots,
            client()?,
            cache,
            Duration::from_secs(self.page_max_age_s),
            Duration::from_millis(self.timeout_ms),
        );
        Ok(Some(Packages::new(indexes, policy, metrics)))
    }
}

/// An index's root: an absolute http(s) URL, its path ending in `/`, no query.
fn root(url: &str) -> Result<Target, String> {
    let mut text = url.trim().to_owned();
    if !text.ends_with('/') {
        text.push('/');
    }
    let target = Target::parse(&text).map_err(|e| e.message)?;
    if target.path_and_query != target.path {
        return Err("an index's URL has no query".to_owned());
    }
    Ok(target)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::egress::client::Network;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        packages: PackageOptions,
    }

    fn options(args: &[&str]) -> PackageOptions {
        Cli::parse_from(std::iter::once("x").chain(args.iter().copied())).packages
    }

    fn tls() -> Result<Client, String> {
        Err("no TLS in this test".to_owned())
    }

    #[test]
    fn without_an_index_nothing_is_installed_and_nothing_is_made() {
        let dir = tempfile::tempdir().unwrap();
        let cache = dir.path().join("cache");
        let off = options(&["--package-cache", cache.to_str().unwrap()]);
        assert!(off.packages(tls, None).unwrap().is_none());
        assert!(!cache.exists());
    }

    #[test]
    fn bad_options_are_refused_with_the_option_named() {
        let dir = tempfile::tempdir().unwrap();
        let cache = dir.path().join("cache");
        let cache = cache.to_str().unwrap();
        for (args, says) in [
            (
                vec!["--package-index", "ftp://x/"],
                "--package-index ftp://x/",
            ),
            (vec!["--package-index", "https://x/simple?a=b"], "no query"),
            (
                vec!["--package-index", "https://x/", "--package-deny", "a*b*"],
                "--package-deny",
            ),
            (
                vec![
                    "--package-index",
                    "https://x/",
                    "--package-max-wheel-mib",
                    "0",
                ],
                "above 0",
            ),
        ] {
            let mut all = args.clone();
            all.extend(["--package-cache", cache]);
            let refused = options(&all).packages(tls, None).unwrap_err();
            assert!(refused.contains(says), "{args:?}: {refused}");
        }
    }

    #[test]
    fn an_index_gives_installs_with_the_policy_in_health() {
        let dir = tempfile::tempdir().unwrap();
        let cache = dir.path().join("cache");
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(rustls::RootCertStore::empty())
            .with_no_client_auth();
        let packages = options(&[
            "--package-index",
            "http://127.0.0.1:9/simple",
            "--package-deny",
            "evil",
            "--package-cache",
            cache.to_str().unwrap(),
        ])
        .packages(|| Ok(Client::new(Arc::new(config), Network::Direct)), None)
        .unwrap()
        .unwrap();
        let health = packages.health();
        assert_eq!(health.indexes, ["http://127.0.0.1:9/simple/"]);
        assert_eq!(
            (health.allow, health.deny),
            (vec!["*".to_owned()], vec!["evil".to_owned()])
        );
        assert_eq!(health.max_wheel_bytes, 64 << 20);
        assert!(cache.is_dir());
    }
}
