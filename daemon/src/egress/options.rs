//! The daemon's egress options, and the [`EgressParts`] they make: the rules (these options'
//! and the policy file's), the secrets with their values read, the limits, and the TLS roots
//! (the system's, and an operator's CA file).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use rustls::RootCertStore;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use tracing::{info, warn};

use super::client::{Client, Network};
use super::helper::Helper;
use super::rules::Rule;
use super::secrets::Secret;
use super::{EgressLimits, EgressParts};

/// Outbound HTTP from programs: off unless a destination is allowed.
#[derive(Debug, Clone, Args)]
pub struct EgressOptions {
    /// A destination programs may reach over HTTP, as `[METHODS ]SCHEME://HOST[:PORT][/PATH]`
    /// (`GET,HEAD https://*.example.com/data/`); repeat for more, with none programs reach nothing.
    ///
    /// The host is a name, `*.` and a domain (names under it), or an IP address (the one way to
    /// reach a loopback, private or link-local address).
    #[arg(long = "egress-allow", value_name = "RULE")]
    pub allow: Vec<String>,

    /// A header the daemon adds to requests to a destination, its value read from the daemon's
    /// environment or a file, never seen by the program: `DESTINATION HEADER: VALUE`, such as
    /// `https://api.example.com/v1/ Authorization: Bearer {env:EXAMPLE_TOKEN}` (or
    /// `{file:/run/credentials/hyperlightd.service/token}`).
    ///
    /// Repeat for more.
    #[arg(long = "egress-secret", value_name = "SECRET")]
    pub secrets: Vec<String>,

    /// The egress helper's socket (`hyperlightd-egress`): names are resolved and connections
    /// made by that process, which has the network, and the daemon opens no Internet socket of
    /// its own (how the packaged unit, which has no network, reaches destinations).
    #[arg(
        long = "egress-helper",
        value_name = "PATH",
        env = "HYPERLIGHTD_EGRESS_HELPER"
    )]
    pub helper: Option<PathBuf>,

    /// A PEM file of CA certificates trusted for HTTPS besides the system's roots (a private
    /// CA; the tests' own), for programs' requests and the package indexes alike.
    #[arg(long = "egress-ca-file", value_name = "PATH")]
    pub ca_file: Option<PathBuf>,

    /// Requests one execution may make (each redirect followed counts).
    #[arg(long = "egress-max-requests", default_value_t = 100)]
    pub max_requests: u32,

    /// Body bytes one execution's requests may send, together.
    #[arg(long = "egress-max-sent-bytes", default_value_t = 10 * 1024 * 1024)]
    pub max_sent_bytes: usize,

    /// Body bytes one execution's requests may receive, together (a response past what is left
    /// fails in the program).
    #[arg(long = "egress-max-received-bytes", default_value_t = 10 * 1024 * 1024)]
    pub max_received_bytes: usize,

    /// How long one request may take, redirects included, in milliseconds (never past the
    /// program's own time limit).
    #[arg(long = "egress-timeout-ms", default_value_t = 30_000)]
    pub timeout_ms: u64,

    /// Redirects one request may follow (each to an allowed destination).
    #[arg(long = "egress-max-redirects", default_value_t = 5)]
    pub max_redirects: u32,

    /// Outbound requests in flight at once, across the daemon; more wait.
    #[arg(long = "egress-max-concurrent", default_value_t = 32)]
    pub max_concurrent: usize,
}

impl EgressOptions {
    /// The egress these options (and `policy_rules`, the policy file's) describe; None when
    /// they allow nothing. `env` reads the daemon's environment.
    pub fn parts(
        &self,
        policy_rules: Vec<Rule>,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Option<EgressParts>, String> {
        let mut rules = self
            .allow
            .iter()
            .map(|text| Rule::parse(text).map_err(|e| format!("--egress-allow {e}")))
            .collect::<Result<Vec<_>, _>>()?;
        rules.extend(policy_rules);
        rules.sort();
        rules.dedup();
        let secrets = self
            .secrets
            .iter()
            .enumerate()
            .map(|(i, text)| {
                Secret::parse(text, env)
                    .map_err(|e| format!("--egress-secret (the {}.): {e}", i + 1))
            })
            .collect::<Result<Vec<_>, _>>()?;
        if rules.is_empty() {
            // The CA file also serves the package indexes (`--package-index`).
            if !secrets.is_empty() {
                return Err(
                    "--egress-secret needs a destination to allow (--egress-allow, or \
                     `network` in the policy file)"
                        .to_owned(),
                );
            }
            return Ok(None);
        }
        self.check_limits()?;
        let client = self.client()?;
        Ok(Some(EgressParts {
            rules,
            secrets,
            limits: EgressLimits {
                max_requests: self.max_requests,
                max_sent_bytes: self.max_sent_bytes,
                max_received_bytes: self.max_received_bytes,
                request_timeout: Duration::from_millis(self.timeout_ms),
                max_redirects: self.max_redirects,
            },
            max_concurrent: self.max_concurrent,
            client,
        }))
    }

    fn check_limits(&self) -> Result<(), String> {
        let zero = [
            ("--egress-max-requests", self.max_requests == 0),
            ("--egress-max-received-bytes", self.max_received_bytes == 0),
            ("--egress-timeout-ms", self.timeout_ms == 0),
            ("--egress-max-concurrent", self.max_concurrent == 0),
        ];
        match zero.iter().find(|(_, is_zero)| *is_zero) {
            Some((option, _)) => Err(format!("{option} must be above 0")),
            None => Ok(()),
        }
    }

    /// The client programs' requests and the package indexes are fetched with.
    pub fn client(&self) -> Result<Client, String> {
        let network = match &self.helper {
            Some(path) => Network::Helper(Helper::new(path.clone())),
            None => Network::Direct,
        };
        Ok(Client::new(self.tls()?, network))
    }

    /// The TLS client configuration: the system's roots and the CA file's, HTTP/1.1.
    pub fn tls(&self) -> Result<Arc<rustls::ClientConfig>, String> {
        let mut roots = RootCertStore::empty();
        let native = rustls_native_certs::load_native_certs();
        for e in &native.errors {
            warn!("reading the system's CA certificates: {e}");
        }
        let (added, _) = roots.add_parsable_certificates(native.certs);
        if let Some(path) = &self.ca_file {
            let certs = CertificateDer::pem_file_iter(path)
                .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
                .map_err(|e| format!("--egress-ca-file {}: {e}", path.display()))?;
            if certs.is_empty() {
                return Err(format!(
                    "--egress-ca-file {}: no certificate in it",
                    path.display()
                ));
            }
            for cert in certs {
                roots
                    .add(cert)
                    .map_err(|e| format!("--egress-ca-file {}: {e}", path.display()))?;
            }
        }
        if roots.is_empty() {
            warn!(
                "no CA certificate to trust: every https:// request will fail (--egress-ca-file)"
            );
        }
        info!(system_roots = added, "egress: TLS roots loaded");
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS: {e}"))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Arc::new(config))
    }
}

/// The rules of the policy file's (or a request's) `network.allow`; else why not, naming
/// the rule.
pub fn rules_of(allow: &[hyperlightd_api::AllowRule]) -> Result<Vec<Rule>, String> {
    allow
        .iter()
        .enumerate()
        .map(|(i, rule)| Rule::from_api(rule).map_err(|e| format!("network.allow[{i}]: {e}")))
        .collect()
}
