//! Traces: each request, and where its time went, as OpenTelemetry spans, sent over OTLP when
//! `--otlp-endpoint` (or the standard `OTEL_EXPORTER_OTLP_*` variables) asks for them, and joined
//! to the caller's own trace when the request carries a W3C `traceparent`.
//!
//! # Design
//! A [`Trace`] is a place in a trace: the span that new spans go under (or none), and the
//! tracer that records them (or none: tracing is off). Every layer that has a step worth a span
//! gets one by value (in a `Call`, a `Job`, a session's exec) and makes its own spans under it,
//! on whichever thread runs the step: the API's runtime, a pool's worker, the egress runtime.
//! Nothing reads a thread-local current span, so a job handed from thread to thread keeps its
//! place.
//!
//! With tracing off every method is a branch on `None`: no span is built, no attribute list is
//! made (attributes are passed as closures), nothing is allocated. A request whose
//! `traceparent` names a trace still has that trace's id while off (for the audit line and the
//! response's `traceresponse` header), and makes no span.
//!
//! A span made with [`Trace::span`] ends when its [`Span`] is dropped; one made with
//! [`Trace::child`] when the last clone of its `Trace` is (the request's span: the handler and,
//! for a streamed answer, the task that writes it both hold one).
//!
//! Attributes follow OpenTelemetry's semantic conventions where they have one (HTTP server and
//! client spans, `error.type`, `gen_ai.tool.name`); the daemon's own are under `hyperlightd.`.
//! No span carries a program's code, arguments, output, results or files, a request's headers
//! or query, or a secret.

pub mod export;

use std::borrow::Cow;
use std::time::{Instant, SystemTime};

use opentelemetry::propagation::{Extractor, TextMapPropagator};
use opentelemetry::trace::{
    Link, Span as _, SpanContext, SpanKind, Status, TraceContextExt, Tracer as _,
};
use opentelemetry::{Context, KeyValue};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracer;

pub use opentelemetry::KeyValue as Attribute;
pub use opentelemetry::trace::SpanKind as Kind;

/// The response header that names the request's trace and the daemon's span in it, as the W3C
/// Trace Context's `traceparent` does a parent (Trace Context Level 2's `traceresponse`).
pub const TRACERESPONSE: &str = "traceresponse";

/// Records spans, or nothing (tracing off: [`Tracer::default`]).
#[derive(Clone, Default)]
pub struct Tracer(Option<SdkTracer>);

impl std::fmt::Debug for Tracer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "Tracer(on)"
        } else {
            "Tracer(off)"
        })
    }
}

impl Tracer {
    pub(crate) fn new(tracer: SdkTracer) -> Self {
        Tracer(Some(tracer))
    }

    /// Whether spans are recorded.
    pub fn is_on(&self) -> bool {
        self.0.is_some()
    }

    /// The place for a request's spans: under the caller's span when `parent` carries one (a
    /// `traceparent`, read by [`remote_parent`]), else at the root of a new trace.
    pub fn under(&self, parent: Option<Context>) -> Trace {
        Trace {
            tracer: self.0.clone(),
            cx: parent.unwrap_or_default(),
        }
    }

    /// The place for spans of the daemon's own work, which no request asked for (a template
    /// built at start): each at the root of a trace of its own.
    pub fn root(&self) -> Trace {
        self.under(None)
    }
}

/// The caller's span, from a request's `traceparent` (and `tracestate`), if it names a valid
/// one; whatever is malformed there is ignored, as the W3C Trace Context says.
pub fn remote_parent(headers: &hyper::HeaderMap) -> Option<Context> {
    headers.get("traceparent")?;
    let cx = TraceContextPropagator::new().extract(&Headers(headers));
    cx.span().span_context().is_valid().then_some(cx)
}

struct Headers<'a>(&'a hyper::HeaderMap);

impl Extractor for Headers<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|value| value.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0
            .keys()
            .map(hyper::header::HeaderName::as_str)
            .collect()
    }
}

/// A place in a trace: where new spans go, and what records them. Cheap to clone.
#[derive(Clone, Default)]
pub struct Trace {
    tracer: Option<SdkTracer>,
    cx: Context,
}

impl std::fmt::Debug for Trace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Trace")
            .field("on", &self.tracer.is_some())
            .field("trace_id", &self.trace_id())
            .finish()
    }
}

impl Trace {
    /// Nowhere: records nothing, names no trace.
    pub fn off() -> Self {
        Trace::default()
    }

    /// Whether spans made here are recorded.
    pub fn is_on(&self) -> bool {
        self.tracer.is_some()
    }

    fn span_context(&self) -> SpanContext {
        self.cx.span().span_context().clone()
    }

    /// The id of the trace this is in (32 hex digits), if it is in one.
    pub fn trace_id(&self) -> Option<String> {
        let context = self.span_context();
        context.is_valid().then(|| context.trace_id().to_string())
    }

