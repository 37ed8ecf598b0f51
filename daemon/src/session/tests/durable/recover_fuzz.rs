//! Property-based fuzzing of a state directory read back by a restarted daemon: a session's
//! `session.json`, its `journal` and its checkpoints' records, with one field set to any value,
//! cut short, or a byte changed. The session must then be refused (not listed), or served
//! consistently: what it lists is what it serves, its next checkpoint takes a number no
//! checkpoint had, and a second restart agrees. `PROPTEST_CASES` sets the cases (64 by default:
//! each case writes and reads a state directory twice; developing.md has a longer run).

use proptest::prelude::*;
use serde_json::Value;

use super::*;

/// A change to one file of the session's directory.
#[derive(Debug, Clone)]
enum Damage {
    /// Of the file's JSON (or its JSON line `line` from the last, in the journal), the `key`th
    /// field (in its order) set to `value`.
    Field {
        line: usize,
        key: usize,
        value: Value,
    },
    /// The file cut to `len % (its length + 1)` bytes.
    Cut(usize),
    /// Byte `at % its length` set to `value`.
    Byte { at: usize, value: u8 },
}

fn value() -> impl Strategy<Value = Value> {
    // Small numbers most: a checkpoint's number, a count, a format, near what is there.
    let leaf = prop_oneof![
        4 => (0u64..4).prop_map(Value::from),
        1 => Just(Value::Null),
        1 => any::<bool>().prop_map(Value::from),
        1 => any::<u64>().prop_map(Value::from),
        1 => any::<i64>().prop_map(Value::from),
        1 => Just(Value::from(u64::MAX)),
        1 => "[a-z0-9./_-]{0,12}".prop_map(Value::from),
    ];
    leaf.prop_recursive(2, 8, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
            proptest::collection::btree_map("[a-z_]{1,10}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn damage() -> impl Strategy<Value = Damage> {
    prop_oneof![
        2 => (prop_oneof![3 => Just(0usize), 1 => 1usize..4], 0usize..12, value())
            .prop_map(|(line, key, value)| Damage::Field { line, key, value }),
        1 => any::<usize>().prop_map(Damage::Cut),
        1 => (any::<usize>(), any::<u8>()).prop_map(|(at, value)| Damage::Byte { at, value }),
    ]
}

/// Which of the session's files: its session.json, its journal, checkpoint 1's or 2's record.
fn file(root: &Path, id: &str, which: usize) -> PathBuf {
    let dir = root.join("sessions").join(id);
    match which % 4 {
        0 => dir.join("session.json"),
        1 => dir.join("journal"),
        n => checkpoint_dir(root, id, n as u64 - 1).join("checkpoint.json"),
    }
}

fn apply(path: &Path, damage: &Damage) {
    let mut bytes = fs::read(path).unwrap();
    match damage {
        Damage::Cut(len) => bytes.truncate(len % (bytes.len() + 1)),
        Damage::Byte { at, value } if !bytes.is_empty() => {
            let len = bytes.len();
            bytes[at % len] = *value;
        }
        Damage::Byte { .. } => {}
        Damage::Field { line, key, value } => {
            let set = |json: &mut Value| {
                if let Some(object) = json.as_object_mut() {
                    let keys: Vec<String> = object.keys().cloned().collect();
                    object.insert(keys[key % keys.len()].clone(), value.clone());
                }
            };
            // A JSON file (session.json, a record), or JSON lines (the journal).
            if let Ok(mut json) = serde_json::from_slice::<Value>(&bytes) {
                set(&mut json);
                bytes = serde_json::to_vec_pretty(&json).unwrap();
            } else {
                let text = String::from_utf8(bytes).unwrap();
                let mut lines: Vec<String> = text.lines().map(str::to_owned).collect();
                // Counted from the last: the line a restart reads, most often.
                let line = lines.len() - 1 - line % lines.len();
                let mut json: Value = serde_json::from_str(&lines[line]).unwrap();
                set(&mut json);
                lines[line] = json.to_string();
                bytes = (lines.join("\n") + "\n").into_bytes();
            }
        }
    }
    fs::write(path, bytes).unwrap();
}

/// A session of two execs (states 7 and 8) in the state directory `root`, its daemon stopped.
async fn saved(root: &Path) -> String {
    let (sessions, _) = daemon(root, "1", Duration::MAX);
    let id = create(&sessions);
    exec(&sessions, &id, 7).await;
    exec(&sessions, &id, 8).await;
    stop(sessions);
    id
}

/// What a restarted daemon serves of session `id`: None if it is refused; else its numbers and
/// the state of its newest checkpoint, after an exec that must take a new number.
async fn served(sessions: &Arc<Sessions>, id: &str) -> Result<Option<Vec<u64>>, TestCaseError> {
    let info = match sessions.get(OWNER, id) {
        Err(ExecError::SessionNotFound(_)) => return Ok(None),
        Err(other) => return Err(TestCaseError::fail(format!("{other}"))),
        Ok(info) => info,
    };
    if info.gone.is_some() {
        return Ok(Some(Vec::new()));
    }
    let listed = sessions.checkpoints(OWNER, id, WAIT).await;
    let listed: Vec<u64> = listed
        .map_err(|e| TestCaseError::fail(e.to_string()))?
        .iter()
        .map(|c| c.number)
        .collect();
    prop_assert!(listed.contains(&info.checkpoint), "{info:?} {listed:?}");
    let (answer, started) = exec(sessions, id, 9).await;
    prop_assert!(matches!(started, None | Some(7) | Some(8)), "{started:?}");
    prop_assert!(
        listed.iter().all(|&n| answer.checkpoint > n),
        "checkpoint {} reuses a number of {listed:?}",
        answer.checkpoint
    );
    Ok(Some(listed))
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|c| c.parse().ok()).unwrap_or(64),
        ..ProptestConfig::default()
    })]

    #[test]
    fn a_damaged_state_directory_is_refused_or_served_consistently(
        which in 0usize..4,
        damage in damage(),
    ) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(async {
            let root = tempfile::tempdir().unwrap();
            let id = saved(root.path()).await;
            apply(&file(root.path(), &id, which), &damage);

            let (sessions, _) = daemon(root.path(), "1", Duration::MAX);
            let first = served(&sessions, &id).await?;
            stop(sessions);
            // A second restart reads what the first left, and agrees on the session's fate.
            let (sessions, _) = daemon(root.path(), "1", Duration::MAX);
            let listed = sessions.get(OWNER, &id).is_ok();
            prop_assert_eq!(listed, first.is_some(), "the second restart differs");
            if first.is_some_and(|numbers| !numbers.is_empty()) {
                prop_assert_eq!(state_of(&sessions, &id).await, Some(9));
            }
            stop(sessions);
            Ok(())
        })?;
    }
}

