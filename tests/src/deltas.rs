//! A session's state against a model of it: a buffer of guest memory that each exec writes a
//! few pages of (and one whole page), and whose digest it answers, driven through a chain of
//! checkpoints with rollbacks, forks and a deleted origin interleaved. Each checkpoint holds
//! only the pages its exec changed over those of its parent (hyperlight-host patch 0003), so
//! every answer checks that a chain of such deltas, loaded or resumed, is byte for byte the
//! memory the execs left, and that a fork and its origin never see each other's writes.

use std::collections::BTreeMap;

use hyperlightd_client::{
    CheckpointInfo, Client, CreateSessionRequest, ExecResponse, ExecStatus, Language,
    SessionExecRequest,
};
use serde_json::json;

use crate::{STEP_LIMIT, within};

/// Pages of the buffer: enough that a delta is a few pages of many.
const PAGES: usize = 64;
const PAGE: usize = 4096;

/// The buffer as the model keeps it.
#[derive(Clone)]
struct Model(Vec<u8>);

impl Model {
    fn new() -> Model {
        Model(vec![0; PAGES * PAGE])
    }

    /// Exec `i`'s writes: a byte in each of eight pages, then page `i % PAGES` filled.
    fn step(&mut self, i: usize) {
        for j in 0..8 {
            let page = (i * 7 + j * 13) % PAGES;
            self.0[page * PAGE + (i * 31 + j * 17) % PAGE] = ((i + j) % 256) as u8;
        }
        let page = i % PAGES;
        self.0[page * PAGE..(page + 1) * PAGE].fill((i % 256) as u8);
    }

    /// The sum of each little-endian 32-bit word times its position (from 1), mod 2^32.
    fn digest(&self) -> u64 {
        let words = self
            .0
            .chunks_exact(4)
            .map(|w| u32::from_le_bytes(w.try_into().expect("four bytes")));
        let sum = words
            .zip(1u32..)
            .fold(0u32, |h, (w, k)| h.wrapping_add(w.wrapping_mul(k)));
        u64::from(sum)
    }
}

/// The program that makes the buffer and its digest, in `language`.
fn setup(language: Language) -> String {
    match language {
        Language::Javascript => format!(
            "globalThis.buf = new Uint8Array({PAGES} * {PAGE});\n\
             globalThis.digest = () => {{ const w = new Uint32Array(buf.buffer); let h = 0;\n\
             for (let k = 0; k < w.length; k++) h = (h + Math.imul(w[k], k + 1)) >>> 0;\n\
             return h; }};\ndigest()"
        ),
        Language::Python => format!(
            "from array import array\nbuf = bytearray({PAGES} * {PAGE})\n\
             def digest():\n    w = array('I', bytes(buf))\n\
             \x20   return sum(x * (k + 1) for k, x in enumerate(w)) % 2**32\ndigest()"
        ),
    }
}

/// Exec `i`'s program: [`Model::step`], then the digest.
fn step(language: Language, i: usize) -> String {
    match language {
        Language::Javascript => format!(
            "(() => {{ const i = {i};\n\
             for (let j = 0; j < 8; j++) {{ const p = (i * 7 + j * 13) % {PAGES};\n\
             buf[p * {PAGE} + (i * 31 + j * 17) % {PAGE}] = (i + j) % 256; }}\n\
             const p = i % {PAGES}; buf.fill(i % 256, p * {PAGE}, (p + 1) * {PAGE});\n\
             return digest(); }})()"
        ),
        Language::Python => format!(
            "for j in range(8):\n\
             \x20   p = ({i} * 7 + j * 13) % {PAGES}\n\
             \x20   buf[p * {PAGE} + ({i} * 31 + j * 17) % {PAGE}] = ({i} + j) % 256\n\
             p = {i} % {PAGES}\nbuf[p * {PAGE}:(p + 1) * {PAGE}] = bytes([{i} % 256]) * {PAGE}\n\
             digest()"
        ),
    }
}

/// A live session of the run: the model of each of its checkpoints, and the one it is at.
struct Tracked {
    id: String,
    at: u64,
    models: BTreeMap<u64, Model>,
}

impl Tracked {
    fn model(&self) -> Model {
        self.models[&self.at].clone()
    }
}

