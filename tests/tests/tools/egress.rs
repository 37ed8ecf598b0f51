//! End-to-end tests of outbound HTTP (issue 30), in the tools binary's VM boots: servers on the
//! VM's loopback (plain HTTP, and HTTPS with a test CA the daemon is told to trust), a daemon
//! allowing them literally, and programs that reach them the ordinary way, and fail to reach
//! anything else with errors they can catch.

use std::net::SocketAddr;
use std::path::PathBuf;

use hyperlightd_client::{AllowRule, ExecStatus, Network};
use hyperlightd_e2e::web::{self, SECRET};
use hyperlightd_e2e::{Daemon, audit_lines, js, run};
use serde_json::{Value, json};

/// Two loopback servers, and the daemon arguments that let programs reach them.
pub struct Servers {
    pub http: SocketAddr,
    pub https: SocketAddr,
    pub audit: PathBuf,
    /// `--egress-*` and `--audit-log` arguments.
    pub args: Vec<String>,
    _dir: tempfile::TempDir,
}

/// A daemon whose programs may reach the servers, with them.
struct Egress {
    daemon: Daemon,
    http: SocketAddr,
    https: SocketAddr,
    audit: PathBuf,
    _servers: Servers,
}

/// Starts the servers, and says how a daemon allows them: a secret for the HTTP server's
/// `/echo`, requests of at most 1 s, at most 64 KiB received per execution.
pub async fn servers() -> Servers {
    let dir = tempfile::tempdir().unwrap();
    let (ca, tls) = web::test_ca(dir.path());
    let (http, https) = (web::serve(None).await, web::serve(Some(tls)).await);
    let token = dir.path().join("token");
    std::fs::write(&token, format!("{SECRET}\n")).unwrap();
    let audit = dir.path().join("audit.log");
    let rules = [
        format!("http://127.0.0.1:{}", http.port()),
        format!("GET https://127.0.0.1:{}", https.port()),
        // A name: it resolves to loopback, which only an address given literally may be.
        format!("http://localhost:{}", http.port()),
    ];
    let secret = format!(
        "http://127.0.0.1:{}/echo Authorization: Bearer {{file:{}}}",
        http.port(),
        token.display()
    );
    let mut args = Vec::new();
    for rule in rules {
        args.extend(["--egress-allow".to_owned(), rule]);
    }
    args.extend(["--egress-secret".to_owned(), secret]);
    args.extend(["--egress-ca-file".to_owned(), ca.display().to_string()]);
    args.extend(["--egress-timeout-ms".to_owned(), "1000".to_owned()]);
    args.extend(["--egress-max-received-bytes".to_owned(), "65536".to_owned()]);
    args.extend(["--audit-log".to_owned(), audit.display().to_string()]);
    Servers {
        http,
        https,
        audit,
        args,
        _dir: dir,
    }
}

/// A JavaScript daemon allowing the servers (`extra` arguments added).
async fn egress(extra: &[&str]) -> Egress {
    let servers = servers().await;
    let mut args: Vec<&str> = vec!["--pool", "javascript=1", "--default-timeout-ms", "30000"];
    args.extend(servers.args.iter().map(String::as_str));
    args.extend_from_slice(extra);
    Egress {
        daemon: Daemon::start(&args).await,
        http: servers.http,
        https: servers.https,
        audit: servers.audit.clone(),
        _servers: servers,
    }
}

/// The program's result, once it completed.
fn result(response: &hyperlightd_client::ExecResponse) -> &Value {
    assert_eq!(response.status, ExecStatus::Ok, "{response:?}");
    &response.result
}

