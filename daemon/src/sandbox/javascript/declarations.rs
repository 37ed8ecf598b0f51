//! A JavaScript session's top-level declarations made the session's, found on the host.
//!
//! A session's program runs by a direct `eval` in the session's scope, where a top-level `let`,
//! `const` or `class` would be local to the eval; the runner makes them `var`s, which outlive
//! it (guest/javascript/program.js, `sessionDeclarations`). Finding them from the program's
//! tokens costs QuickJS about 30 µs a character in the nested-KVM VM (3 ms for the benchmark's
//! one line, more than compiling and running it), where this scan, the same one in Rust, takes
//! microseconds. It answers only where the runner's scan answers without compiling the
//! program (its `Scan.certain`), with the same edits; everywhere else it leaves the program to
//! the runner (None), which scans it, compiles it or parses it. `tests/declaration-cases.json`
//! holds the runner's answers for some thousands of programs, which the Node tests keep true
//! to program.js and this module's tests hold it to.
//!
//! The scan reads the program as the runner's TOKENS pattern does: line ends, comments,
//! strings, templates without substitutions, the keywords the scan looks for, `++` and `--`,
//! and runs of everything between (spaces, names, numbers and the punctuators that are neither
//! brackets nor `;` nor `/`); any other character is a token alone. The program.js functions
//! and fields keep their names here, so that the two read side by side.

/// The program with its top-level declarations made the session's, where the scan can tell
/// them without compiling it (the program itself when it has none); None: the runner decides.
pub fn session_program(code: &str) -> Option<String> {
    if !has_word(code, &["let", "const", "class"]) {
        return Some(code.to_owned());
    }
    if code.contains("<!--") || code.contains("-->") || code.starts_with("#!") {
        return None;
    }
    let mut scan = Scan::new(code);
    if !scan.run() || !scan.certain() {
        return None;
    }
    let mut text = String::with_capacity(code.len() + 16);
    let mut at = 0;
    for (start, end, replacement) in &scan.edits {
        text.push_str(&code[at..*start]);
        text.push_str(replacement);
        at = *end;
    }
    text.push_str(&code[at..]);
    Some(text)
}

/// Reserved words, and the contextual ones (program.js's KEYWORDS).
const KEYWORDS: &[&str] = &[
    "await",
    "break",
    "case",
    "catch",
    "class",
    "const",
    "continue",
    "debugger",
    "default",
    "delete",
    "do",
    "else",
    "enum",
    "export",
    "extends",
    "finally",
    "for",
    "function",
    "if",
    "import",
    "in",
    "instanceof",
    "let",
    "new",
    "of",
    "return",
    "static",
    "super",
    "switch",
    "throw",
    "try",
    "typeof",
    "var",
    "void",
    "while",
    "with",
    "yield",
];
/// Keywords that may be names too: a `/` after one is left to the runner.
const NAMES_TOO: &[&str] = &["await", "let", "of", "static", "yield"];
/// Words that end an expression as a name does.
const VALUES: &[&str] = &["true", "false", "null", "this"];
/// The keywords whose parenthesized head ends where a statement starts.
const HEADS: &[&str] = &["if", "while", "for", "with"];
/// The keywords TOKENS reads alone (KEYWORD).
const SPLIT: &[&str] = &["let", "const", "class", "if", "while", "for", "with"];

fn is_word_byte(c: u8) -> bool {
    c.is_ascii_alphanumeric() || c == b'_'
}

fn is_name_byte(c: u8) -> bool {
    is_word_byte(c) || c == b'$'
}

fn is_word_start(c: u8) -> bool {
    c.is_ascii_alphabetic() || c == b'_' || c == b'$'
}

/// Whether `code` has one of `words` between word boundaries, as `\b` tells them (ASCII word
/// characters; `$` is not one).
fn has_word(code: &str, words: &[&str]) -> bool {
    let bytes = code.as_bytes();
    words.iter().any(|word| {
        code.match_indices(word).any(|(i, _)| {
            let end = i + word.len();
            (i == 0 || !is_word_byte(bytes[i - 1]))
                && (end == bytes.len() || !is_word_byte(bytes[end]))
        })
    })
}