/// Runs `execs` execs in `language` across sessions that roll back, fork and lose their
/// origin, comparing every answer with the model; checkpoint bytes must stay under
/// `most_checkpoint_bytes` (a whole copy of the guest would not).
pub async fn a_chain_of_deltas_matches_its_model(
    client: &Client,
    language: Language,
    execs: usize,
    most_checkpoint_bytes: u64,
) {
    let created = within(
        "create",
        STEP_LIMIT,
        client.create_session(&CreateSessionRequest::new(language)),
    )
    .await
    .expect("a session");
    // Its checkpoint 0, the warm state, has no buffer: the model starts at the setup's.
    let first = run(client, &created.id, &setup(language)).await;
    assert_eq!(first.result, json!(Model::new().digest()), "{first:?}");
    let at = first.session.expect("a session exec").checkpoint;
    let mut live = vec![Tracked {
        id: created.id,
        at,
        models: BTreeMap::from([(at, Model::new())]),
    }];

    for i in 1..=execs {
        let which = i % live.len();
        match i % 10 {
            // Back to the checkpoint before the last one, when it is still kept.
            3 => rollback(client, &mut live[which]).await,
            6 => {
                let fork = fork(client, &live[which]).await;
                live.push(fork);
            }
            // The first session goes, once it has forks: they keep their state.
            9 if live.len() > 2 && i < 20 => {
                let origin = live.remove(0);
                within("delete", STEP_LIMIT, client.delete_session(&origin.id))
                    .await
                    .expect("the origin deleted");
            }
            _ => {}
        }
        let which = i % live.len();
        let session = &mut live[which];
        let mut model = session.model();
        model.step(i);
        let answer = run(client, &session.id, &step(language, i)).await;
        assert_eq!(
            answer.result,
            json!(model.digest()),
            "{language}: exec {i} in session {} from checkpoint {}: {answer:?}",
            session.id,
            session.at
        );
        session.at = answer.session.expect("a session exec").checkpoint;
        session.models.insert(session.at, model);
    }
    let mut kept = 0;
    for session in &live {
        let checkpoints = checkpoints(client, &session.id).await;
        for checkpoint in &checkpoints {
            assert!(
                checkpoint.bytes <= most_checkpoint_bytes,
                "{language}: checkpoint {} holds {} bytes: {checkpoints:?}",
                checkpoint.checkpoint,
                checkpoint.bytes
            );
        }
        kept += checkpoints.len() as u64;
    }
    // The memory the sessions hold counts each file once, however many checkpoints map it
    // (a rolled-back or deleted checkpoint's pages as long as a later one or a fork maps
    // them): within what the kept checkpoints could hold, and nothing once they are gone.
    let held = session_memory(client, language).await;
    eprintln!("{language}: {kept} checkpoints kept hold {held} bytes");
    assert!(
        held > 0 && held <= kept * most_checkpoint_bytes,
        "{language}: {held} bytes for {kept} checkpoints"
    );
    for session in &live {
        within("delete", STEP_LIMIT, client.delete_session(&session.id))
            .await
            .expect("deleted");
    }
    let started = std::time::Instant::now();
    while session_memory(client, language).await > 0 {
        assert!(
            started.elapsed() < STEP_LIMIT,
            "{language}: memory held after every session went: {} bytes",
            session_memory(client, language).await
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

/// The memory `language`'s sessions hold, as health reports it.
async fn session_memory(client: &Client, language: Language) -> u64 {
    let health = within("health", STEP_LIMIT, client.health())
        .await
        .expect("health");
    health
        .sessions
        .get(&language)
        .map_or(0, |counts| counts.memory_bytes)
}

async fn run(client: &Client, id: &str, code: &str) -> ExecResponse {
    let request = SessionExecRequest {
        timeout_ms: Some(60_000),
        ..SessionExecRequest::new(code)
    };
    let limit = std::time::Duration::from_secs(150);
    let answer = within("session exec", limit, client.session_exec(id, &request))
        .await
        .unwrap_or_else(|e| panic!("session exec of {code:?} failed: {e}"));
    assert_eq!(answer.status, ExecStatus::Ok, "{code}: {answer:?}");
    assert!(!answer.session.as_ref().expect("a session exec").rolled_back);
    answer
}

async fn checkpoints(client: &Client, id: &str) -> Vec<CheckpointInfo> {
    within("checkpoints", STEP_LIMIT, client.session_checkpoints(id))
        .await
        .expect("its checkpoints")
}

async fn rollback(client: &Client, session: &mut Tracked) {
    let Some(&to) = session
        .models
        .range(..session.at)
        .next_back()
        .map(|(n, _)| n)
    else {
        return;
    };
    let kept = checkpoints(client, &session.id).await;
    if !kept.iter().any(|c| c.checkpoint == to) {
        return;
    }
    let info = within(
        "rollback",
        STEP_LIMIT,
        client.rollback_session(&session.id, to),
    )
    .await
    .expect("rolled back");
    assert_eq!(info.checkpoint, to);
    session.at = to;
}

async fn fork(client: &Client, origin: &Tracked) -> Tracked {
    let info = within("fork", STEP_LIMIT, client.fork_session(&origin.id))
        .await
        .expect("a fork");
    Tracked {
        id: info.id,
        at: info.checkpoint,
        models: BTreeMap::from([(info.checkpoint, origin.model())]),
    }
}
