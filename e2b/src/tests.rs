//! The gateway's own rules: keys, refusals, bodies, the known sandboxes.
#![allow(clippy::unwrap_used)]

use super::*;

/// A daemon that cannot be asked anything.
struct Unreachable;

struct NoEvents;

impl Events for NoEvents {
    async fn next(&mut self) -> Option<Result<hyperlightd_api::ExecEvent, DaemonError>> {
        None
    }
}

fn gone<T>() -> Result<T, DaemonError> {
    Err(DaemonError::unreachable("no daemon here"))
}

impl Daemon for Unreachable {
    type Events = NoEvents;
    fn for_request(&self, _: &hyper::Method, _: &str) -> Self {
        Unreachable
    }
    async fn create_session(
        &self,
        _: hyperlightd_api::CreateSessionRequest,
    ) -> Result<SessionInfo, DaemonError> {
        gone()
    }
    async fn session(&self, _: &str) -> Result<SessionInfo, DaemonError> {
        gone()
    }
    async fn sessions_labelled(
        &self,
        _: &std::collections::BTreeMap<String, String>,
    ) -> Result<Vec<SessionInfo>, DaemonError> {
        gone()
    }
    async fn set_session_idle_timeout(&self, _: &str, _: u64) -> Result<(), DaemonError> {
        gone()
    }
    async fn park_session(&self, _: &str) -> Result<(), DaemonError> {
        gone()
    }
    async fn restart_session(&self, _: &str) -> Result<(), DaemonError> {
        gone()
    }
    async fn delete_session(&self, _: &str) -> Result<(), DaemonError> {
        gone()
    }
    async fn session_exec(
        &self,
        _: &str,
        _: hyperlightd_api::SessionExecRequest,
    ) -> Result<NoEvents, DaemonError> {
        gone()
    }
    async fn session_files(&self, _: &str) -> Result<hyperlightd_api::FileList, DaemonError> {
        gone()
    }
    async fn change_session_files(
        &self,
        _: &str,
        _: Vec<hyperlightd_api::FileChange>,
    ) -> Result<(), DaemonError> {
        gone()
    }
    async fn session_file(&self, _: &str, _: &str) -> Result<Vec<u8>, DaemonError> {
        gone()
    }
}

async fn body(response: Response<Body>) -> Bytes {
    response.into_body().collect().await.unwrap().to_bytes()
}

#[tokio::test]
async fn a_refused_connect_rpc_says_why_as_connect_does() {
    let streaming = connect_error("application/connect+proto", "no processes");
    assert_eq!(streaming.status(), StatusCode::OK);
    let bytes = body(streaming).await;
    assert_eq!(bytes[0], 0x02, "one message, ending the stream");
    let length = u32::from_be_bytes(bytes[1..5].try_into().unwrap()) as usize;
    assert_eq!(length, bytes.len() - 5);
    let end: serde_json::Value = serde_json::from_slice(&bytes[5..]).unwrap();
    assert_eq!(end["error"]["code"], "unimplemented");
    assert_eq!(end["error"]["message"], "no processes");

    let unary = connect_error("application/json", "no processes");
    assert_eq!(unary.status(), StatusCode::NOT_IMPLEMENTED);
    let error: serde_json::Value = serde_json::from_slice(&body(unary).await).unwrap();
    assert_eq!(error["code"], "unimplemented");
}

#[tokio::test]
async fn refusals_are_e2bs_status_and_body() {
    let response = Refusal::Unauthorized.response();
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    let error: serde_json::Value = serde_json::from_slice(&body(response).await).unwrap();
    assert_eq!(error["code"], 401);
    assert!(error["message"].as_str().unwrap().contains("X-API-Key"));
}

