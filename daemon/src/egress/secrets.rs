//! Secrets a program's requests carry without the program having them: the operator maps a
//! destination to a header whose value comes from the daemon's environment or a file
//! (`https://api.example.com/v1/ Authorization: Bearer {env:EXAMPLE_TOKEN}`). The host sets the
//! header on each request to that destination after the program built it, replacing any the
//! program set, and on no other: a redirect elsewhere goes without it. Values are read once,
//! at startup, and never printed (their `Debug` is redacted, errors name only their source).

use std::fmt;

use hyper::header::{HeaderName, HeaderValue};

use super::rules::Rule;
use super::target::Target;

/// One header added to the requests to one destination.
#[derive(Clone)]
pub struct Secret {
    /// Where it goes (any method).
    pub destination: Rule,
    pub header: HeaderName,
    /// The value, marked sensitive.
    pub value: HeaderValue,
    /// Where the value came from, as given (`env:NAME`, `file:/path`, or several).
    pub sources: Vec<String>,
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Secret({})", self.describe())
    }
}

impl Secret {
    /// The secret from its one-line form, its value read from the environment `env` and files:
    /// `DESTINATION HEADER: VALUE`, the value's `{env:NAME}` and `{file:PATH}` replaced.
    pub fn parse(text: &str, env: &dyn Fn(&str) -> Option<String>) -> Result<Secret, String> {
        let usage = || {
            format!(
                "a secret is DESTINATION HEADER: VALUE, such as \"https://api.example.com/v1/ \
                 Authorization: Bearer {{env:EXAMPLE_TOKEN}}\" (the value's {{env:NAME}} and \
                 {{file:PATH}} are read by the daemon); got a line of {} characters",
                text.len()
            )
        };
        let (destination, header_line) = text
            .trim()
            .split_once(char::is_whitespace)
            .ok_or_else(usage)?;
        let (header, template) = header_line.split_once(':').ok_or_else(usage)?;
        let rule = Rule::parse(destination)?;
        if rule.methods.is_some() {
            return Err(format!(
                "{destination:?}: a secret's destination names no methods"
            ));
        }
        let header = HeaderName::from_bytes(header.trim().as_bytes())
            .map_err(|_| format!("{:?} is not a header name", header.trim()))?;
        let (text, sources) = expand(template.trim(), env)?;
        let mut value = HeaderValue::from_str(&text).map_err(|_| {
            format!(
                "the value of {header} for {destination} (from {}) is not a header value: no \
                 line breaks or control characters",
                sources.join(", ")
            )
        })?;
        value.set_sensitive(true);
        Ok(Secret {
            destination: rule,
            header,
            value,
            sources,
        })
    }

    /// Whether requests to `target` carry it.
    pub fn applies_to(&self, target: &Target) -> bool {
        let method = "GET"; // any method: the destination names none
        self.destination.allows(method, target)
    }

    /// What may be shown of it: its destination, its header, its sources, never its value.
    pub fn describe(&self) -> String {
        format!(
            "{} {}: from {}",
            self.destination,
            self.header,
            self.sources.join(" and ")
        )
    }
}

/// `template` with every `{env:NAME}` and `{file:PATH}` replaced, and the sources read.
fn expand(
    template: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<(String, Vec<String>), String> {
    let mut out = String::new();
    let mut sources = Vec::new();
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        let close = rest[open..]
            .find('}')
            .ok_or_else(|| "a '{' in a secret's value is not closed".to_owned())?;
        let source = &rest[open + 1..open + close];
        let value = match source.split_once(':') {
            Some(("env", name)) => env(name)
                .filter(|v| !v.is_empty())
                .ok_or_else(|| format!("the environment variable {name} is not set or empty"))?,
            Some(("file", path)) => read_file(path)?,
            _ => {
                return Err(format!(
                    "{{{source}}} in a secret's value: write {{env:NAME}} or {{file:PATH}}"
                ));
            }
        };
        out.push_str(&value);
        sources.push(source.to_owned());
        rest = &rest[open + close + 1..];
    }
    out.push_str(rest);
    if sources.is_empty() {
        return Err(
            "a secret's value names no {env:NAME} or {file:PATH}: write the value where the \
             daemon reads it, not on its command line"
                .to_owned(),
        );
    }
    Ok((out, sources))
}

/// A file's content without its final line break.
fn read_file(path: &str) -> Result<String, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read the secret file {path:?}: {e}"))?;
    let text = text.strip_suffix('\n').unwrap_or(&text);
    let text = text.strip_suffix('\r').unwrap_or(text);
    if text.is_empty() {
        return Err(format!("the secret file {path:?} is empty"));
    }
    Ok(text.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        (name == "TOKEN").then(|| "s3cr3t".to_owned())
    }

    #[test]
    fn a_secret_is_read_from_its_sources_and_never_shown() {
        let secret = Secret::parse(
            "https://api.example.com/v1/ Authorization: Bearer {env:TOKEN}",
            &env,
        )
        .unwrap();
        assert_eq!(secret.header, "authorization");
        assert_eq!(secret.value, "Bearer s3cr3t");
        assert!(secret.value.is_sensitive());
        let shown = format!("{secret:?} {}", secret.describe());
        assert!(!shown.contains("s3cr3t"), "{shown}");
        assert!(shown.contains("https://api.example.com/v1/ authorization: from env:TOKEN"));
        let to = |url: &str| secret.applies_to(&Target::parse(url).unwrap());
        assert!(to("https://api.example.com/v1/models"));
        assert!(!to("https://api.example.com/v2/models"));
        assert!(!to("http://api.example.com/v1/models"));
        assert!(!to("https://evil.example.com/v1/models"));

        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("key");
        std::fs::write(&file, "from-a-file\n").unwrap();
        let line = format!("https://*.example.com X-Key: {{file:{}}}", file.display());
        let secret = Secret::parse(&line, &env).unwrap();
        assert_eq!(secret.value, "from-a-file");
    }

    #[test]
    fn a_bad_secret_is_refused_without_its_value() {
        let cases = [
            (
                "https://a.example.com",
                "a secret is DESTINATION HEADER: VALUE",
            ),
            (
                "https://a.example.com Authorization Bearer",
                "a secret is DESTINATION",
            ),
            (
                "https://a.example.com Auth orization: {env:TOKEN}",
                "not a header name",
            ),
            (
                "https://a.example.com Authorization: {env:MISSING}",
                "MISSING is not set",
            ),
            (
                "https://a.example.com Authorization: Bearer abc",
                "names no {env:NAME}",
            ),
            (
                "https://a.example.com Authorization: {env:TOKEN",
                "not closed",
            ),
            (
                "https://a.example.com Authorization: {nope:x}",
                "write {env:NAME}",
            ),
            (
                "https://a.example.com Authorization: {file:/no/such/file}",
                "cannot read",
            ),
            ("GET https://a.example.com X: {env:TOKEN}", "no scheme"),
            ("ftp://a.example.com X: {env:TOKEN}", "not served"),
        ];
        for (line, expected) in cases {
            let refused = Secret::parse(line, &env).unwrap_err();
            assert!(refused.contains(expected), "{line}: {refused}");
            assert!(!refused.contains("s3cr3t"), "{refused}");
        }
        let with_newline = |name: &str| (name == "TOKEN").then(|| "a\r\nb: c".to_owned());
        let refused =
            Secret::parse("https://a.example.com X: {env:TOKEN}", &with_newline).unwrap_err();
        assert!(refused.contains("not a header value"), "{refused}");
        assert!(!refused.contains("a\r\nb"), "{refused}");
    }
}
