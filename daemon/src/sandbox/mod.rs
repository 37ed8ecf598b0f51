//! The Hyperlight executor: a pool of warm micro-VMs per language, behind the [`Executor`] trait.
//!
//! - [`guest`]: what a language's guest provides, the runner protocol, output capture;
//! - [`javascript`]: the QuickJS guest from hyperlight-js;
//! - [`pool`]: worker threads, the bounded queue, time limits, restore after each request.

pub mod guest;
pub mod javascript;
pub mod pool;

use std::collections::BTreeMap;
use std::sync::Arc;

use hyperlight_host::HyperlightError;
use hyperlightd_api::Language;

use self::guest::{GuestFactory, GuestSizes};
use self::javascript::JavascriptFactory;
use self::pool::{Pool, PoolConfig};
use crate::executor::{ExecError, Executor, ExecutorHealth, Job, Outcome};

/// Settings every pool shares.
#[derive(Debug, Clone, Copy)]
pub struct SandboxSettings {
    /// What each guest is built with.
    pub sizes: GuestSizes,
    /// Jobs that may wait per language.
    pub queue_depth: usize,
    /// Cap on one execution's output.
    pub max_output_bytes: usize,
}

/// The factory for a language's sandboxes.
fn factory(language: Language, settings: &SandboxSettings) -> Arc<dyn GuestFactory> {
    match language {
        Language::Javascript => Arc::new(JavascriptFactory::new(settings.sizes)),
    }
}

/// Runs jobs in warm Hyperlight sandboxes.
#[derive(Debug)]
pub struct HyperlightExecutor {
    hypervisor: String,
    pools: BTreeMap<Language, Pool>,
}

impl HyperlightExecutor {
    /// Builds every pool and returns once every sandbox is warm. `hypervisor` is what health
    /// reports. The first sandbox that cannot be built fails the start: that is also the probe
    /// that tells whether this host's hypervisor can run Hyperlight guests at all.
    pub fn start(
        hypervisor: String,
        sizes: &BTreeMap<Language, usize>,
        settings: SandboxSettings,
        runtime: tokio::runtime::Handle,
    ) -> Result<Self, HyperlightError> {
        let mut pools = BTreeMap::new();
        for (&language, &size) in sizes {
            let config = PoolConfig {
                language,
                size,
                queue_depth: settings.queue_depth,
                max_output_bytes: settings.max_output_bytes,
                factory: factory(language, &settings),
            };
            pools.insert(language, Pool::start(config, runtime.clone())?);
        }
        Ok(HyperlightExecutor { hypervisor, pools })
    }
}

impl Executor for HyperlightExecutor {
    async fn exec(&self, job: Job) -> Result<Outcome, ExecError> {
        let pool = self
            .pools
            .get(&job.language)
            .ok_or(ExecError::LanguageNotServed(job.language))?;
        pool.submit(job).await
    }

    fn health(&self) -> ExecutorHealth {
        ExecutorHealth {
            hypervisor: self.hypervisor.clone(),
            sandboxes: self
                .pools
                .iter()
                .map(|(&language, pool)| (language, pool.counts()))
                .collect(),
        }
    }
}
