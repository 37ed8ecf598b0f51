//! The indexes and the cache as a [`Source`]: a project's page from the first index that has
//! it (in the operator's order, so a later index cannot shadow an earlier one's package),
//! kept for a while; a wheel from the cache by its hash, else from its URL, checked against
//! the hash and kept. Every request goes through the egress client: the index's own host is
//! the operator's choice (a mirror on a private network is reached by name), any other host a
//! page sends wheels from must resolve to public addresses only, as a program's request must.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use bytes::Bytes;
use hyper::Method;
use hyper::header::{self, HeaderMap, HeaderValue};
use pep508_rs::PackageName;

use super::Refusal;
use super::cache::{Cache, sha256_hex};
use super::index::{self, IndexFile};
use super::resolve::{Fetched, Source};
use crate::egress::address;
use crate::egress::client::{Client, Exchange};
use crate::egress::target::{Host, Target};
use crate::job::egress::FetchErrorKind;

/// The largest project page read.
const MAX_PAGE: usize = 32 * 1024 * 1024;
/// Redirects followed for one request.
const MAX_REDIRECTS: u32 = 5;

/// The indexes, the cache and the pages read lately.
#[derive(Debug)]
pub struct Indexes {
    /// Each index's root (ending in `/`), in the operator's order.
    roots: Vec<Target>,
    client: Client,
    pub cache: Cache,
    /// How long a project's page is used before it is read again.
    page_life: Duration,
    /// How long one request may take.
    timeout: Duration,
    pages: Mutex<HashMap<PackageName, (Instant, Vec<IndexFile>)>>,
    counts: Mutex<Counts>,
}

/// One request to an index or a host it sends files from, for an `egress` audit line.
#[derive(Debug)]
pub struct IndexHop<'a> {
    pub target: &'a Target,
    /// Which hop of a chain of redirects it was (0: the request itself).
    pub redirect: u32,
    /// The response's status, when one came.
    pub status: Option<u16>,
    /// Body bytes received.
    pub received: usize,
    pub elapsed: Duration,
    /// Why it brought no response: its kind (`refused`, `limit`, `timeout`, `failed`) and
    /// what was said.
    pub failed: Option<(&'static str, &'a str)>,
}

/// Where one install's requests are told, each as it ends.
pub type Hops<'a> = &'a (dyn Fn(&IndexHop<'_>) + Sync);

/// The indexes as one install asks them: each request told to its `hops`.
pub struct Asking<'a> {
    pub indexes: &'a Indexes,
    pub hops: Hops<'a>,
}

impl std::fmt::Debug for Asking<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Asking").finish_non_exhaustive()
    }
}

/// What the indexes were asked since the last [`Indexes::take_counts`].
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    pub requests: u64,
    pub bytes: u64,
}

impl Indexes {
    pub fn new(
        roots: Vec<Target>,
        client: Client,
        cache: Cache,
        page_life: Duration,
        timeout: Duration,
    ) -> Indexes {
        Indexes {
            roots,
            client,
            cache,
            page_life,
            timeout,
            pages: Mutex::default(),
            counts: Mutex::default(),
        }
    }

    /// The indexes, as health shows them.
    pub fn roots(&self) -> Vec<String> {
        self.roots.iter().map(ToString::to_string).collect()
    }

