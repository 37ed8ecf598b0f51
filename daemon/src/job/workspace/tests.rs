use super::*;

const LIMITS: FileLimits = FileLimits {
    max_entries: 5,
    max_bytes: 10,
};

fn files(entries: &[(&str, &str)]) -> Files {
    entries
        .iter()
        .map(|(path, text)| ((*path).to_owned(), text.as_bytes().to_vec()))
        .collect()
}

fn workspace(entries: &[(&str, &str)]) -> Workspace {
    let workspace = Workspace::default();
    workspace.begin(&files(entries), LIMITS);
    workspace
}

#[test]
fn given_files_are_there_with_their_directories() {
    let w = workspace(&[("in/a.txt", "abc"), ("b", "")]);
    assert_eq!(w.entry(""), Ok(Entry::Dir));
    assert_eq!(w.entry("in"), Ok(Entry::Dir));
    assert_eq!(w.entry("in/a.txt"), Ok(Entry::File { size: 3 }));
    assert_eq!(w.entry("in/a.txt/x"), Err(FileError::NotDirectory));
    assert_eq!(w.entry("nope"), Err(FileError::NotFound));
    assert_eq!(
        w.list(""),
        Ok(vec![("b".into(), false), ("in".into(), true)])
    );
    assert_eq!(w.read("in/a.txt", 1, 10), Ok((b"bc".to_vec(), true)));
    assert_eq!(w.read("in/a.txt", 0, 1), Ok((b"a".to_vec(), false)));
    assert_eq!(w.read("in", 0, 1), Err(FileError::IsDirectory));
}

#[test]
fn writes_create_extend_and_truncate() {
    let w = workspace(&[("a", "hello")]);
    assert_eq!(w.write("a", Some(1), b"EY"), Ok(5));
    assert_eq!(w.write("a", None, b"!"), Ok(6));
    assert_eq!(w.read("a", 0, 100).unwrap().0, b"hEYlo!");
    assert_eq!(w.open("b", false, false, false), Err(FileError::NotFound));
    assert_eq!(w.open("b", true, false, false), Ok(Entry::File { size: 0 }));
    assert_eq!(w.open("b", true, true, false), Err(FileError::Exists));
    assert_eq!(w.write("b", Some(2), b"x"), Ok(3));
    assert_eq!(w.read("b", 0, 10).unwrap().0, b"\0\0x");
    assert_eq!(w.open("a", false, false, true), Ok(Entry::File { size: 0 }));
    w.set_size("b", 1).unwrap();
    let (out, over) = w.take();
    assert_eq!(out, files(&[("a", ""), ("b", "\0")]));
    assert_eq!(over, None);
    assert_eq!(
        w.entry("a"),
        Err(FileError::NotFound),
        "taken: nothing is left"
    );
}

#[test]
fn caps_on_entries_and_bytes_refuse_writes_and_are_remembered() {
    let w = workspace(&[("a", "12345678")]);
    assert_eq!(w.write("a", None, b"9"), Ok(9));
    assert_eq!(w.write("a", None, b"ab"), Err(FileError::TooLarge));
    assert_eq!(w.set_size("a", 11), Err(FileError::TooLarge));
    assert_eq!(
        w.write("a", Some(0), b"xy"),
        Ok(9),
        "overwriting adds nothing"
    );
    w.set_size("a", 0).unwrap();
    for dir in ["d1", "d2", "d3", "d4"] {
        w.make_dir(dir).unwrap();
    }
    assert_eq!(
        w.open("b", true, false, false),
        Err(FileError::TooManyFiles)
    );
    assert_eq!(w.make_dir("d5"), Err(FileError::TooManyFiles));
    let (out, over) = w.take();
    assert_eq!(out.len(), 1);
    assert_eq!(over, Some(FileError::TooLarge), "the first refusal is kept");
}

#[test]
fn directories_are_made_listed_renamed_and_removed() {
    let w = workspace(&[("d/x", "1")]);
    assert_eq!(w.make_dir("d"), Err(FileError::Exists));
    assert_eq!(w.make_dir("e/f"), Err(FileError::NotFound));
    assert_eq!(w.remove_dir("d"), Err(FileError::NotEmpty));
    assert_eq!(w.remove_dir(""), Err(FileError::NotEmpty));
    assert_eq!(w.remove_file("d"), Err(FileError::IsDirectory));
    w.rename("d", "e").unwrap();
    assert_eq!(w.list("e"), Ok(vec![("x".into(), false)]));
    assert_eq!(w.entry("d"), Err(FileError::NotFound));
    assert_eq!(w.rename("e", "e/inner"), Err(FileError::BadName));
    w.rename("e/x", "y").unwrap();
    w.remove_dir("e").unwrap();
    w.put("p/q/r.txt", b"hi").unwrap();
    assert_eq!(w.entry("p/q"), Ok(Entry::Dir));
    assert_eq!(w.files(), vec![("p/q/r.txt".into(), 2), ("y".into(), 1)]);
    w.remove_file("y").unwrap();
    assert_eq!(w.take().0, files(&[("p/q/r.txt", "hi")]));
}

#[test]
fn a_rename_replaces_a_file_and_keeps_the_byte_count() {
    let w = workspace(&[("a", "1234"), ("b", "56")]);
    w.rename("a", "b").unwrap();
    assert_eq!(
        w.write("b", None, b"789012"),
        Ok(10),
        "2 bytes freed, 10 in all"
    );
    assert_eq!(w.write("b", None, b"x"), Err(FileError::TooLarge));
}

#[test]
fn changes_follow_a_programs_rules_and_one_refused_changes_nothing() {
    let write = |path: &str, text: &str| FileChange::Write {
        path: path.to_owned(),
        bytes: text.as_bytes().to_vec(),
    };
    let moving = |from: &str, to: &str| FileChange::Move {
        from: from.to_owned(),
        to: to.to_owned(),
    };
    let remove = |path: &str| FileChange::Remove {
        path: path.to_owned(),
    };
    let base = files(&[("a", "1"), ("d/b", "2")]);
    let made = changed(
        &base,
        &[
            write("a", "new"),
            moving("d", "e"),
            write("e/c", "3"),
            remove("a"),
        ],
        LIMITS,
    );
    assert_eq!(made, Ok(files(&[("e/b", "2"), ("e/c", "3")])));
    for (changes, path, error) in [
        (vec![remove("x")], "x", FileError::NotFound),
        (vec![moving("x", "y")], "x", FileError::NotFound),
        (vec![moving("a", "nowhere/a")], "a", FileError::NotFound),
        (vec![moving("d", "d/inside")], "d", FileError::BadName),
        (vec![moving("a", "d")], "a", FileError::IsDirectory),
        (vec![write("a/b", "x")], "a/b", FileError::NotDirectory),
        (vec![write("d", "x")], "d", FileError::IsDirectory),
        (vec![write("../x", "x")], "../x", FileError::Escapes),
        (vec![remove("./a")], "./a", FileError::BadName),
        (
            vec![write("big", &"x".repeat(9))],
            "big",
            FileError::TooLarge,
        ),
        (vec![write("p/q/r", "")], "p/q/r", FileError::TooManyFiles),
    ] {
        let refused = changed(&base, &changes, LIMITS);
        assert_eq!(
            refused,
            Err(FileRefused {
                path: path.to_owned(),
                error
            }),
            "{changes:?}"
        );
    }
}