#[tokio::test]
async fn a_body_past_the_limit_is_refused_and_one_at_it_read() {
    let sized = |n: usize| Request::new(Full::new(Bytes::from(vec![b'x'; n])));
    assert_eq!(
        read_body(sized(MAX_BODY_BYTES)).await.unwrap().len(),
        MAX_BODY_BYTES
    );
    let refused = read_body(sized(MAX_BODY_BYTES + 1)).await.unwrap_err();
    assert!(
        matches!(&refused, Refusal::BadRequest(m) if m.contains("at most 16777216 bytes")),
        "{refused:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_body_that_never_arrives_is_refused_at_its_deadline() {
    let never = futures_util::stream::pending::<Result<hyper::body::Frame<Bytes>, Infallible>>();
    let request = Request::new(http_body_util::StreamBody::new(never));
    let refused = read_body(request).await.unwrap_err();
    assert!(
        matches!(&refused, Refusal::BadRequest(m) if m.contains("within 30 s")),
        "{refused:?}"
    );
}

#[test]
fn known_sandboxes_are_forgotten_when_gone_and_the_table_stays_bounded() {
    let known = Known::default();
    let info = |id: String| SessionInfo {
        id,
        language: hyperlightd_api::Language::Python,
        created_at: String::new(),
        expires_at: String::new(),
        idle_timeout_s: 1,
        labels: Default::default(),
        env: Default::default(),
        execs: 0,
        memory_bytes: 0,
        checkpoint: 0,
        checkpoints: 1,
        restored_from_checkpoint: None,
        lost_execs: 0,
        durable: false,
        parked: false,
        lost: None,
        packages: Vec::new(),
    };
    known.insert(info("a".to_owned()));
    assert!(known.get("a").is_some());
    known.forget("a");
    assert!(known.get("a").is_none());
    for i in 0..MAX_KNOWN {
        known.insert(info(i.to_string()));
    }
    assert_eq!(known.table().len(), MAX_KNOWN);
    known.insert(info("one more".to_owned()));
    assert_eq!(
        known.table().len(),
        1,
        "emptied when full, then the new one kept"
    );
    assert!(known.get("one more").is_some());
}

#[test]
fn a_request_is_its_key_s_account_and_an_unknown_key_none() {
    let gateway = Gateway::new(vec![
        Account::new("e2b_aaaaaaaaaaaaaaaa".into(), Unreachable),
        Account::new("e2b_bbbbbbbbbbbbbbbb".into(), Unreachable),
    ]);
    let with = |name: &str, key: &str| {
        Request::builder()
            .header(name, key)
            .body(Full::new(Bytes::new()))
            .unwrap()
    };
    let key_of = |request| gateway.account(&request).map(|a| a.key.clone());
    assert_eq!(
        key_of(with("x-api-key", "e2b_bbbbbbbbbbbbbbbb")).as_deref(),
        Some("e2b_bbbbbbbbbbbbbbbb")
    );
    assert_eq!(
        key_of(with("x-access-token", "e2b_aaaaaaaaaaaaaaaa")).as_deref(),
        Some("e2b_aaaaaaaaaaaaaaaa")
    );
    assert_eq!(key_of(with("x-api-key", "e2b_cccccccccccccccc")), None);
    assert_eq!(key_of(with("x-api-key", "e2b_aaaaaaaaaaaaaaa")), None);
    assert_eq!(key_of(with("authorization", "e2b_aaaaaaaaaaaaaaaa")), None);
}

const KEY: &str = "e2b_aaaaaaaaaaaaaaaa";

/// A gateway of one key ([`KEY`]) over no daemon, served on loopback within `limits`, telling
/// the returned channel of each request refused for its key.
async fn listening(
    limits: ConnectionLimits,
) -> (
    SocketAddr,
    tokio::sync::mpsc::UnboundedReceiver<(Option<SocketAddr>, String)>,
) {
    let (told, unknown) = tokio::sync::mpsc::unbounded_channel();
    let hook: OnUnknownKey = Box::new(move |u: &UnknownKey<'_>| {
        let _ = told.send((u.peer, format!("{} {}", u.method, u.path)));
    });
    let gateway = Gateway::new(vec![Account::new(KEY.into(), Unreachable)]).on_unknown_key(hook);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(serve_within(listener, Arc::new(gateway), limits));
    (address, unknown)
}

/// `head` sent on `stream` (a request without a body, the connection closed after it), and
/// the answer's status line; empty if the gateway closed the connection unanswered.
async fn ask(stream: &mut TcpStream, head: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let request = format!("{head}\r\nhost: test\r\nconnection: close\r\n\r\n");
    let _ = stream.write_all(request.as_bytes()).await;
    let mut answer = Vec::new();
    let read = stream.read_to_end(&mut answer);
    tokio::time::timeout(Duration::from_secs(30), read)
        .await
        .expect("the gateway answers or closes within 30 s")
        .ok();
    let answer = String::from_utf8_lossy(&answer).into_owned();
    answer.lines().next().unwrap_or_default().to_owned()
}