    /// The requests made and bytes fetched since the last call.
    pub fn take_counts(&self) -> Counts {
        std::mem::take(&mut *self.counts.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// `target`'s answer, following redirects, at most `max` body bytes (past them: None);
    /// each request told to `hops`.
    async fn get(
        &self,
        target: Target,
        accept: &'static str,
        max: usize,
        hops: Hops<'_>,
    ) -> Result<Option<Answer>, Refusal> {
        let mut target = target;
        for redirect in 0..=MAX_REDIRECTS {
            let started = Instant::now();
            let told = |status, received, failed| {
                hops(&IndexHop {
                    target: &target,
                    redirect,
                    status,
                    received,
                    elapsed: started.elapsed(),
                    failed,
                })
            };
            let answer = match self.send(&target, accept, max).await {
                Ok(answer) => answer,
                Err((kind, e)) => {
                    told(None, 0, Some((kind.as_str(), e.to_string().as_str())));
                    return match kind {
                        FetchErrorKind::Limit => Ok(None),
                        _ => Err(e),
                    };
                }
            };
            told(Some(answer.status), answer.body.len(), None);
            {
                let mut counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
                counts.requests += 1;
                counts.bytes += answer.body.len() as u64;
            }
            if (300..400).contains(&answer.status)
                && let Some(location) = answer.headers.get(header::LOCATION)
            {
                let location = location.to_str().unwrap_or_default();
                target = target.join(location).map_err(|e| {
                    Refusal::Index(format!("{target} redirects badly: {}", e.message))
                })?;
                continue;
            }
            return Ok(Some(Answer {
                status: answer.status,
                content_type: answer
                    .headers
                    .get(header::CONTENT_TYPE)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default()
                    .to_owned(),
                body: answer.body,
                target,
            }));
        }
        Err(Refusal::Index(format!(
            "{target}: more than {MAX_REDIRECTS} redirects"
        )))
    }

    /// One request for `target`, at most `max` body bytes; failed, with the kind its audit
    /// line names.
    async fn send(
        &self,
        target: &Target,
        accept: &'static str,
        max: usize,
    ) -> Result<crate::egress::client::Answer, (FetchErrorKind, Refusal)> {
        let peer = self.reach(target).await;
        let peer = peer.map_err(|e| (FetchErrorKind::Refused, e))?;
        let mut headers = HeaderMap::new();
        headers.insert(header::ACCEPT, HeaderValue::from_static(accept));
        headers.insert(
            header::USER_AGENT,
            HeaderValue::from_static(concat!("hyperlightd/", env!("CARGO_PKG_VERSION"))),
        );
        let exchange = Exchange {
            method: &Method::GET,
            target,
            headers,
            body: Bytes::new(),
            max_body: max,
        };
        let answer = tokio::time::timeout(self.timeout, self.client.send(peer, exchange)).await;
        let late = || Refusal::Index(format!("{target} did not answer in time"));
        let answer = answer.map_err(|_| (FetchErrorKind::Timeout, late()))?;
        answer.map_err(|e| (e.kind, Refusal::Index(e.message)))
    }

    /// The address to reach `target` at: any for an index's own host, public ones only for
    /// any other.
    async fn reach(&self, target: &Target) -> Result<SocketAddr, Refusal> {
        let own = self
            .roots
            .iter()
            .any(|root| root.origin() == target.origin());
        match (&target.host, own) {
            (Host::Name(name), true) => self
                .client
                .resolve_any(name, target.port)
                .await
                .map_err(|e| Refusal::Index(e.message)),
            (Host::Ip(ip), false) if address::special(*ip).is_some() => Err(Refusal::Index(
                format!("{target}: an index may send files from public addresses only"),
            )),
            _ => self
                .client
                .resolve(target)
                .await
                .map_err(|e| Refusal::Index(e.message)),
        }
    }

    /// The page of `name` from the first index that has it; empty if none does.
    async fn page(&self, name: &PackageName, hops: Hops<'_>) -> Result<Vec<IndexFile>, Refusal> {
        for root in &self.roots {
            let url = root
                .join(&format!("{name}/"))
                .map_err(|e| Refusal::Index(e.message))?;
            let answer = self.get(url.clone(), index::ACCEPT, MAX_PAGE, hops).await?;
            let answer = answer.ok_or_else(|| {
                Refusal::Index(format!("{url}: the page is over {MAX_PAGE} bytes"))
            })?;
            match answer.status {
                404 | 410 => continue,
                200 => {}
                status => {
                    return Err(Refusal::Index(format!(
                        "{} answered {status}",
                        answer.target
                    )));
                }
            }
            let mut files = index::parse(&answer.content_type, &answer.body)
                .map_err(|e| Refusal::Index(format!("{}: {e}", answer.target)))?;
            // Each file's URL made absolute against the page it came from.
            for file in &mut files {
                file.url = resolve(&answer.target, &file.url);
            }
            return Ok(files);
        }
        Ok(Vec::new())
    }
}

/// An answer, read.
struct Answer {
    status: u16,
    content_type: String,
    body: Bytes,
    /// Where it came from, after redirects.
    target: Target,
}

impl Source for Asking<'_> {
    async fn files(&self, name: &PackageName) -> Result<Vec<IndexFile>, Refusal> {
        let indexes = self.indexes;
        if let Some((read, files)) = indexes
            .pages
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(name)
            && read.elapsed() < indexes.page_life
        {
            return Ok(files.clone());
        }
        let files = indexes.page(name, self.hops).await?;
        indexes
            .pages
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(name.clone(), (Instant::now(), files.clone()));
        Ok(files)
    }

    async fn wheel(
        &self,
        name: &PackageName,
        file: &IndexFile,
        max: u64,
    ) -> Result<Fetched, Refusal> {
        let sha256 = file.sha256.as_deref().unwrap_or_default();
        let too_large = || Refusal::TooLarge {
            name: name.clone(),
            filename: file.filename.clone(),
            max,
        };
        let indexes = self.indexes;
        if let Some(bytes) = indexes.cache.get(sha256) {
            if bytes.len() as u64 > max {
                return Err(too_large());
            }
            return Ok(Fetched {
                bytes,
                cached: true,
            });
        }
        let url = Target::parse(&file.url).map_err(|e| Refusal::Index(e.message))?;
        let limit = usize::try_from(max.saturating_add(1)).unwrap_or(usize::MAX);
        let answer = indexes
            .get(url, "application/octet-stream, */*", limit, self.hops)
            .await?
            .ok_or_else(too_large)?;
        if answer.status != 200 {
            return Err(Refusal::Index(format!(
                "{} answered {}",
                answer.target, answer.status
            )));
        }
        if answer.body.len() as u64 > max {
            return Err(too_large());
        }
        if sha256_hex(&answer.body) != sha256 {
            return Err(Refusal::HashMismatch {
                filename: file.filename.clone(),
            });
        }
        if let Err(e) = indexes.cache.put(sha256, &answer.body) {
            tracing::warn!("the package cache did not keep {}: {e}", file.filename);
        }
        Ok(Fetched {
            bytes: answer.body,
            cached: false,
        })
    }
}

/// `href` (as a page gives it: absolute, or relative to `page`, with `.` and `..` segments)
/// as an absolute URL; the URL is checked when it is fetched.
fn resolve(page: &Target, href: &str) -> String {
    if href.contains("://") {
        return href.to_owned();
    }
    if let Some(rest) = href.strip_prefix("//") {
        return format!("{}://{rest}", page.scheme.as_str());
    }
    let (path, query) = match href.split_once('?') {
        Some((path, query)) => (path, Some(query)),
        None => (href, None),
    };
    let joined = match path.strip_prefix('/') {
        Some(_) => path.to_owned(),
        None => {
            let directory = &page.path[..=page.path.rfind('/').unwrap_or(0)];
            format!("{directory}{path}")
        }
    };
    let mut segments: Vec<&str> = Vec::new();
    let parts: Vec<&str> = joined.split('/').skip(1).collect();
    for (i, segment) in parts.iter().enumerate() {
        let last = i + 1 == parts.len();
        match *segment {
            "." if last => segments.push(""),
            "." => {}
            ".." => {
                segments.pop();
                if last {
                    segments.push("");
                }
            }
            other => segments.push(other),
        }
    }
    let query = query.map(|q| format!("?{q}")).unwrap_or_default();
    format!("{}/{}{query}", page.origin(), segments.join("/"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_s_links_are_made_absolute() {
        let page = Target::parse("https://mirror.example:8443/simple/m/").unwrap();
        for (href, url) in [
            ("https://files.example/m.whl", "https://files.example/m.whl"),
            ("//files.example/m.whl", "https://files.example/m.whl"),
            (
                "/packages/m.whl",
                "https://mirror.example:8443/packages/m.whl",
            ),
            (
                "../../files/m.whl",
                "https://mirror.example:8443/files/m.whl",
            ),
            (
                "m.whl?x=1",
                "https://mirror.example:8443/simple/m/m.whl?x=1",
            ),
            ("../../../../m.whl", "https://mirror.example:8443/m.whl"),
            ("./a/../m.whl", "https://mirror.example:8443/simple/m/m.whl"),
        ] {
            assert_eq!(resolve(&page, href), url, "{href}");
        }
    }
}
