//! Environment variables for programs: what an exec asks for, and what a session keeps for
//! every exec of its own (on disk too). The runners set them in the guest's environment
//! (Python's `os.environ`, JavaScript's `process.env`) before the program runs and put back
//! afterwards what they replaced, unless the program changed it meanwhile: an exec's own
//! variables do not outlive it in a session's state.
//!
//! Guests run no processes, so nothing but the program reads them; the rules are a shell's
//! portable names, and bounds, since every exec's event carries them.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// At most this many variables.
pub const MAX_VARIABLES: usize = 128;
/// A name's longest, in bytes.
pub const MAX_NAME_BYTES: usize = 256;
/// All names and values together, in bytes.
pub const MAX_TOTAL_BYTES: usize = 64 * 1024;

/// Environment variables, checked: made only by [`Env::new`], read from disk included.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(
    try_from = "BTreeMap<String, String>",
    into = "BTreeMap<String, String>"
)]
pub struct Env(BTreeMap<String, String>);

impl TryFrom<BTreeMap<String, String>> for Env {
    type Error = String;

    fn try_from(vars: BTreeMap<String, String>) -> Result<Env, String> {
        Env::new(vars)
    }
}

impl From<Env> for BTreeMap<String, String> {
    fn from(env: Env) -> Self {
        env.0
    }
}

impl Env {
    /// No variables.
    pub const EMPTY: Env = Env(BTreeMap::new());

    /// `vars` if they follow the rules; otherwise which one does not, and why.
    pub fn new(vars: BTreeMap<String, String>) -> Result<Env, String> {
        if vars.len() > MAX_VARIABLES {
            return Err(format!(
                "env: {} variables; at most {MAX_VARIABLES} are allowed",
                vars.len()
            ));
        }
        let mut total = 0;
        for (name, value) in &vars {
            check_name(name)?;
            if value.contains('\0') {
                return Err(format!("env: the value of {name} contains NUL"));
            }
            total += name.len() + value.len();
        }
        Env::fits(total)?;
        Ok(Env(vars))
    }

    /// These variables with `over`'s added, `over`'s winning where both name one.
    pub fn overlaid(&self, over: &Env) -> Result<Env, String> {
        if over.0.is_empty() {
            return Ok(self.clone());
        }
        let mut vars = self.0.clone();
        vars.extend(over.0.iter().map(|(n, v)| (n.clone(), v.clone())));
        if vars.len() > MAX_VARIABLES {
            return Err(format!(
                "env: with the session's, {} variables; at most {MAX_VARIABLES} are allowed",
                vars.len()
            ));
        }
        Env::fits(vars.iter().map(|(n, v)| n.len() + v.len()).sum())?;
        Ok(Env(vars))
    }

    fn fits(total: usize) -> Result<(), String> {
        if total > MAX_TOTAL_BYTES {
            return Err(format!(
                "env: the names and values come to {total} bytes; at most {MAX_TOTAL_BYTES} are \
                 allowed"
            ));
        }
        Ok(())
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn as_map(&self) -> &BTreeMap<String, String> {
        &self.0
    }
}

/// Letters, digits and `_`, not beginning with a digit: a name every shell and libc takes.
fn check_name(name: &str) -> Result<(), String> {
    let shown: String = name.chars().take(64).collect();
    if name.is_empty() {
        return Err("env: a variable's name is empty".to_owned());
    }
    if name.len() > MAX_NAME_BYTES {
        return Err(format!(
            "env: the name {shown:?}... is {} bytes long; at most {MAX_NAME_BYTES} are allowed",
            name.len()
        ));
    }
    let first_ok = name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_');
    if !first_ok || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return Err(format!(
            "env: the name {shown:?} must be letters, digits and '_', not beginning with a digit"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Result<Env, String> {
        Env::new(
            pairs
                .iter()
                .map(|(n, v)| ((*n).to_owned(), (*v).to_owned()))
                .collect(),
        )
    }

    #[test]
    fn names_are_portable_and_values_have_no_nul() {
        assert!(env(&[("API_URL", "https://x"), ("_a1", ""), ("V", "é ü\n=")]).is_ok());
        for bad in ["", "1A", "A-B", "A=B", "A B", "É"] {
            let e = env(&[(bad, "v")]).unwrap_err();
            assert!(e.starts_with("env: "), "{bad:?}: {e}");
        }
        let e = env(&[("A", "x\0y")]).unwrap_err();
        assert!(e.contains("NUL") && e.contains('A'), "{e}");
        let long = "N".repeat(MAX_NAME_BYTES + 1);
        assert!(env(&[(&long, "")]).unwrap_err().contains("bytes long"));
    }

    #[test]
    fn counts_and_sizes_are_bounded() {
        let many: BTreeMap<String, String> = (0..=MAX_VARIABLES)
            .map(|i| (format!("V{i}"), String::new()))
            .collect();
        assert!(Env::new(many).unwrap_err().contains("at most 128"));
        let big = "x".repeat(MAX_TOTAL_BYTES);
        assert!(env(&[("BIG", &big)]).unwrap_err().contains("bytes"));
        let serialized = r#"{"1":"x"}"#;
        assert!(serde_json::from_str::<Env>(serialized).is_err());
    }

    #[test]
    fn an_overlay_wins_and_keeps_the_bounds() {
        let base = env(&[("A", "1"), ("B", "2")]).unwrap();
        let over = env(&[("B", "3"), ("C", "4")]).unwrap();
        let both = base.overlaid(&over).unwrap();
        let expected = env(&[("A", "1"), ("B", "3"), ("C", "4")]).unwrap();
        assert_eq!(both, expected);
        assert_eq!(base.overlaid(&Env::default()).unwrap(), base);
        let half = "x".repeat(MAX_TOTAL_BYTES / 2);
        let e = env(&[("X", &half)])
            .unwrap()
            .overlaid(&env(&[("Y", &half)]).unwrap())
            .unwrap_err();
        assert!(e.contains("bytes"), "{e}");
    }
}