#[tokio::test]
async fn javascript_fetches_allowed_servers_with_the_secret_it_never_sees() {
    let e = egress(&[]).await;
    let (http, https) = (e.http.port(), e.https.port());
    let code = format!(
        "const r = await fetch('http://127.0.0.1:{http}/echo?q=1', {{method: 'POST', \
           headers: {{'content-type': 'application/json', 'x-mine': 'yes'}}, body: JSON.stringify({{a: 1}})}});\n\
         const echo = await r.json();\n\
         const tls = await fetch('https://127.0.0.1:{https}/json');\n\
         const bytes = new Uint8Array(await (await fetch('http://127.0.0.1:{http}/bytes/300')).arrayBuffer());\n\
         const moved = await fetch('http://127.0.0.1:{http}/redirect/2');\n\
         ({{status: r.status, ok: r.ok, type: r.headers.get('Content-Type'), echo, \
           tls: await tls.json(), bytes: bytes.length, moved: [moved.redirected, moved.url], \
           seen: JSON.stringify(globalThis).includes('{secret_start}')}})",
        secret_start = &SECRET[..8],
    );
    let response = run(&e.daemon, js(&code)).await;
    let out = result(&response);
    assert_eq!(out["status"], 200);
    assert_eq!(out["ok"], true);
    let echo = &out["echo"];
    assert_eq!(echo["method"], "POST");
    assert_eq!(echo["query"], "q=1");
    assert_eq!(echo["body"], r#"{"a":1}"#);
    assert_eq!(echo["headers"]["x-mine"], "yes");
    assert_eq!(
        echo["authorized"], true,
        "the daemon added the secret: {echo}"
    );
    assert_eq!(out["tls"], json!({"hello": "world"}));
    assert_eq!(out["bytes"], 300);
    assert_eq!(
        out["moved"],
        json!([true, format!("http://127.0.0.1:{http}/echo")])
    );
    assert_eq!(out["seen"], false);
    let everything = format!("{response:?}{}", std::fs::read_to_string(&e.audit).unwrap());
    assert!(
        !everything.contains(SECRET),
        "the secret leaked: {everything}"
    );

    let lines: Vec<Value> = audit_lines(&e.audit)
        .into_iter()
        .filter(|l| l["audit"] == "egress")
        .collect();
    // The POST, the HTTPS GET, the bytes, and a chain of four (two redirects to /redirect/0,
    // which redirects to /echo).
    assert_eq!(lines.len(), 7, "{lines:?}");
    assert_eq!(lines[0]["method"], "POST");
    assert_eq!(lines[0]["path"], "/echo", "no query: {}", lines[0]);
    assert_eq!(lines[1]["scheme"], "https");
    let hops: Vec<&Value> = lines[3..].iter().map(|l| &l["redirect"]).collect();
    assert_eq!(hops, [&json!(0), &json!(1), &json!(2), &json!(3)]);
}

#[tokio::test]
async fn javascript_escapes_and_limits_fail_in_the_program_and_leave_the_sandbox_clean() {
    let e = egress(&["--egress-max-requests", "12"]).await;
    let (http, https) = (e.http.port(), e.https.port());
    let urls = [
        format!("http://localhost:{http}/echo"), // a name resolving to loopback
        "http://169.254.169.254/latest/meta-data/".to_owned(), // cloud metadata
        format!("http://user:pw@127.0.0.1:{http}/echo"), // userinfo
        format!("ftp://127.0.0.1:{http}/"),      // not HTTP
        format!("http://127.0.0.1:{http}/to?http://127.0.0.1:1/"), // a redirect elsewhere
        format!("http://127.0.0.1:{http}/bytes/70000"), // past the received cap
        format!("http://127.0.0.1:{http}/slow"), // past the request's time
        format!("http://127.0.0.1:{http}/a/../echo"), // a dot segment
        format!("https://127.0.0.1:{https}/json"), // POST where GET only
    ];
    let code = format!(
        "const kinds = [];\n\
         for (const url of {urls}) {{\n\
           try {{ await fetch(url, url.startsWith('https') ? {{method: 'POST', body: 'x'}} : {{}}); kinds.push('ok'); }}\n\
           catch (e) {{ kinds.push(e instanceof TypeError ? e.cause.kind : 'not a TypeError'); }}\n\
         }}\n\
         let connect; try {{ await fetch('http://127.0.0.1:{http}/', {{method: 'CONNECT'}}); }} catch (e) {{ connect = e.cause.kind; }}\n\
         ({{kinds, connect}})",
        urls = json!(urls),
    );
    let response = run(&e.daemon, js(&code)).await;
    let out = result(&response);
    assert_eq!(
        out["kinds"],
        json!([
            "refused", "refused", "invalid", "invalid", "refused", "limit", "timeout", "invalid",
            "refused"
        ]),
        "{out}"
    );
    assert_eq!(out["connect"], "invalid");

    // Twelve requests an execution: the thirteenth fails; the next execution starts afresh. (The
    // program ends in its `try`, as agents' programs do: its value is the `catch` block's.)
    let many = format!(
        "let n = 0;\n\
         try {{ for (;;) {{ await fetch('http://127.0.0.1:{http}/json'); n++; }} }} \
         catch (e) {{ [n, e.cause.kind] }}"
    );
    assert_eq!(
        result(&run(&e.daemon, js(&many)).await),
        &json!([12, "limit"])
    );
    assert_eq!(
        result(&run(&e.daemon, js(&many)).await),
        &json!([12, "limit"])
    );

    // A request narrowing the rules to the HTTPS server only: the HTTP one is refused.
    let narrowed = hyperlightd_client::ExecRequest {
        network: Some(Network {
            allow: vec![AllowRule {
                scheme: "https".into(),
                host: "127.0.0.1".into(),
                port: Some(https),
                methods: Some(vec!["GET".into()]),
                path_prefix: None,
            }],
        }),
        ..js(&format!(
            "const ok = (await fetch('https://127.0.0.1:{https}/json')).status;\n\
             try {{ await fetch('http://127.0.0.1:{http}/json'); 'fetched' }} catch (e) {{ [ok, e.cause.kind] }}"
        ))
    };
    assert_eq!(
        result(&run(&e.daemon, narrowed).await),
        &json!([200, "refused"])
    );
    // Widening is refused before anything runs.
    let wider = hyperlightd_client::ExecRequest {
        network: Some(Network {
            allow: vec![AllowRule {
                scheme: "https".into(),
                host: "example.com".into(),
                port: None,
                methods: None,
                path_prefix: None,
            }],
        }),
        ..js("1")
    };
    let refused = e
        .daemon
        .client()
        .exec(&wider)
        .await
        .unwrap_err()
        .to_string();
    assert!(refused.contains("only narrow"), "{refused}");

    // hlctl narrows the same way: --allow, and --no-network for nothing at all.
    let reach = format!(
        "let got = 'reached';\n\
         try {{ await fetch('https://127.0.0.1:{https}/json'); }} catch (e) {{ got = e.cause.kind; }}\n\
         got"
    );
    let allow = format!("GET https://127.0.0.1:{https}");
    for (option, expected) in [
        (vec!["--allow", allow.as_str()], "\"reached\"\n"),
        (vec!["--no-network"], "\"refused\"\n"),
    ] {
        let mut args = vec!["exec", "--lang", "js", "-e", reach.as_str()];
        args.extend(option);
        let out = e.daemon.hlctl(&args, "").await;
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        assert_eq!(String::from_utf8_lossy(&out.stdout), expected, "{args:?}");
    }

    // Health names the rules and where the secret goes, never its value.
    let health = e.daemon.client().health().await.unwrap();
    let egress = health.egress.expect("egress is on");
    assert_eq!(egress.rules.len(), 3, "{egress:?}");
    assert_eq!(egress.max_requests, 12);
    let [secret] = &egress.secrets[..] else {
        panic!("{egress:?}")
    };
    let destination = format!("http://127.0.0.1:{http}/echo authorization: from file:");
    assert!(secret.starts_with(&destination), "{secret}");
    assert!(!format!("{egress:?}").contains(SECRET));
}

/// A Python program (either runtime) reaches the servers through urllib, as usual: GET, POST,
/// HTTPS, an HTTP error raised as HTTPError, a refusal as URLError, a custom opener; and has
/// no socket of its own.
pub async fn python_fetches_through_urllib(daemon: &Daemon, servers: &Servers) {
    let (http, https) = (servers.http.port(), servers.https.port());
    let code = format!(
        r#"
import http.client, json, os, urllib.error, urllib.request
post = urllib.request.Request("http://127.0.0.1:{http}/echo?q=1", data=json.dumps({{"a": 1}}).encode(),
                              headers={{"Content-Type": "application/json"}}, method="POST")
with urllib.request.urlopen(post) as r:
    status, echo = r.status, json.load(r)
tls = json.load(urllib.request.urlopen("https://127.0.0.1:{https}/json"))
try:
    urllib.request.urlopen("http://127.0.0.1:{http}/status/404")
    code = None
except urllib.error.HTTPError as e:
    code = e.code
try:
    urllib.request.urlopen("http://169.254.169.254/latest/meta-data/")
    refused = None
except urllib.error.URLError as e:
    refused = str(e.reason).split(":")[0]
custom = urllib.request.build_opener().open("http://127.0.0.1:{http}/json").status
try:
    http.client.HTTPConnection("127.0.0.1", {http}, timeout=1).request("GET", "/json")
    socket = "connected"
except OSError as e:
    socket = type(e).__name__
{{"status": status, "echo": echo, "tls": tls, "code": code, "refused": refused, "custom": custom,
 "socket": socket, "env": any("{start}" in v for v in os.environ.values())}}
"#,
        start = &SECRET[..8],
    );
    let response = run(daemon, hyperlightd_e2e::py(&code)).await;
    let out = result(&response);
    assert_eq!(out["status"], 200, "{out}");
    assert_eq!(out["echo"]["method"], "POST");
    assert_eq!(out["echo"]["query"], "q=1");
    assert_eq!(out["echo"]["body"], r#"{"a": 1}"#);
    assert_eq!(out["echo"]["authorized"], true, "{out}");
    assert_eq!(out["tls"], json!({"hello": "world"}));
    assert_eq!(out["code"], 404);
    assert_eq!(out["refused"], "refused");
    assert_eq!(out["custom"], 200);
    assert_ne!(out["socket"], "connected", "{out}");
    assert_eq!(out["env"], false);
    let log = std::fs::read_to_string(&servers.audit).unwrap();
    assert!(
        !format!("{response:?}{log}").contains(SECRET),
        "the secret leaked"
    );
}
