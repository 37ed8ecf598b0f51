//! A package index on loopback for the install tests: the simple repository API's JSON page of
//! each project (`/simple/{name}/`) and its files (`/files/{filename}`), every request counted.
//! The real wheels come from PyPI, downloaded with their hashes checked by `cargo xtask test`
//! (`tests/packages/wheels.lock`) into `target/test-wheels`; a test may list more files, with a
//! hash that is not theirs.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use serde_json::json;
use sha2::{Digest, Sha256};
use tokio::net::TcpListener;

/// One file an index lists: its bytes, and the SHA-256 the page gives.
#[derive(Debug, Clone)]
pub struct Listed {
    pub filename: String,
    pub bytes: Bytes,
    pub sha256: String,
}

impl Listed {
    /// `bytes` listed as `filename`, with their own hash.
    pub fn new(filename: &str, bytes: impl Into<Bytes>) -> Listed {
        let bytes = bytes.into();
        Listed {
            filename: filename.to_owned(),
            sha256: sha256_hex(&bytes),
            bytes,
        }
    }
}

/// A SHA-256 in lower-case hex.
pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The wheels `cargo xtask test` downloaded from PyPI, each listed with its own hash.
pub fn pypi_wheels() -> Vec<Listed> {
    let exe = std::env::current_exe().expect("the test knows its own path");
    let dir: PathBuf = exe
        .ancestors()
        .nth(3)
        .expect("the test executable lives in target/<profile>/deps")
        .join("test-wheels/files");
    let mut wheels: Vec<Listed> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e} (`cargo xtask test` downloads them)", dir.display()))
        .map(|entry| entry.expect("a directory entry").path())
        .filter(|path| path.extension().is_some_and(|e| e == "whl"))
        .map(|path| {
            let name = path
                .file_name()
                .expect("a name")
                .to_string_lossy()
                .into_owned();
            Listed::new(&name, std::fs::read(&path).expect("reading a wheel"))
        })
        .collect();
    wheels.sort_by(|a, b| a.filename.cmp(&b.filename));
    assert!(!wheels.is_empty(), "no wheel in {}", dir.display());
    wheels
}

/// The normalized project name of a distribution file's name.
fn project_of(filename: &str) -> String {
    let name = filename.split('-').next().unwrap_or(filename);
    name.to_ascii_lowercase().replace(['_', '.'], "-")
}

/// A running index.
#[derive(Debug)]
pub struct TestIndex {
    address: SocketAddr,
    requests: Arc<AtomicUsize>,
}

impl TestIndex {
    /// Serves `files`, each under its project, on a loopback port.
    pub async fn serve(files: Vec<Listed>) -> TestIndex {
        let mut projects: BTreeMap<String, Vec<Listed>> = BTreeMap::new();
        for file in files {
            projects
                .entry(project_of(&file.filename))
                .or_default()
                .push(file);
        }
        let projects = Arc::new(projects);
        let requests = Arc::new(AtomicUsize::new(0));
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a loopback port");
        let address = listener.local_addr().expect("its address");
        let counted = requests.clone();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let _ = tcp.set_nodelay(true);
                let (projects, counted) = (projects.clone(), counted.clone());
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |request| {
                        counted.fetch_add(1, Ordering::SeqCst);
                        answer(projects.clone(), request)
                    });
                    let http = hyper::server::conn::http1::Builder::new();
                    let _ = http.serve_connection(TokioIo::new(tcp), service).await;
                });
            }
        });
        TestIndex { address, requests }
    }

    /// The index's URL, as `--package-index` takes it.
    pub fn url(&self) -> String {
        format!("http://{}/simple/", self.address)
    }

    /// Requests it has answered.
    pub fn requests(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }
}

async fn answer(
    projects: Arc<BTreeMap<String, Vec<Listed>>>,
    request: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let path = request.uri().path().to_owned();
    let not_found = || {
        Response::builder()
            .status(404)
            .body(Full::new(Bytes::from_static(b"not found")))
            .expect("a response")
    };
    if let Some(name) = path
        .strip_prefix("/simple/")
        .and_then(|p| p.strip_suffix('/'))
    {
        let Some(files) = projects.get(name) else {
            return Ok(not_found());
        };
        let files: Vec<_> = files
            .iter()
            .map(|f| {
                json!({
                    "filename": f.filename,
                    "url": format!("../../files/{}", f.filename),
                    "hashes": {"sha256": f.sha256},
                })
            })
            .collect();
        let page = json!({"meta": {"api-version": "1.1"}, "name": name, "files": files});
        return Ok(Response::builder()
            .header("content-type", "application/vnd.pypi.simple.v1+json")
            .body(Full::new(Bytes::from(page.to_string())))
            .expect("a response"));
    }
    if let Some(filename) = path.strip_prefix("/files/") {
        let file = projects.values().flatten().find(|f| f.filename == filename);
        if let Some(file) = file {
            return Ok(Response::new(Full::new(file.bytes.clone())));
        }
    }
    Ok(not_found())
}
