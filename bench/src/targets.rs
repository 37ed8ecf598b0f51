//! The targets: each a ratio measured within one part (one VM boot), with its bound.

use std::path::Path;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

/// One target: a ratio, its bound, and what it compares.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Target {
    /// Short name: "R1", "R2 Python", ...
    pub name: String,
    /// What is divided by what, for the table.
    pub what: String,
    pub value: f64,
    pub bound: f64,
    /// The value must be at most the bound (else at least).
    pub at_most: bool,
}

impl Target {
    pub fn at_most(name: &str, what: &str, value: f64, bound: f64) -> Target {
        Target {
            name: name.to_owned(),
            what: what.to_owned(),
            value,
            bound,
            at_most: true,
        }
    }

    pub fn at_least(name: &str, what: &str, value: f64, bound: f64) -> Target {
        Target {
            at_most: false,
            ..Target::at_most(name, what, value, bound)
        }
    }

    /// A NaN (a figure that could not be taken) meets nothing.
    pub fn met(&self) -> bool {
        if self.at_most {
            self.value <= self.bound
        } else {
            self.value >= self.bound
        }
    }

    pub fn print(&self) {
        // 1.8 as 1.8, a bound computed from a measure (R3's 95 % of a ceiling) to 3 places.
        let bound = format!("{:.3}", self.bound);
        let bound = bound.trim_end_matches('0').trim_end_matches('.');
        println!(
            "{:<12} {:<66} {:>9.3}  {} {:<7} {}",
            self.name,
            self.what,
            self.value,
            if self.at_most { "<=" } else { ">=" },
            bound,
            if self.met() { "met" } else { "NOT met" }
        );
    }
}

/// What one part measured: its figures, and the targets they decide.
#[derive(Debug, Serialize, Deserialize)]
pub struct PartReport {
    pub part: String,
    pub figures: serde_json::Value,
    pub targets: Vec<Target>,
}

impl PartReport {
    pub fn print_targets(&self) {
        if !self.targets.is_empty() {
            println!();
        }
        for target in &self.targets {
            target.print();
        }
    }
}

/// Prints every target of the part reports in `dir` (written by earlier runs, one per part),
/// in the parts' order, then how many were met.
pub fn summary(dir: &Path, parts: &[String]) -> Result<()> {
    println!("\n=== Targets (each ratio measured within one part, in one VM boot) ===");
    let (mut met, mut all) = (0, 0);
    for part in parts {
        let path = dir.join(format!("{part}.json"));
        let Ok(text) = std::fs::read_to_string(&path) else {
            println!("{part:<12} NOT RUN (no {})", path.display());
            continue;
        };
        let report: PartReport =
            serde_json::from_str(&text).with_context(|| format!("reading {}", path.display()))?;
        for target in &report.targets {
            target.print();
            all += 1;
            met += usize::from(target.met());
        }
    }
    println!("{met} of {all} targets met");
    Ok(())
}