/// Found by the property above: a record's `bytes` near `u64::MAX` made the history's sum
/// overflow in the save after the next exec, whose task then never freed the session.
#[tokio::test]
async fn a_record_s_huge_size_does_not_stop_the_next_save() {
    let root = tempfile::tempdir().unwrap();
    let id = saved(root.path()).await;
    let record = file(root.path(), &id, 2);
    let mut json: Value = serde_json::from_slice(&fs::read(&record).unwrap()).unwrap();
    json["bytes"] = Value::from(u64::MAX);
    fs::write(&record, serde_json::to_vec(&json).unwrap()).unwrap();

    let (sessions, _) = daemon(root.path(), "1", Duration::MAX);
    let (answer, started) = exec(&sessions, &id, 9).await;
    assert_eq!((answer.checkpoint, started), (3, Some(8)));
    assert!(sessions.flush(WAIT), "the save after it ended");
    assert_eq!(state_of(&sessions, &id).await, Some(9));
}

/// A session whose journal's last line has `field` set to `value`, restarted.
async fn with_journal(field: &str, value: Value) -> (tempfile::TempDir, Arc<Sessions>, String) {
    let root = tempfile::tempdir().unwrap();
    let id = saved(root.path()).await;
    let journal = file(root.path(), &id, 1);
    let text = fs::read_to_string(&journal).unwrap();
    let mut json: Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    json[field] = value;
    fs::write(&journal, format!("{text}{json}\n")).unwrap();
    let (sessions, _) = daemon(root.path(), "1", Duration::MAX);
    (root, sessions, id)
}

/// Found by the property above: a journal whose `next` is a number its checkpoints have had
/// gave the next exec's checkpoint that number again; one near `u64::MAX`, or a count there,
/// made the next exec's task overflow.
#[tokio::test]
async fn a_journal_s_numbers_are_never_reused_nor_overflow() {
    let (_root, sessions, id) = with_journal("next", Value::from(0)).await;
    let (answer, started) = exec(&sessions, &id, 9).await;
    assert_eq!((answer.checkpoint, started), (3, Some(8)));

    let (_root, sessions, id) = with_journal("next", Value::from(u64::MAX)).await;
    assert!(
        matches!(sessions.get(OWNER, &id), Err(ExecError::SessionNotFound(_))),
        "refused"
    );

    let (_root, sessions, id) = with_journal("execs", Value::from(u64::MAX)).await;
    let (answer, _) = exec(&sessions, &id, 9).await;
    assert_eq!(answer.checkpoint, 3);
    assert_eq!(sessions.get(OWNER, &id).unwrap().execs, u64::MAX);
}
