//! The limits requests are granted: what a request may ask for, and what it gets when it asks
//! for nothing.

use std::time::Duration;

use crate::job::FileLimits;
use crate::job::tools::ToolLimits;

/// Per-request limits, checked once at startup.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Time limit of a request that names none.
    pub default_timeout: Duration,
    /// Highest time limit a request may ask for.
    pub max_timeout: Duration,
    /// Largest request body.
    pub max_body_bytes: usize,
    /// Largest program.
    pub max_code_bytes: usize,
    /// Cap on stdout plus stderr of one execution.
    pub max_output_bytes: usize,
    /// Largest result returned.
    pub max_result_bytes: usize,
    /// How long a request's body may take to arrive, from the end of its head.
    pub body_read_timeout: Duration,
    /// What a working directory may hold.
    pub files: FileLimits,
    /// What a request's tool calls may take.
    pub tools: ToolGrants,
}

/// The limits of tool calls: the daemon's maximum, and the call timeout of a request that
/// names none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ToolGrants {
    pub default_call_timeout: Duration,
    pub max: ToolLimits,
}

/// The daemon's default tool limits (`--tool-timeout-ms` and the `--max-tool-*` flags).
pub mod tool_defaults {
    pub const CALL_TIMEOUT_MS: u64 = 30_000;
    pub const MAX_CALL_TIMEOUT_MS: u64 = 300_000;
    pub const MAX_CALLS: u32 = 1000;
    pub const MAX_BYTES: usize = 1024 * 1024;
    pub const WALL_CLOCK_MS: u64 = 900_000;
}

impl Default for ToolGrants {
    fn default() -> Self {
        use tool_defaults::*;
        ToolGrants {
            default_call_timeout: Duration::from_millis(CALL_TIMEOUT_MS),
            max: ToolLimits {
                call_timeout: Duration::from_millis(MAX_CALL_TIMEOUT_MS),
                max_calls: MAX_CALLS,
                max_bytes: MAX_BYTES,
                wall_clock: Duration::from_millis(WALL_CLOCK_MS),
            },
        }
    }
}

impl ToolGrants {
    /// The limits of a request that asks for a call timeout of `requested_ms`: the default
    /// when absent, capped at the maximum.
    pub fn for_request(&self, requested_ms: Option<u64>) -> ToolLimits {
        let call_timeout = requested_ms
            .map(Duration::from_millis)
            .unwrap_or(self.default_call_timeout)
            .min(self.max.call_timeout);
        ToolLimits {
            call_timeout,
            ..self.max
        }
    }
}

impl Limits {
    /// The time limit for a request that asks for `requested_ms`: the default when absent,
    /// capped at the maximum.
    pub fn timeout_for(&self, requested_ms: Option<u64>) -> Duration {
        requested_ms
            .map(Duration::from_millis)
            .unwrap_or(self.default_timeout)
            .min(self.max_timeout)
    }

    /// The output cap for a request that asks for `requested`: the maximum when absent, and
    /// never above it.
    pub fn output_for(&self, requested: Option<usize>) -> usize {
        requested
            .unwrap_or(self.max_output_bytes)
            .min(self.max_output_bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_timeout_is_the_default_when_absent_and_never_past_the_maximum() {
        let grants = ToolGrants {
            default_call_timeout: Duration::from_millis(1_000),
            max: ToolLimits {
                call_timeout: Duration::from_millis(5_000),
                max_calls: 3,
                max_bytes: 100,
                wall_clock: Duration::from_secs(10),
            },
        };
        let asked = |ms| grants.for_request(ms).call_timeout;
        assert_eq!(asked(None), Duration::from_millis(1_000));
        assert_eq!(asked(Some(2_000)), Duration::from_millis(2_000));
        assert_eq!(asked(Some(60_000)), Duration::from_millis(5_000));
        // The other limits are the daemon's, whatever the request asks.
        let limits = grants.for_request(Some(60_000));
        assert_eq!((limits.max_calls, limits.max_bytes), (3, 100));
        assert_eq!(limits.wall_clock, Duration::from_secs(10));
    }
}
