use std::str::FromStr;

use pep508_rs::pep440_rs::Version;
use pep508_rs::{MarkerEnvironment, PackageName, Requirement};

use super::*;
use crate::packages::policy::Pattern;
use crate::packages::testing::{FakeIndex, wheel};

fn markers() -> MarkerEnvironment {
    crate::packages::markers(&Version::from_str("3.11.2").unwrap()).unwrap()
}

fn policy() -> Policy {
    Policy {
        allow: vec![Pattern::parse("*").unwrap()],
        deny: vec![Pattern::parse("evil").unwrap()],
        max_wheel_bytes: 1 << 20,
        max_per_session: 8,
    }
}

fn name(text: &str) -> PackageName {
    PackageName::from_str(text).unwrap()
}

async fn plan(index: &FakeIndex, wants: &[&str], installed: &Installed) -> Result<Plan, Refusal> {
    plan_with(index, wants, installed, &policy()).await
}

async fn plan_with(
    index: &FakeIndex,
    wants: &[&str],
    installed: &Installed,
    policy: &Policy,
) -> Result<Plan, Refusal> {
    let markers = markers();
    let python = Version::from_str("3.11.2").unwrap();
    let guest = Guest {
        tags: GuestTags::NATIVE,
        markers: &markers,
        python: &python,
        installed,
    };
    let requirements = wants
        .iter()
        .map(|w| Requirement::from_str(w).unwrap())
        .collect();
    resolve(requirements, &guest, policy, index).await
}

fn runtime(pairs: &[(&str, &str)]) -> Installed {
    pairs
        .iter()
        .map(|(n, v)| (name(n), (Version::from_str(v).unwrap(), Place::Runtime)))
        .collect()
}

fn installed_names(plan: &Plan) -> Vec<String> {
    plan.install
        .iter()
        .map(|p| format!("{}=={}", p.name, p.version))
        .collect()
}

#[tokio::test]
async fn the_newest_fitting_versions_with_their_dependencies_skipping_what_is_there() {
    let mut index = FakeIndex::default();
    index.pure(
        "markdown-it-py",
        "3.0.0",
        &["mdurl~=0.1.0", "pytest; extra == \"testing\""],
    );
    index.pure("markdown-it-py", "2.0.0", &["mdurl"]);
    index.pure(
        "mdurl",
        "0.1.2",
        &["numpy>=1.20", "colorama; sys_platform == \"win32\""],
    );
    index.pure("mdurl", "0.2.0", &[]);
    index.pure("new-thing", "2.0.0rc1", &[]);
    let have = runtime(&[("numpy", "1.24.2")]);
    let chosen = plan(&index, &["markdown-it-py", "numpy"], &have)
        .await
        .unwrap();
    assert_eq!(
        installed_names(&chosen),
        ["markdown-it-py==3.0.0", "mdurl==0.1.2"]
    );
    assert_eq!(chosen.install[1].needed_by, Some(name("markdown-it-py")));
    assert_eq!(
        chosen.satisfied,
        [(name("numpy"), Version::from_str("1.24.2").unwrap())]
    );
    // A pre-release only when asked for by version.
    let refused = plan_with(&index, &["new-thing"], &have, &policy())
        .await
        .unwrap_err();
    assert!(matches!(refused, Refusal::NoWheel { .. }), "{refused}");
    let pre = plan_with(&index, &["new-thing==2.0.0rc1"], &have, &policy()).await;
    assert_eq!(installed_names(&pre.unwrap()), ["new-thing==2.0.0rc1"]);
}

#[tokio::test]
async fn a_binary_wheel_is_chosen_over_a_pure_one_and_sdists_are_never() {
    let mut index = FakeIndex::default();
    index.pure("msgpack", "1.1.0", &[]);
    let native = wheel("msgpack", "1.1.0", &[], &[]);
    index.add(
        "msgpack",
        "msgpack-1.1.0-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl",
        native,
    );
    index.add("msgpack", "msgpack-1.2.0.tar.gz", b"sdist".to_vec());
    index.add("only-source", "only_source-1.0.tar.gz", b"sdist".to_vec());
    index.add(
        "other-platform",
        "other_platform-1.0-cp312-cp312-win_amd64.whl",
        wheel("other-platform", "1.0", &[], &[]),
    );
    let chosen = plan(&index, &["msgpack"], &Installed::new()).await.unwrap();
    assert!(
        chosen.install[0].filename.contains("manylinux"),
        "{:?}",
        chosen.install[0].filename
    );
    let refused = plan(&index, &["only-source"], &Installed::new())
        .await
        .unwrap_err();
    assert!(
        refused.to_string().contains("only source distributions"),
        "{refused}"
    );
    let refused = plan(&index, &["other-platform"], &Installed::new())
        .await
        .unwrap_err();
    assert!(
        refused.to_string().contains("CPython 3.11 on Linux x86_64"),
        "{refused}"
    );
    let refused = plan(&index, &["absent"], &Installed::new())
        .await
        .unwrap_err();
    assert_eq!(
        refused,
        Refusal::NotFound {
            name: name("absent")
        }
    );
}