/// The names after `function` (and `*`, spaces and comments), at any depth: program.js's
/// FUNCTION_NAME, with JavaScript's `\s` and `\w` spelled out. The regex crate reports the
/// match a backtracking engine finds, as QuickJS's does (`function //x` names `x`).
/// None if the pattern did not compile (a fault: the scan then answers nothing).
fn function_names(code: &str) -> Option<Vec<&str>> {
    static FUNCTION_NAME: std::sync::LazyLock<Option<regex::Regex>> = std::sync::LazyLock::new(
        || {
            let space = r"\t\n\x0B\x0C\r \u{A0}\u{1680}\u{2000}-\u{200A}\u{2028}\u{2029}\u{202F}\u{205F}\u{3000}\u{FEFF}";
            let pattern = format!(
                r"(?-u:\b)function(?-u:\b)(?:[{space}*]|/\*(?s:.)*?\*/|//[^\n\r]*)*([A-Za-z0-9_$]+)"
            );
            regex::Regex::new(&pattern).ok()
        },
    );
    let names = FUNCTION_NAME.as_ref()?.captures_iter(code);
    Some(
        names
            .filter_map(|found| found.get(1).map(|name| name.as_str()))
            .collect(),
    )
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Word,
    Name,
    Value,
    Punctuator,
}

/// A token as the scan keeps it: its kind, its text (a value's stands for its kind of value),
/// and whether a `)` closes a statement's head.
#[derive(Debug, Clone, Copy)]
struct Token<'a> {
    kind: Kind,
    text: &'a str,
    head: bool,
}

impl<'a> Token<'a> {
    fn new(kind: Kind, text: &'a str) -> Self {
        Token {
            kind,
            text,
            head: false,
        }
    }
}

/// A word or a number, as a token (wordToken).
fn word_token(text: &str) -> Token<'_> {
    let c = text.as_bytes()[0];
    if c.is_ascii_digit() || c == b'.' {
        return Token::new(Kind::Value, "0");
    }
    let kind = if KEYWORDS.contains(&text) {
        Kind::Word
    } else if VALUES.contains(&text) {
        Kind::Value
    } else {
        Kind::Name
    };
    Token::new(kind, text)
}

/// What one token came to (program.js's SPACE, RAN and RESYNC, a token, or null).
enum Read<'a> {
    Space,
    Ran,
    Resync,
    Token(Token<'a>),
    GiveUp,
}

/// A bracket open, innermost last.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Open<'a> {
    Paren,
    /// A statement's head: `if (`.
    Head,
    Square,
    Brace,
    /// A template's substitution.
    Substitution,
    /// A class declaration's body.
    Class {
        start: usize,
        name: &'a str,
    },
}

/// A declaration being read.
#[derive(Debug, Clone)]
enum Pending<'a> {
    Let {
        start: usize,
    },
    Const {
        name: Option<&'a str>,
    },
    Class {
        start: usize,
        name: Option<&'a str>,
        heritage: bool,
    },
}

struct Scan<'a> {
    code: &'a str,
    bytes: &'a [u8],
    at: usize,
    edits: Vec<(usize, usize, String)>,
    open: Vec<Open<'a>>,
    last: Option<Token<'a>>,
    newline: bool,
    pending: Option<Pending<'a>>,
    names: Vec<&'a str>,
    uncertain: bool,
}

impl<'a> Scan<'a> {
    fn new(code: &'a str) -> Self {
        Scan {
            code,
            bytes: code.as_bytes(),
            at: 0,
            edits: Vec::new(),
            open: Vec::new(),
            last: None,
            newline: false,
            pending: None,
            names: Vec::new(),
            uncertain: false,
        }
    }

    /// Whether the edits cannot make a program that does not compile compile (Scan.certain).
    fn certain(&self) -> bool {
        if self.uncertain || has_word(self.code, &["var"]) {
            return false;
        }
        let mut names = self.names.clone();
        names.sort_unstable();
        names.dedup();
        if names.len() != self.names.len() {
            return false;
        }
        function_names(self.code)
            .is_some_and(|functions| !functions.iter().any(|name| self.names.contains(name)))
    }