    /// The `traceresponse` header's value: the trace and the span here, if any.
    pub fn traceresponse(&self) -> Option<String> {
        let context = self.span_context();
        context.is_valid().then(|| {
            format!(
                "00-{}-{}-{:02x}",
                context.trace_id(),
                context.span_id(),
                context.trace_flags().to_u8()
            )
        })
    }

    /// A span named `name` under this place, which ends when the last clone of the returned
    /// place is dropped. Off, the same place (no span).
    pub fn child(
        &self,
        name: impl Into<Cow<'static, str>>,
        kind: SpanKind,
        attributes: impl FnOnce() -> Vec<KeyValue>,
    ) -> Trace {
        let Some(tracer) = &self.tracer else {
            return self.clone();
        };
        let span = tracer
            .span_builder(name)
            .with_kind(kind)
            .with_attributes(attributes())
            .start_with_context(tracer, &self.cx);
        Trace {
            tracer: Some(tracer.clone()),
            cx: self.cx.with_span(span),
        }
    }

    /// The same place, without keeping its span open: for work that may outlive the request
    /// (a session's save, a sandbox's restore), whose spans are still its children or links.
    pub fn detached(&self) -> Trace {
        if self.tracer.is_none() && !self.cx.has_active_span() {
            return Trace::off();
        }
        Trace {
            tracer: self.tracer.clone(),
            cx: Context::new().with_remote_span_context(self.span_context()),
        }
    }

    /// A span named `name` under this place from `started` until now, already over: a wait
    /// measured once it ended (the queue's).
    pub fn record(
        &self,
        name: impl Into<Cow<'static, str>>,
        started: Instant,
        attributes: impl FnOnce() -> Vec<KeyValue>,
    ) {
        let Some(tracer) = &self.tracer else {
            return;
        };
        let start = SystemTime::now()
            .checked_sub(started.elapsed())
            .unwrap_or_else(SystemTime::now);
        tracer
            .span_builder(name)
            .with_kind(SpanKind::Internal)
            .with_start_time(start)
            .with_attributes(attributes())
            .start_with_context(tracer, &self.cx)
            .end();
    }

    /// A span named `name` under this place, which ends when the returned [`Span`] is dropped.
    pub fn span(
        &self,
        name: impl Into<Cow<'static, str>>,
        attributes: impl FnOnce() -> Vec<KeyValue>,
    ) -> Span {
        self.span_of(name, SpanKind::Internal, attributes)
    }

    /// [`Trace::span`] of another kind than internal (a client's).
    pub fn span_of(
        &self,
        name: impl Into<Cow<'static, str>>,
        kind: SpanKind,
        attributes: impl FnOnce() -> Vec<KeyValue>,
    ) -> Span {
        if self.tracer.is_none() {
            // Off: dropping it must not end the span this place is under.
            return Span(Trace::off());
        }
        Span(self.child(name, kind, attributes))
    }

    /// A span named `name` at the root of a trace of its own, linked to the span here: for work
    /// that follows an answer rather than making it (a sandbox's restore after a request).
    pub fn linked(
        &self,
        name: impl Into<Cow<'static, str>>,
        attributes: impl FnOnce() -> Vec<KeyValue>,
    ) -> Span {
        let Some(tracer) = &self.tracer else {
            return Span(Trace::off());
        };
        let context = self.span_context();
        let links = if context.is_valid() {
            vec![Link::with_context(context)]
        } else {
            Vec::new()
        };
        let span = tracer
            .span_builder(name)
            .with_kind(SpanKind::Internal)
            .with_attributes(attributes())
            .with_links(links)
            .start_with_context(tracer, &Context::new());
        Span(Trace {
            tracer: Some(tracer.clone()),
            cx: Context::new().with_span(span),
        })
    }

    /// Adds attributes to the span here.
    pub fn set(&self, attributes: impl FnOnce() -> Vec<KeyValue>) {
        if self.tracer.is_some() {
            self.cx.span().set_attributes(attributes());
        }
    }

    /// Marks the span here as failed: its status, and `error.type` = `kind` (a refusal's or an
    /// outcome's kind, never a message that might quote a program).
    pub fn fail(&self, kind: impl Into<Cow<'static, str>>) {
        if self.tracer.is_some() {
            let kind = kind.into();
            let span = self.cx.span();
            span.set_attribute(KeyValue::new("error.type", kind.clone()));
            span.set_status(Status::error(kind));
        }
    }
}

/// A span that ends when this is dropped (or [`Span::end`]ed); spans made under it through
/// [`Span::trace`] are its children.
#[derive(Debug, Default)]
pub struct Span(Trace);

impl Span {
    /// The place under this span.
    pub fn trace(&self) -> &Trace {
        &self.0
    }

    /// Ends the span now.
    pub fn end(self) {}
}

impl std::ops::Deref for Span {
    type Target = Trace;

    fn deref(&self) -> &Trace {
        &self.0
    }
}

impl Drop for Span {
    fn drop(&mut self) {
        if self.0.tracer.is_some() {
            self.0.cx.span().end();
        }
    }
}

#[cfg(test)]
mod tests;
