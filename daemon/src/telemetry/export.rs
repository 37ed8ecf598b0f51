//! Sending spans: OTLP over HTTP (protobuf) to a collector, through OpenTelemetry's batch span
//! processor, with the HTTP client the caller gives (the daemon's egress client, which reaches
//! the network the daemon's way: its own sockets on its egress threads, or the egress helper).
//!
//! Where spans go, in the order the OpenTelemetry SDKs read it: `--otlp-endpoint URL` (the
//! collector's base URL; spans go to `URL/v1/traces`), else `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`
//! (used as it is), else `OTEL_EXPORTER_OTLP_ENDPOINT` (`/v1/traces` added); none of them: off.
//! `OTEL_SDK_DISABLED=true` or `OTEL_TRACES_EXPORTER=none` turn it off whatever is set. The
//! rest comes from the standard variables too: headers (`OTEL_EXPORTER_OTLP_[TRACES_]HEADERS`),
//! the time limit of one export (`..._TIMEOUT`, 10 s by default), the sampler
//! (`OTEL_TRACES_SAMPLER`, parent-based always-on by default), the batch
//! (`OTEL_BSP_*`), the resource (`OTEL_SERVICE_NAME`, `OTEL_RESOURCE_ATTRIBUTES`; the service is
//! `hyperlightd` unless they name it).

use std::time::Duration;

use opentelemetry::KeyValue;
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_http::HttpClient;
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::resource::{EnvResourceDetector, TelemetryResourceDetector};
use opentelemetry_sdk::trace::SdkTracerProvider;

use super::Tracer;

/// The command line's settings.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct TraceOptions {
    /// Send traces over OTLP (HTTP, protobuf) to the collector at this base URL (spans go to
    /// URL/v1/traces), e.g. http://localhost:4318. Without it, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT
    /// or OTEL_EXPORTER_OTLP_ENDPOINT turn traces on, as in the OpenTelemetry SDKs; headers,
    /// timeout, sampler, batch and resource come from the standard OTEL_* variables. Requests
    /// leave the way programs' do (through --egress-helper when it is set). Off by default.
    #[arg(long = "otlp-endpoint", value_name = "URL")]
    pub endpoint: Option<String>,
}

/// Why traces cannot be sent as configured.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("{source_name} {url:?} is not an http:// or https:// URL with a host")]
    Endpoint {
        source_name: &'static str,
        url: String,
    },
    #[error(
        "{0} asks for OTLP over {1:?}; hyperlightd sends OTLP over HTTP with protobuf only \
         (http/protobuf)"
    )]
    Protocol(&'static str, String),
    #[error("the OTLP exporter: {0}")]
    Exporter(String),
}

/// Where spans are sent, once the options and the environment are read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// The URL spans are posted to.
    pub url: String,
    /// What named it (for the log line and errors).
    pub source_name: &'static str,
}