    /// Reads every token; false to give up.
    fn run(&mut self) -> bool {
        while self.at < self.bytes.len() {
            let end = self.token_end(self.at);
            let text = &self.code[self.at..end];
            match self.token(text) {
                Read::GiveUp => return false,
                Read::Resync | Read::Space => {}
                Read::Ran => self.newline = false,
                Read::Token(token) => {
                    if !self.take(token) {
                        return false;
                    }
                }
            }
        }
        self.open.is_empty() && self.pending.is_none()
    }

    /// Where the token TOKENS matches at `at` ends.
    fn token_end(&self, at: usize) -> usize {
        let b = self.bytes;
        let rest = &b[at..];
        match rest[0] {
            b'\r' if rest.get(1) == Some(&b'\n') => return at + 2,
            b'\r' | b'\n' => return at + 1,
            b'/' if rest.get(1) == Some(&b'/') => return at + line_comment_len(rest),
            b'/' if rest.get(1) == Some(&b'*') => {
                if let Some(close) = find(&rest[2..], b"*/") {
                    return at + 2 + close + 2;
                }
            }
            quote @ (b'\'' | b'"') => {
                if let Some(len) = string_len(rest, quote) {
                    return at + len;
                }
            }
            b'`' => {
                if let Some(len) = plain_template_len(rest) {
                    return at + len;
                }
            }
            _ => {}
        }
        if let Some(len) = self.keyword_at(at) {
            return at + len;
        }
        if rest.starts_with(b"++") || rest.starts_with(b"--") {
            return at + 2;
        }
        let run = self.run_len(at);
        if run > 0 {
            return at + run;
        }
        at + self.code[at..].chars().next().map_or(1, char::len_utf8)
    }

    /// The length of a KEYWORD at `at`: one of SPLIT, not after a name's character or `.`,
    /// not followed by one.
    fn keyword_at(&self, at: usize) -> Option<usize> {
        let b = self.bytes;
        if at > 0 && (is_name_byte(b[at - 1]) || b[at - 1] == b'.') {
            return None;
        }
        SPLIT.iter().find_map(|word| {
            let end = at + word.len();
            (b[at..].starts_with(word.as_bytes()) && (end == b.len() || !is_name_byte(b[end])))
                .then_some(word.len())
        })
    }

    /// The length of the run at `at`: characters of a run, up to a keyword, `++` or `--`.
    fn run_len(&self, at: usize) -> usize {
        let b = self.bytes;
        let mut i = at;
        while i < b.len() {
            let c = b[i];
            let in_run = match c {
                b'+' | b'-' => b.get(i + 1) != Some(&c),
                _ => is_name_byte(c) || b"\t\x0b\x0c !#%&*,.:<=>?@^|~".contains(&c),
            };
            if !in_run || (is_word_start(c) && self.keyword_at(i).is_some()) {
                break;
            }
            i += 1;
        }
        i - at
    }

    fn take(&mut self, token: Token<'a>) -> bool {
        if !self.declaration(token) {
            return false;
        }
        self.last = Some(token);
        self.newline = false;
        true
    }

