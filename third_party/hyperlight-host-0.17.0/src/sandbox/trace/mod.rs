// SPDX-License-Identifier: Apache-2.0
// Copyright 2025 The Hyperlight Authors.

/// Tracing context support for sandboxes.
mod context;
pub(crate) use context::TraceContext;

/// Tracing and profiling support for sandboxes.
#[cfg(feature = "mem_profile")]
mod mem_profile;
#[cfg(feature = "mem_profile")]
pub(crate) use mem_profile::MemTraceInfo;
