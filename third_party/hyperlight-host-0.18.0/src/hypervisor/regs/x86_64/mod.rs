// SPDX-License-Identifier: Apache-2.0
// Copyright 2025 The Hyperlight Authors.

mod debug_regs;
mod fpu;
mod msrs;
mod special_regs;
mod standard_regs;

pub(crate) use debug_regs::*;
pub(crate) use fpu::*;
pub(crate) use msrs::*;
pub(crate) use special_regs::*;
pub(crate) use standard_regs::*;

#[cfg(target_os = "windows")]
pub(crate) use super::FromWhpRegisterError;