    /// The token `text` at `at` (program.js's Scan.token).
    fn token(&mut self, text: &'a str) -> Read<'a> {
        let start = self.at;
        self.at += text.len();
        let t = text.as_bytes();
        let c = t[0];
        if c == b'\n' || c == b'\r' {
            self.newline = true;
            return Read::Space;
        }
        if t.len() > 1 {
            let second = t[1];
            if c == b'/' && (second == b'/' || second == b'*') {
                if second == b'*' && has_line_end(text) {
                    self.newline = true;
                }
                return Read::Space;
            }
            if c == b'\'' || c == b'"' || c == b'`' {
                return Read::Token(Token::new(Kind::Value, &text[..1]));
            }
            if (c == b'+' || c == b'-') && (text == "++" || text == "--") {
                return Read::Token(Token::new(Kind::Punctuator, text));
            }
        }
        if is_word_start(c) && KEYWORDS.contains(&text) {
            return Read::Token(Token::new(Kind::Word, text));
        }
        if t.len() == 1 && b"()[]{};/".contains(&c) {
            if c == b'/' {
                return self.slash(start);
            }
            return self.bracket(text);
        }
        if c == b'`' {
            return self.template(start + 1);
        }
        if c == b'\'' || c == b'"' || c == b'\\' || c > 126 {
            return Read::GiveUp;
        }
        self.stretch(text)
    }

    /// A run (Scan.stretch).
    fn stretch(&mut self, text: &'a str) -> Read<'a> {
        if self.open.is_empty() && text.contains(',') {
            self.uncertain = true;
        }
        if self.pending.is_some() {
            for part in run_tokens(text) {
                let Some(token) = run_token(part) else {
                    return Read::GiveUp;
                };
                if let Some(token) = token
                    && !self.take(token)
                {
                    return Read::GiveUp;
                }
            }
            return Read::Ran;
        }
        let trimmed = text.trim_end_matches([' ', '\t', '\x0b', '\x0c']);
        let Some(&end) = trimmed.as_bytes().last() else {
            return Read::Space;
        };
        if is_name_byte(end) {
            let word = trimmed.len()
                - trimmed
                    .bytes()
                    .rev()
                    .take_while(|c| is_name_byte(*c))
                    .count();
            self.last = Some(word_token(&trimmed[word..]));
        } else if end == b'.' {
            return Read::GiveUp;
        } else {
            let at = trimmed.len() - 1;
            self.last = Some(Token::new(Kind::Punctuator, &trimmed[at..]));
        }
        Read::Ran
    }

    fn declares(&mut self, token: Token<'a>) -> bool {
        if token.kind == Kind::Name {
            self.names.push(token.text);
            return true;
        }
        self.uncertain = true;
        false
    }

    /// A punctuator, with the bracket it opens or closes (Scan.bracket).
    fn bracket(&mut self, text: &'a str) -> Read<'a> {
        match text {
            "(" => {
                let head = self.last.is_some_and(|last| HEADS.contains(&last.text));
                self.open.push(if head { Open::Head } else { Open::Paren });
            }
            "[" => self.open.push(Open::Square),
            "{" => self.open.push(Open::Brace),
            "]" if self.open.pop() != Some(Open::Square) => return Read::GiveUp,
            ")" => {
                let head = match self.open.pop() {
                    Some(Open::Paren) => false,
                    Some(Open::Head) => true,
                    _ => return Read::GiveUp,
                };
                return Read::Token(Token {
                    kind: Kind::Punctuator,
                    text,
                    head,
                });
            }
            "}" => match self.open.pop() {
                Some(Open::Substitution) => return self.template(self.at),
                Some(Open::Class { start, name }) => {
                    self.edits.push((start, start, format!("var {name} = ")));
                    self.edits.push((self.at, self.at, ";".to_owned()));
                }
                Some(Open::Brace) => {}
                _ => return Read::GiveUp,
            },
            _ => {}
        }
        Read::Token(Token::new(Kind::Punctuator, text))
    }

    /// A template's text from `from` to its end or its next substitution (Scan.template).
    fn template(&mut self, from: usize) -> Read<'a> {
        let b = self.bytes;
        let mut i = from;
        while i < b.len() {
            match b[i] {
                b'`' => {
                    self.at = i + 1;
                    return self.resynced(Token::new(Kind::Value, "`"));
                }
                b'\\' => i += 2,
                b'$' if b.get(i + 1) == Some(&b'{') => {
                    self.at = i + 2;
                    self.open.push(Open::Substitution);
                    return self.resynced(Token::new(Kind::Punctuator, "${"));
                }
                _ => i += 1,
            }
        }
        Read::GiveUp
    }

    /// A `/` at `from`: a regular expression where an expression may start, a division where
    /// one ended (Scan.slash).
    fn slash(&mut self, from: usize) -> Read<'a> {
        let regex = match self.last {
            None => true,
            Some(last) if last.kind == Kind::Word => {
                if NAMES_TOO.contains(&last.text) {
                    return Read::GiveUp;
                }
                true
            }
            Some(last) if last.kind == Kind::Name || last.kind == Kind::Value => false,
            Some(last) if last.text == ")" => last.head,
            Some(last) if ["}", "++", "--"].contains(&last.text) => return Read::GiveUp,
            Some(last) => last.text != "]",
        };
        if !regex {
            return Read::Token(Token::new(Kind::Punctuator, "/"));
        }
        match regex_len(&self.bytes[from..]) {
            Some(len) => {
                self.at = from + len;
                self.resynced(Token::new(Kind::Value, "/"))
            }
            None => Read::GiveUp,
        }
    }

    fn resynced(&mut self, token: Token<'a>) -> Read<'a> {
        if self.take(token) {
            Read::Resync
        } else {
            Read::GiveUp
        }
    }

    /// Whether a statement may start here, outside every bracket: None when the token before
    /// does not say.
    fn starts_statement(&self) -> Option<bool> {
        let Some(last) = self.last else {
            return Some(true);
        };
        if last.kind == Kind::Word || last.text == "++" || last.text == "--" {
            return None;
        }
        if last.text == ";" || last.text == "}" {
            return Some(true);
        }
        if last.text == ")" {
            return None;
        }
        if last.kind == Kind::Punctuator && last.text != "]" {
            return Some(false);
        }
        Some(self.newline)
    }

    /// Follows `token` through a top-level declaration; false to give up.
    fn declaration(&mut self, token: Token<'a>) -> bool {
        if let Some(pending) = self.pending.take() {
            return self.pending_declaration(pending, token);
        }
        if !self.open.is_empty() || token.kind != Kind::Word {
            return true;
        }
        if !["let", "const", "class"].contains(&token.text) {
            return true;
        }
        let starts = self.starts_statement();
        if starts.is_none() {
            let Some(last) = self.last else {
                return false;
            };
            if token.text == "let" || last.kind == Kind::Word || last.text != ")" {
                return false;
            }
            self.uncertain = true;
        }
        if starts == Some(false) {
            return true;
        }
        let start = self.at - token.text.len();
        self.pending = Some(match token.text {
            "const" => {
                self.edits.push((start, start + 5, "var  ".to_owned()));
                Pending::Const { name: None }
            }
            "let" => Pending::Let { start },
            _ => Pending::Class {
                start,
                name: None,
                heritage: false,
            },
        });
        true
    }

    fn pending_declaration(&mut self, pending: Pending<'a>, token: Token<'a>) -> bool {
        match pending {
            Pending::Let { start } => {
                if token.text == "in" || token.text == "instanceof" {
                    return false;
                }
                if token.kind == Kind::Name
                    || token.kind == Kind::Word
                    || token.text == "["
                    || token.text == "{"
                {
                    self.edits.push((start, start + 3, "var".to_owned()));
                    self.declares(token);
                }
                true
            }
            Pending::Const { name: None } if self.declares(token) => {
                self.pending = Some(Pending::Const {
                    name: Some(token.text),
                });
                true
            }
            Pending::Const { name } => {
                if name.is_none() || token.text != "=" {
                    self.uncertain = true;
                }
                true
            }
            Pending::Class {
                start, name: None, ..
            } => {
                if token.kind != Kind::Name {
                    return false;
                }
                self.names.push(token.text);
                self.pending = Some(Pending::Class {
                    start,
                    name: Some(token.text),
                    heritage: false,
                });
                true
            }
            Pending::Class {
                start,
                name: Some(name),
                heritage,
            } => {
                if token.text == "extends" && !heritage {
                    self.pending = Some(Pending::Class {
                        start,
                        name: Some(name),
                        heritage: true,
                    });
                    return true;
                }
                let depth = self.open.len();
                if token.text == "{" && depth == 1 {
                    // Its body: the class ends where this brace closes.
                    self.open[0] = Open::Class { start, name };
                    return true;
                }
                self.pending = Some(Pending::Class {
                    start,
                    name: Some(name),
                    heritage,
                });
                // A heritage of names, calls and members: anything else is the runner's.
                heritage
                    && (depth > 0
                        || token.kind == Kind::Name
                        || [".", "?", ")", "]"].contains(&token.text))
            }
        }
    }
}

/// A run's own tokens (RUN_TOKENS): spaces, a word, a number, or one character.
fn run_tokens(text: &str) -> impl Iterator<Item = &str> {
    let b = text.as_bytes();
    let mut at = 0;
    std::iter::from_fn(move || {
        if at >= b.len() {
            return None;
        }
        let c = b[at];
        let len = if b" \t\x0b\x0c".contains(&c) {
            b[at..]
                .iter()
                .take_while(|c| b" \t\x0b\x0c".contains(c))
                .count()
        } else if is_word_start(c) {
            1 + b[at + 1..].iter().take_while(|c| is_name_byte(**c)).count()
        } else if c.is_ascii_digit() || (c == b'.' && b.get(at + 1).is_some_and(u8::is_ascii_digit))
        {
            let digit = if c == b'.' { 2 } else { 1 };
            digit
                + b[at + digit..]
                    .iter()
                    .take_while(|c| is_word_byte(**c) || **c == b'.')
                    .count()
        } else {
            1
        };
        let part = &text[at..at + len];
        at += len;
        Some(part)
    })
}

/// A token of a run (runToken): Some(None) for spaces, None for one the scan does not take.
fn run_token(text: &str) -> Option<Option<Token<'_>>> {
    let c = text.as_bytes()[0];
    if b" \t\x0b\x0c".contains(&c) {
        return Some(None);
    }
    if is_word_start(c) || c.is_ascii_digit() || (c == b'.' && text.len() > 1) {
        return Some(Some(word_token(text)));
    }
    (c <= 126).then(|| Some(Token::new(Kind::Punctuator, text)))
}

/// Whether `text` holds a line's end (LINE_END).
fn has_line_end(text: &str) -> bool {
    text.contains(['\n', '\r', '\u{2028}', '\u{2029}'])
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// A `//` comment's length: to the line's end (`\n`, `\r`, U+2028, U+2029), not with it.
fn line_comment_len(rest: &[u8]) -> usize {
    let text = std::str::from_utf8(rest).unwrap_or_default();
    text.find(['\n', '\r', '\u{2028}', '\u{2029}'])
        .unwrap_or(rest.len())
}

/// A string's length from its opening `quote`, or None when no quote closes it on its line.
fn string_len(rest: &[u8], quote: u8) -> Option<usize> {
    let mut i = 1;
    while i < rest.len() {
        match rest[i] {
            c if c == quote => return Some(i + 1),
            b'\\' if rest[i + 1..].starts_with(b"\r\n") => i += 3,
            b'\\' if i + 1 < rest.len() => i += 2,
            b'\\' | b'\n' | b'\r' => return None,
            _ => i += 1,
        }
    }
    None
}

/// A template without substitutions' length from its backtick, or None (it has one, or does
/// not end).
fn plain_template_len(rest: &[u8]) -> Option<usize> {
    let mut i = 1;
    while i < rest.len() {
        match rest[i] {
            b'`' => return Some(i + 1),
            b'\\' if i + 1 < rest.len() => i += 2,
            b'$' if rest.get(i + 1) == Some(&b'{') => return None,
            b'\\' => return None,
            _ => i += 1,
        }
    }
    None
}

/// A regular expression's length from its `/` (REGEX), or None.
fn regex_len(rest: &[u8]) -> Option<usize> {
    let mut i = 1;
    loop {
        match rest.get(i)? {
            b'/' if i > 1 => break,
            b'/' | b'\n' | b'\r' => return None,
            b'\\' => match rest.get(i + 1)? {
                b'\n' | b'\r' => return None,
                _ => i += 2,
            },
            b'[' => {
                i += 1;
                loop {
                    match rest.get(i)? {
                        b']' => break,
                        b'\n' | b'\r' => return None,
                        b'\\' => match rest.get(i + 1)? {
                            b'\n' | b'\r' => return None,
                            _ => i += 2,
                        },
                        _ => i += 1,
                    }
                }
                i += 1;
            }
            _ => i += 1,
        }
    }
    i += 1;
    Some(
        i + rest[i..]
            .iter()
            .take_while(|c| c.is_ascii_alphabetic())
            .count(),
    )
}

#[cfg(test)]
mod tests;
