//! The registry the daemon's metrics are registered in, which also keeps what each is (name,
//! type, help, labels): the metric reference (docs/reference/metrics.md) is rendered from it.

use std::sync::{Arc, Mutex, PoisonError};

use prometheus::core::Collector;
use prometheus::proto::MetricFamily;
use prometheus::{
    CounterVec, Histogram, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Registry,
};

/// A metric as the reference describes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetricDoc {
    pub name: String,
    /// `counter`, `gauge` or `histogram`.
    pub kind: &'static str,
    pub help: String,
    pub labels: Vec<String>,
}

/// What kind of metric a collector is, in Prometheus' words.
pub(super) trait Kind {
    const KIND: &'static str;
}

impl Kind for IntCounterVec {
    const KIND: &'static str = "counter";
}
impl Kind for IntCounter {
    const KIND: &'static str = "counter";
}
impl Kind for CounterVec {
    const KIND: &'static str = "counter";
}
impl Kind for IntGauge {
    const KIND: &'static str = "gauge";
}
impl Kind for IntGaugeVec {
    const KIND: &'static str = "gauge";
}
impl Kind for Histogram {
    const KIND: &'static str = "histogram";
}
impl Kind for HistogramVec {
    const KIND: &'static str = "histogram";
}

/// A registry, and the description of everything registered in it.
#[derive(Debug, Clone, Default)]
pub(super) struct Catalog {
    registry: Registry,
    docs: Arc<Mutex<Vec<MetricDoc>>>,
}

impl Catalog {
    /// Registers `collector`, and notes what it is.
    pub(super) fn register<C>(&self, collector: &C) -> Result<(), prometheus::Error>
    where
        C: Collector + Kind + Clone + 'static,
    {
        let docs: Vec<MetricDoc> = collector
            .desc()
            .into_iter()
            .map(|desc| MetricDoc {
                name: desc.fq_name.clone(),
                kind: C::KIND,
                help: desc.help.clone(),
                labels: desc.variable_labels.clone(),
            })
            .collect();
        self.registry.register(Box::new(collector.clone()))?;
        self.docs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend(docs);
        Ok(())
    }

    pub(super) fn gather(&self) -> Vec<MetricFamily> {
        self.registry.gather()
    }

    /// Every metric registered, by name.
    pub(super) fn docs(&self) -> Vec<MetricDoc> {
        let mut docs = self
            .docs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        docs.sort_by(|a, b| a.name.cmp(&b.name));
        docs
    }
}