/// Whether the gateway closes `stream` within 30 s (having answered no request on it).
async fn closed(stream: &mut TcpStream) -> bool {
    use tokio::io::AsyncReadExt;
    let mut answer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(30), stream.read_to_end(&mut answer));
    let ended = matches!(read.await, Ok(Ok(_) | Err(_)));
    ended && !String::from_utf8_lossy(&answer).contains(" 401 ")
}

#[tokio::test]
async fn a_request_without_a_known_key_is_told_to_the_hook_then_refused() {
    let (address, mut unknown) = listening(ConnectionLimits::default()).await;
    let mut stream = TcpStream::connect(address).await.unwrap();
    let peer = stream.local_addr().unwrap();
    assert_eq!(
        ask(&mut stream, "GET /sandboxes HTTP/1.1").await,
        "HTTP/1.1 401 Unauthorized"
    );
    assert_eq!(
        unknown.recv().await,
        Some((Some(peer), "GET /sandboxes".to_owned()))
    );

    let mut stream = TcpStream::connect(address).await.unwrap();
    let wrong = "POST /v2/sandboxes HTTP/1.1\r\nx-api-key: e2b_bbbbbbbbbbbbbbbb";
    assert_eq!(ask(&mut stream, wrong).await, "HTTP/1.1 401 Unauthorized");
    let (_, told) = unknown.recv().await.unwrap();
    assert_eq!(told, "POST /v2/sandboxes");

    // A known key reaches the daemon (here none to reach: 503), and the hook hears nothing of it.
    let mut stream = TcpStream::connect(address).await.unwrap();
    let known = format!("GET /sandboxes HTTP/1.1\r\nx-api-key: {KEY}");
    assert_eq!(
        ask(&mut stream, &known).await,
        "HTTP/1.1 503 Service Unavailable"
    );
    assert!(unknown.try_recv().is_err());
}

#[tokio::test]
async fn a_connection_past_the_limit_is_closed_and_a_freed_place_serves_again() {
    let limits = ConnectionLimits {
        max_connections: 4,
        ..ConnectionLimits::default()
    };
    let (address, _unknown) = listening(limits).await;
    let mut held = Vec::new();
    for _ in 0..4 {
        held.push(TcpStream::connect(address).await.unwrap());
    }
    let mut past = TcpStream::connect(address).await.unwrap();
    assert!(closed(&mut past).await, "the fifth connection is closed");
    drop(held.pop());
    // The freed place is the gateway's once it has seen the close: until then a new
    // connection may still be one too many.
    for attempt in 0.. {
        let mut stream = TcpStream::connect(address).await.unwrap();
        match ask(&mut stream, "GET /health HTTP/1.1").await.as_str() {
            "HTTP/1.1 401 Unauthorized" => break,
            "" if attempt < 100 => tokio::time::sleep(Duration::from_millis(50)).await,
            other => panic!("a connection in a freed place: {other:?}"),
        }
    }
}

#[tokio::test]
async fn a_connection_that_sends_no_head_in_time_is_closed() {
    let limits = ConnectionLimits {
        header_read_timeout: Duration::from_millis(200),
        ..ConnectionLimits::default()
    };
    let (address, _unknown) = listening(limits).await;
    let mut silent = TcpStream::connect(address).await.unwrap();
    assert!(closed(&mut silent).await, "a connection that sends nothing");
    let mut slow = TcpStream::connect(address).await.unwrap();
    use tokio::io::AsyncWriteExt;
    slow.write_all(b"GET /health HTTP/1.1\r\nhost: te")
        .await
        .unwrap();
    assert!(
        closed(&mut slow).await,
        "a connection that sends half a head"
    );
    let mut prompt = TcpStream::connect(address).await.unwrap();
    assert_eq!(
        ask(&mut prompt, "GET /health HTTP/1.1").await,
        "HTTP/1.1 401 Unauthorized"
    );
}