/// Where spans go, from the options and the environment (`env` reads a variable); None: off.
pub fn endpoint(
    options: &TraceOptions,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Option<Endpoint>, TraceError> {
    let set = |name: &str| env(name).filter(|value| !value.trim().is_empty());
    let disabled = set("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true"))
        || set("OTEL_TRACES_EXPORTER").is_some_and(|v| v.trim().eq_ignore_ascii_case("none"));
    if disabled {
        return Ok(None);
    }
    let found = if let Some(base) = &options.endpoint {
        Some((traces_url(base), "--otlp-endpoint"))
    } else if let Some(url) = set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") {
        Some((url, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"))
    } else {
        set("OTEL_EXPORTER_OTLP_ENDPOINT")
            .map(|base| (traces_url(&base), "OTEL_EXPORTER_OTLP_ENDPOINT"))
    };
    let Some((url, source_name)) = found else {
        return Ok(None);
    };
    for name in [
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
        "OTEL_EXPORTER_OTLP_PROTOCOL",
    ] {
        if let Some(protocol) = set(name) {
            if protocol.trim() != "http/protobuf" {
                return Err(TraceError::Protocol(
                    if name.contains("TRACES") {
                        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
                    } else {
                        "OTEL_EXPORTER_OTLP_PROTOCOL"
                    },
                    protocol,
                ));
            }
            break;
        }
    }
    let valid = url
        .parse::<hyper::Uri>()
        .ok()
        .filter(|uri| matches!(uri.scheme_str(), Some("http" | "https")))
        .is_some_and(|uri| uri.host().is_some_and(|host| !host.is_empty()));
    if !valid {
        return Err(TraceError::Endpoint { source_name, url });
    }
    Ok(Some(Endpoint { url, source_name }))
}

/// A base URL's traces path, as the OTLP exporter specification builds it.
fn traces_url(base: &str) -> String {
    format!("{}/v1/traces", base.trim().trim_end_matches('/'))
}

/// How long one export may take: `OTEL_EXPORTER_OTLP_TRACES_TIMEOUT`, else
/// `OTEL_EXPORTER_OTLP_TIMEOUT` (milliseconds), else 10 s.
pub fn export_timeout(env: &dyn Fn(&str) -> Option<String>) -> Duration {
    [
        "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
        "OTEL_EXPORTER_OTLP_TIMEOUT",
    ]
    .into_iter()
    .find_map(|name| env(name)?.trim().parse::<u64>().ok())
    .map_or(Duration::from_secs(10), Duration::from_millis)
}

/// Sends spans while it lives; [`Exporter::shutdown`] sends what is left.
#[derive(Debug)]
pub struct Exporter {
    provider: SdkTracerProvider,
}

impl Exporter {
    /// Starts the batch processor (a thread of its own, which inherits the calling thread's
    /// system call filter: call it on a thread of the egress kind) sending to `endpoint` with
    /// `client`.
    pub fn start(
        endpoint: &Endpoint,
        client: impl HttpClient + 'static,
    ) -> Result<Self, TraceError> {
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_protocol(Protocol::HttpBinary)
            .with_http_client(client)
            .with_endpoint(endpoint.url.clone())
            .build()
            .map_err(|e| TraceError::Exporter(e.to_string()))?;
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(resource())
            .build();
        Ok(Exporter { provider })
    }

    /// What records the daemon's spans.
    pub fn tracer(&self) -> Tracer {
        let scope = opentelemetry::InstrumentationScope::builder("hyperlightd")
            .with_version(env!("CARGO_PKG_VERSION"))
            .build();
        Tracer::new(self.provider.tracer_with_scope(scope))
    }

    /// Sends the spans not sent yet, within `limit`.
    pub fn shutdown(&self, limit: Duration) -> Result<(), String> {
        self.provider
            .shutdown_with_timeout(limit)
            .map_err(|e| e.to_string())
    }
}

/// The daemon as OpenTelemetry's resource conventions describe it: `service.name`
/// (hyperlightd), `service.version`, `process.pid`, `host.name`, the SDK's `telemetry.sdk.*`;
/// then `OTEL_RESOURCE_ATTRIBUTES`, then `OTEL_SERVICE_NAME`, each overriding what came before.
fn resource() -> Resource {
    let mut builder = Resource::builder_empty()
        .with_service_name("hyperlightd")
        .with_attributes([
            KeyValue::new("service.version", env!("CARGO_PKG_VERSION")),
            KeyValue::new("process.pid", i64::from(std::process::id())),
        ]);
    if let Ok(host) = nix::unistd::gethostname() {
        builder = builder.with_attribute(KeyValue::new(
            "host.name",
            host.to_string_lossy().into_owned(),
        ));
    }
    builder = builder.with_detectors(&[
        Box::new(TelemetryResourceDetector),
        Box::new(EnvResourceDetector::new()),
    ]);
    if let Some(name) = std::env::var("OTEL_SERVICE_NAME")
        .ok()
        .filter(|name| !name.trim().is_empty())
    {
        builder = builder.with_service_name(name);
    }
    builder.build()
}