#[tokio::test]
async fn conflicts_are_refused_with_both_sides_named() {
    let mut index = FakeIndex::default();
    index.pure("needs-new-numpy", "1.0", &["numpy>=2"]);
    index.pure("a", "1.0", &["b==1.0", "c"]);
    index.pure("b", "1.0", &[]);
    index.pure("b", "2.0", &[]);
    index.pure("c", "1.0", &["b>=2"]);
    let have = runtime(&[("numpy", "1.24.2")]);
    let refused = plan(&index, &["needs-new-numpy"], &have).await.unwrap_err();
    let text = refused.to_string();
    assert!(text.contains("needs-new-numpy needs numpy>=2"), "{text}");
    assert!(text.contains("the runtime has numpy 1.24.2"), "{text}");
    let refused = plan(&index, &["a"], &Installed::new()).await.unwrap_err();
    assert!(refused.to_string().contains("c needs b>=2"), "{refused}");
    let refused = plan(&index, &["numpy==2.0"], &have).await.unwrap_err();
    assert!(
        refused.to_string().contains("the request needs numpy==2.0"),
        "{refused}"
    );
}

#[tokio::test]
async fn the_policy_is_kept_for_dependencies_too() {
    let mut index = FakeIndex::default();
    index.pure("nice", "1.0", &["evil"]);
    index.pure("evil", "1.0", &[]);
    index.pure("x", "1.0", &["y", "z"]);
    index.pure("y", "1.0", &[]);
    index.pure("z", "1.0", &[]);
    let refused = plan(&index, &["nice"], &Installed::new())
        .await
        .unwrap_err();
    assert!(
        refused.to_string().contains("evil (needed by nice)"),
        "{refused}"
    );
    assert!(
        index
            .fetched
            .lock()
            .unwrap()
            .iter()
            .all(|f| !f.starts_with("evil"))
    );
    let small = Policy {
        max_per_session: 3,
        ..policy()
    };
    let mut have = Installed::new();
    have.insert(name("w"), (Version::from_str("1").unwrap(), Place::Session));
    let refused = plan_with(&index, &["x"], &have, &small).await.unwrap_err();
    assert_eq!(refused, Refusal::TooMany { wanted: 3, max: 3 });
    let tiny = Policy {
        max_wheel_bytes: 10,
        ..policy()
    };
    let refused = plan_with(&index, &["y"], &Installed::new(), &tiny)
        .await
        .unwrap_err();
    assert!(matches!(refused, Refusal::TooLarge { .. }), "{refused}");
}

#[tokio::test]
async fn a_wheel_whose_bytes_or_metadata_are_not_what_is_listed_is_refused() {
    let mut index = FakeIndex::default();
    index.pure("tampered", "1.0", &[]).sha256 = Some("0".repeat(64));
    index.add(
        "liar",
        "liar-1.0-py3-none-any.whl",
        wheel("someone-else", "1.0", &[], &[]),
    );
    index.pure("yanked", "1.0", &[]).yanked = true;
    index.pure("unhashed", "1.0", &[]).sha256 = None;
    let refused = plan(&index, &["tampered"], &Installed::new())
        .await
        .unwrap_err();
    assert!(matches!(refused, Refusal::HashMismatch { .. }), "{refused}");
    let refused = plan(&index, &["liar"], &Installed::new())
        .await
        .unwrap_err();
    assert!(
        refused.to_string().contains("says someone-else 1.0"),
        "{refused}"
    );
    assert!(plan(&index, &["yanked"], &Installed::new()).await.is_err());
    assert!(
        plan(&index, &["yanked==1.0"], &Installed::new())
            .await
            .is_ok()
    );
    let refused = plan(&index, &["unhashed"], &Installed::new())
        .await
        .unwrap_err();
    assert!(refused.to_string().contains("with a hash"), "{refused}");
    let refused = plan(&index, &["x @ https://e/x.whl"], &Installed::new())
        .await
        .unwrap_err();
    assert!(matches!(refused, Refusal::Invalid(_)), "{refused}");
}
