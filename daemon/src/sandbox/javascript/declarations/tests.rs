use super::*;

/// The runner's answers (guest/javascript/tests/declaration-cases.json, written and checked by
/// the Node tests from program.js): each program, and the text its scan makes of it without
/// compiling it, or null.
const CASES: &str = include_str!("../../../../../guest/javascript/tests/declaration-cases.json");

#[derive(serde::Deserialize)]
struct Case {
    code: String,
    declared: Option<String>,
}

#[test]
fn the_host_answers_as_the_runner_does() {
    let cases: Vec<Case> = serde_json::from_str(CASES).unwrap();
    assert!(cases.len() > 1000, "{} cases", cases.len());
    let mut answered = 0;
    for case in &cases {
        assert_eq!(
            session_program(&case.code),
            case.declared,
            "{:?}",
            case.code
        );
        answered += usize::from(case.declared.is_some());
    }
    assert!(
        answered * 3 > cases.len(),
        "answered {answered} of {}",
        cases.len()
    );
}

#[test]
fn common_programs_are_answered() {
    let body = "const xs = []; for (let i = 0; i < 100; i++) xs.push(i * i); \
                JSON.stringify(xs.reduce((a, b) => a + b, 0))";
    assert_eq!(
        session_program(body).as_deref(),
        Some(
            "var   xs = []; for (let i = 0; i < 100; i++) xs.push(i * i); \
             JSON.stringify(xs.reduce((a, b) => a + b, 0))"
        )
    );
    assert_eq!(session_program("n += 1").as_deref(), Some("n += 1"));
    assert_eq!(
        session_program("let a = 1\nclass B { m() { return a } }\nconst c = new B()").as_deref(),
        Some("var a = 1\nvar B = class B { m() { return a } };\nvar   c = new B()")
    );
    // Early errors a `let` has and a `var` lacks: left to the runner, which compiles.
    for uncertain in [
        "let a; let a;",
        "var a; let b = 1",
        "const a;",
        "let a = 1, b = 2",
    ] {
        assert_eq!(session_program(uncertain), None, "{uncertain}");
    }
    // `function //x` names x, as the runner's regular expression finds it by backtracking.
    assert_eq!(session_program("let x = 1\nfunction //x"), None);
}
