// SPDX-License-Identifier: Apache-2.0
// Copyright 2025 The Hyperlight Authors.
pub(crate) mod log_values;
