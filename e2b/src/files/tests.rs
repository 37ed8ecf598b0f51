#![allow(clippy::unwrap_used)]

use super::*;

#[test]
fn e2b_paths_name_the_working_directory_or_nothing() {
    for (given, at) in [
        ("/home/user", ""),
        ("/home/user/", ""),
        ("/home/user/data.csv", "data.csv"),
        ("/home/user/a/./b/../c.txt", "a/c.txt"),
        ("/work/out/x.png", "out/x.png"),
        ("data.csv", "data.csv"),
        ("./in//a.json", "in/a.json"),
        ("", ""),
    ] {
        assert_eq!(session_path(given).unwrap(), at, "{given}");
    }
    for outside in [
        "/etc/passwd",
        "/home/username/x",
        "/workshop",
        "..",
        "/home/user/../x",
    ] {
        assert!(
            matches!(session_path(outside), Err(Rpc::NotFound(_))),
            "{outside}"
        );
    }
}

#[test]
fn a_tree_tells_files_from_directories_and_lists_them_by_depth() {
    let tree = Tree::new(vec![
        ("a.txt".to_owned(), 3),
        ("d/b.txt".to_owned(), 5),
        ("d/e/c.txt".to_owned(), 7),
    ]);
    assert_eq!(tree.entry(""), Some(None));
    assert_eq!(tree.entry("a.txt"), Some(Some(3)));
    assert_eq!(tree.entry("d/e"), Some(None));
    assert_eq!(tree.entry("d/e/c"), None);
    let names = |entries: Vec<(String, Option<u64>)>| -> Vec<String> {
        entries.into_iter().map(|(path, _)| path).collect()
    };
    assert_eq!(names(tree.list("", 1)), ["a.txt", "d"]);
    assert_eq!(names(tree.list("d", 1)), ["d/b.txt", "d/e"]);
    assert_eq!(
        names(tree.list("", 3)),
        ["a.txt", "d", "d/b.txt", "d/e", "d/e/c.txt"]
    );
}

#[test]
fn entries_are_envds_as_protobuf_json_writes_them() {
    let file = entry_info("d/b.txt", Some(5));
    assert_eq!(file["name"], "b.txt");
    assert_eq!(file["type"], "FILE_TYPE_FILE");
    assert_eq!(file["path"], "/home/user/d/b.txt");
    assert_eq!(file["size"], "5", "an int64 is a string in protobuf's JSON");
    let home = entry_info("", None);
    assert_eq!(home["type"], "FILE_TYPE_DIRECTORY");
    assert_eq!(home["path"], HOME);
}

#[tokio::test]
async fn rpc_errors_are_connects() {
    let response = Rpc::NotFound("x: no such file".to_owned()).response();
    assert_eq!(response.status(), StatusCode::NOT_FOUND);
    let body = response.into_body().collect().await.unwrap().to_bytes();
    let error: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(
        error,
        json!({"code": "not_found", "message": "x: no such file"})
    );
}
