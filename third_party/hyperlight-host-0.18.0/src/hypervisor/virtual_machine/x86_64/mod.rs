// SPDX-License-Identifier: Apache-2.0
// Copyright 2025 The Hyperlight Authors.

//! x86-64 specific helpers for hardware interrupt support.
pub(crate) mod hw_interrupts;
