//! The requirements a caller names: the API's list, and the `%pip install` / `!pip install`
//! lines of a Python program (as notebooks and E2B's code interpreter take them), which are
//! taken out of the program (each replaced by an empty line, so that line numbers stay) and
//! installed before the rest of it runs.

use std::str::FromStr;

use pep508_rs::Requirement;

use super::Refusal;

/// The most requirements one install names.
pub const MAX_REQUIREMENTS: usize = 64;

/// pip's options that change nothing here, taken and ignored (those that take a value, with
/// it).
const IGNORED: &[&str] = &[
    "-q",
    "--quiet",
    "-qq",
    "-v",
    "--verbose",
    "-U",
    "--upgrade",
    "--no-cache-dir",
    "--disable-pip-version-check",
    "--no-input",
    "--user",
    "--only-binary=:all:",
    "--prefer-binary",
    "--break-system-packages",
];

/// Reads requirements (`NAME[extras]` with version specifiers and markers); else why not.
pub fn requirements(texts: &[String]) -> Result<Vec<Requirement>, Refusal> {
    if texts.is_empty() {
        return Err(Refusal::Invalid("no requirement is named".to_owned()));
    }
    if texts.len() > MAX_REQUIREMENTS {
        return Err(Refusal::Invalid(format!(
            "{} requirements: at most {MAX_REQUIREMENTS} in one install",
            texts.len()
        )));
    }
    texts
        .iter()
        .map(|text| {
            Requirement::from_str(text).map_err(|e| {
                Refusal::Invalid(format!(
                    "{text:?} is not a requirement (NAME[==VERSION]): {e}"
                ))
            })
        })
        .collect()
}

/// A program with its pip lines taken out, and what they ask to install.
#[derive(Debug, PartialEq, Eq)]
pub struct Split {
    pub code: String,
    pub requirements: Vec<String>,
}

/// Takes the `%pip install` and `!pip install` lines (at the start of a line) out of `code`;
/// None if it has none. Another pip command, or an option or argument that is not a
/// requirement from the index, is refused with what is taken.
pub fn split(code: &str) -> Result<Option<Split>, Refusal> {
    let mut requirements = Vec::new();
    let mut lines = Vec::new();
    let mut found = false;
    for line in code.split_inclusive('\n') {
        let Some(command) = pip_command(line) else {
            lines.push(line.to_owned());
            continue;
        };
        found = true;
        requirements.extend(arguments(command)?);
        lines.push(if line.ends_with('\n') { "\n" } else { "" }.to_owned());
    }
    Ok(found.then(|| Split {
        code: lines.concat(),
        requirements,
    }))
}

/// The rest of a `%pip ...` / `!pip ...` line (also `pip3`, `python -m pip`), if it is one.
fn pip_command(line: &str) -> Option<&str> {
    let rest = line
        .strip_prefix("%pip")
        .or_else(|| line.strip_prefix("!pip3"))
        .or_else(|| line.strip_prefix("!pip"))
        .or_else(|| line.strip_prefix("!python -m pip"))
        .or_else(|| line.strip_prefix("!python3 -m pip"))?;
    let rest = rest.trim_end_matches(['\n', '\r']);
    (rest.is_empty() || rest.starts_with([' ', '\t'])).then(|| rest.trim())
}

/// The requirements of one pip command line.
fn arguments(command: &str) -> Result<Vec<String>, Refusal> {
    let words = command.split_whitespace().map(unquote).collect::<Vec<_>>();
    let Some((verb, rest)) = words.split_first() else {
        return Err(Refusal::Invalid("`%pip` names no command".to_owned()));
    };
    if verb != "install" {
        return Err(Refusal::Invalid(format!(
            "`%pip {verb}`: only `%pip install NAME[==VERSION] ...` is taken here (the daemon \
             installs from its index; GET /v1/sessions/{{id}} lists what a session installed)"
        )));
    }
    let mut requirements = Vec::new();
    let mut words = rest.iter();
    while let Some(word) = words.next() {
        if IGNORED.contains(&word.as_str()) {
            continue;
        }
        if word == "--progress-bar" {
            words.next();
            continue;
        }
        if word.starts_with('-') {
            return Err(Refusal::Invalid(format!(
                "`pip install {word}` is not taken here: name packages (NAME[==VERSION]); they \
                 come from the daemon's index, as wheels"
            )));
        }
        requirements.push(word.clone());
    }
    if requirements.is_empty() {
        return Err(Refusal::Invalid(
            "`%pip install` names no package".to_owned(),
        ));
    }
    Ok(requirements)
}

fn unquote(word: &str) -> String {
    let quoted = word.len() >= 2
        && (word.starts_with('"') && word.ends_with('"')
            || word.starts_with('\'') && word.ends_with('\''));
    match quoted {
        true => word[1..word.len() - 1].to_owned(),
        false => word.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pip_lines_are_taken_out_and_line_numbers_kept() {
        let code = "%pip install -q humanize 'msgpack==1.1.0'\nimport humanize\n!pip install \
                    mdurl\nprint(1)";
        let taken = split(code).unwrap().unwrap();
        assert_eq!(taken.code, "\nimport humanize\n\nprint(1)");
        assert_eq!(taken.requirements, ["humanize", "msgpack==1.1.0", "mdurl"]);
        assert_eq!(
            split("print('%pip install x')\n  %pip install y\n").unwrap(),
            None
        );
    }

    #[test]
    fn a_name_ending_in_a_separator_is_refused_not_a_panic() {
        // Found by packages/fuzz.rs: pep508_rs panicked on these (patches/pep508_rs).
        for bad in ["name_>=1", "a-[extra]", "b. ; python_version > '3'"] {
            let refused = requirements(&[bad.to_owned()]).unwrap_err();
            assert!(matches!(refused, Refusal::Invalid(_)), "{bad}: {refused}");
            assert!(refused.to_string().contains("must end with"), "{refused}");
        }
    }

    #[test]
    fn other_commands_and_options_are_refused_with_what_is_taken() {
        for bad in [
            "%pip uninstall x",
            "%pip install -r requirements.txt",
            "%pip install --index-url https://x y",
            "%pip install",
            "%pip",
        ] {
            let refused = split(bad).unwrap_err();
            assert!(matches!(refused, Refusal::Invalid(_)), "{bad}: {refused}");
        }
        assert_eq!(split("%pipe install x").unwrap(), None);
    }

    #[test]
    fn requirements_are_read_or_refused() {
        let good = requirements(&[
            "Humanize>=4".to_owned(),
            "a[b]==1; python_version>'3'".to_owned(),
        ]);
        assert_eq!(good.unwrap().len(), 2);
        assert!(requirements(&[]).is_err());
        assert!(requirements(&["not a name!".to_owned()]).is_err());
        assert!(requirements(&vec!["x".to_owned(); MAX_REQUIREMENTS + 1]).is_err());
    }
}
