//! A package index's page for one project, read: the simple repository API's JSON form
//! (`application/vnd.pypi.simple.v1+json`) or its HTML form (anchors whose fragment carries the
//! file's hash). What the page lists is untrusted: each file's URL is checked as any egress
//! destination before it is fetched, and its bytes against the hash listed here.

use std::str::FromStr;
use std::sync::LazyLock;

use pep508_rs::pep440_rs::VersionSpecifiers;
use regex::Regex;
use serde::Deserialize;

/// The `Accept` of a project page's request: JSON first, HTML from an index without it.
pub const ACCEPT: &str = "application/vnd.pypi.simple.v1+json, \
    application/vnd.pypi.simple.v1+html;q=0.2, text/html;q=0.01";

/// The media type of the JSON form.
const JSON: &str = "application/vnd.pypi.simple.v1+json";

/// One file a project page lists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexFile {
    pub filename: String,
    /// As the page gives it: absolute, or relative to the page.
    pub url: String,
    /// Its SHA-256, lower-case hex; None when the page gives none (such a file is never
    /// installed).
    pub sha256: Option<String>,
    pub requires_python: Option<VersionSpecifiers>,
    pub yanked: bool,
}

/// Reads a project page of media type `content_type`; else why it cannot be read.
pub fn parse(content_type: &str, body: &[u8]) -> Result<Vec<IndexFile>, String> {
    let media = content_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    if media == JSON || media == "application/json" {
        parse_json(body)
    } else if media.contains("html") {
        let text = std::str::from_utf8(body).map_err(|e| format!("not UTF-8: {e}"))?;
        Ok(parse_html(text))
    } else {
        Err(format!(
            "the index answered {media:?}, not a simple repository page"
        ))
    }
}

#[derive(Deserialize)]
struct Page {
    files: Vec<JsonFile>,
}

#[derive(Deserialize)]
struct JsonFile {
    filename: String,
    url: String,
    #[serde(default)]
    hashes: std::collections::BTreeMap<String, String>,
    #[serde(default, rename = "requires-python")]
    requires_python: Option<String>,
    #[serde(default)]
    yanked: serde_json::Value,
}

fn parse_json(body: &[u8]) -> Result<Vec<IndexFile>, String> {
    let page: Page = serde_json::from_slice(body).map_err(|e| format!("bad JSON page: {e}"))?;
    Ok(page
        .files
        .into_iter()
        .map(|file| IndexFile {
            sha256: file.hashes.get("sha256").map(|h| h.to_ascii_lowercase()),
            requires_python: specifiers(file.requires_python.as_deref()),
            yanked: !matches!(file.yanked, serde_json::Value::Bool(false))
                && !file.yanked.is_null(),
            filename: file.filename,
            url: file.url,
        })
        .collect())
}

/// A Requires-Python as the page gives it; one that does not parse is taken as none (the
/// wheel's own METADATA is checked again once fetched).
fn specifiers(text: Option<&str>) -> Option<VersionSpecifiers> {
    VersionSpecifiers::from_str(text?.trim()).ok()
}

// Constant patterns: the unit tests compile them.
#[expect(clippy::expect_used, reason = "a constant pattern")]
static ANCHOR: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"(?is)<a\s([^>]*)>(.*?)</a\s*>").expect("anchor pattern"));
#[expect(clippy::expect_used, reason = "a constant pattern")]
static ATTRIBUTE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r#"(?s)([A-Za-z][A-Za-z0-9_-]*)(?:\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s"'>]+)))?"#)
        .expect("attribute pattern")
});

fn parse_html(text: &str) -> Vec<IndexFile> {
    ANCHOR
        .captures_iter(text)
        .filter_map(|anchor| {
            let mut href = None;
            let mut requires_python = None;
            let mut yanked = false;
            for attribute in ATTRIBUTE.captures_iter(&anchor[1]) {
                let value = [2, 3, 4]
                    .iter()
                    .find_map(|i| attribute.get(*i))
                    .map(|v| unescape(v.as_str()));
                match attribute[1].to_ascii_lowercase().as_str() {
                    "href" => href = value,
                    "data-requires-python" => requires_python = value,
                    "data-yanked" => yanked = true,
                    _ => {}
                }
            }
            let href = href?;
            let (url, fragment) = href.split_once('#').unwrap_or((&href, ""));
            let sha256 = fragment
                .strip_prefix("sha256=")
                .map(|h| h.to_ascii_lowercase());
            Some(IndexFile {
                filename: unescape(anchor[2].trim()),
                url: url.to_owned(),
                sha256,
                requires_python: specifiers(requires_python.as_deref()),
                yanked,
            })
        })
        .collect()
}

/// The character references an index writes in attributes and names.
fn unescape(text: &str) -> String {
    text.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&#x27;", "'")
        .replace("&amp;", "&")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_json_page_gives_files_hashes_and_yanks() {
        let body = br#"{"meta":{"api-version":"1.1"},"name":"m","files":[
            {"filename":"m-1.0-py3-none-any.whl","url":"../../files/m-1.0-py3-none-any.whl",
             "hashes":{"sha256":"ABC"},"requires-python":">=3.8","yanked":false},
            {"filename":"m-0.9.tar.gz","url":"https://f/m-0.9.tar.gz","hashes":{},
             "yanked":"broken"}]}"#;
        let files = parse("application/vnd.pypi.simple.v1+json", body).unwrap();
        assert_eq!(files.len(), 2);
        assert_eq!(files[0].sha256.as_deref(), Some("abc"));
        assert_eq!(
            files[0].requires_python.as_ref().unwrap().to_string(),
            ">=3.8"
        );
        assert!(!files[0].yanked);
        assert_eq!(files[1].sha256, None);
        assert!(files[1].yanked);
    }

    #[test]
    fn the_html_page_gives_the_same() {
        let body = r#"<html><body><h1>Links for m</h1>
            <a href="https://f/m-1.0-py3-none-any.whl#sha256=abc"
               data-requires-python="&gt;=3.8">m-1.0-py3-none-any.whl</a><br/>
            <a href='/m-0.9-py3-none-any.whl#sha256=def' data-yanked>m-0.9-py3-none-any.whl</a>
            <a href="/no-hash.whl">no-hash.whl</a></body></html>"#;
        let files = parse("text/html; charset=utf-8", body.as_bytes()).unwrap();
        assert_eq!(files.len(), 3);
        assert_eq!(files[0].url, "https://f/m-1.0-py3-none-any.whl");
        assert_eq!(files[0].sha256.as_deref(), Some("abc"));
        assert_eq!(
            files[0].requires_python.as_ref().unwrap().to_string(),
            ">=3.8"
        );
        assert!(files[1].yanked && !files[0].yanked);
        assert_eq!(files[2].sha256, None);
    }

    #[test]
    fn other_answers_are_refused() {
        assert!(parse("application/octet-stream", b"").is_err());
        assert!(parse(JSON, b"{").unwrap_err().contains("bad JSON"));
    }
}
