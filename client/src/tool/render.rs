//! What the model reads: the tool's description, the rendering of a result, output cut to a
//! character budget, and advice for every kind of failure.

use std::fmt::Write as _;

use hyperlightd_api::{DisplayData, ErrorKind, Language};
use serde_json::Value;

use super::{DaemonFacts, ToolDisplay, ToolOutput, ToolStatus};

/// Advice when the daemon cannot be reached.
pub(super) const UNREACHABLE: &str = "Nothing ran: the code execution service is not reachable \
    right now. Try the same call again in a little while; if it keeps failing, tell the user that \
    code execution is unavailable.";

/// Advice when the request was sent and its answer lost.
pub(super) const ANSWER_LOST: &str = "The answer was lost on the way back; the program may or \
    may not have run. Run it again only if running it twice does no harm.";

/// What the rendering of one result needs besides the result.
#[derive(Debug)]
pub(super) struct Context<'a> {
    pub facts: &'a DaemonFacts,
    /// The language the program was in, when it ran.
    pub language: Option<Language>,
    /// The time limit it ran under, when known.
    pub timeout_ms: Option<u64>,
}

impl<'a> Context<'a> {
    /// The context of a call that ran nothing: no language, no time limit.
    pub fn nothing_ran(facts: &'a DaemonFacts) -> Self {
        Context {
            facts,
            language: None,
            timeout_ms: None,
        }
    }
}

/// The tool's description for a model.
pub(super) fn description(facts: &DaemonFacts, keeps_state: bool) -> String {
    let mut text = String::from(
        "Run a program in an isolated micro-VM and get back what it printed and the value of \
         its last expression. Like a notebook cell: the value of the program's last expression \
         statement comes back as `result` (as JSON); print() / console.log() go to stdout; an \
         uncaught exception comes back as an error with its traceback in stderr. ",
    );
    text.push_str(if keeps_state {
        "State carries over between calls in the same language, as between a notebook's \
         cells: variables, functions, classes and imports defined by earlier calls are there \
         (an exception keeps what ran before it). A call that times out, runs out of memory or \
         crashes is undone: the interpreter is back where it was before that call."
    } else {
        "Every call starts from a clean interpreter: nothing carries over from earlier calls, \
         so include every import and definition the program needs."
    });
    if facts.egress_rules.is_empty() {
        text.push_str(
            " There is no network and no host filesystem (files cannot be read or written), \
             and no processes or threads.",
        );
    } else {
        let _ = write!(
            text,
            " HTTP requests (JavaScript: fetch; Python: urllib.request) may reach only these \
             destinations: {}; anything else is refused. There is no other network, no host \
             filesystem (files cannot be read or written), and no processes or threads.",
            facts.egress_rules.join("; ")
        );
    }
    for language in &facts.languages {
        text.push(' ');
        text.push_str(&language_note(*language, facts));
    }
    if let Some(limits) = &facts.limits {
        let memory: Vec<String> = facts
            .languages
            .iter()
            .filter_map(|l| Some(format!("{} MiB ({l})", limits.memory_mib.get(l)?)))
            .collect();
        let _ = write!(
            text,
            " Limits: {} s per run unless timeout_ms asks for more (at most {} s); memory {}; \
             output {} KiB (past it, output is cut); result {} KiB; code {} KiB.",
            seconds(limits.default_timeout_ms),
            seconds(limits.max_timeout_ms),
            if memory.is_empty() {
                "bounded".to_owned()
            } else {
                memory.join(", ")
            },
            limits.max_output_bytes / 1024,
            limits.max_result_bytes / 1024,
            limits.max_code_bytes / 1024,
        );
    }
    text
}

fn language_note(language: Language, facts: &DaemonFacts) -> String {
    match language {
        Language::Python => {
            let runtime = facts.runtimes.get(&Language::Python);
            let version = runtime.and_then(|r| r.version.as_deref());
            let mut note = if runtime.is_some_and(|r| r.name == "native") {
                format!(
                    "python: CPython {} (a native Linux build) with its standard library",
                    version.unwrap_or("3")
                )
            } else {
                format!(
                    "python: CPython {} compiled to WebAssembly, with its standard library (json, \
                     re, math, statistics, datetime, collections, itertools, decimal, csv and the \
                     rest; absent: ctypes, ssl, lzma, starting processes or threads)",
                    version.unwrap_or("3.14")
                )
            };
            match facts.packages.get(&Language::Python) {
                Some(packages) if !packages.is_empty() => {
                    let list: Vec<String> =
                        packages.iter().map(|(n, v)| format!("{n} {v}")).collect();
                    let _ = write!(note, "; packages: {}", list.join(", "));
                }
                _ => note.push_str("; no third-party packages (no numpy, no pandas)"),
            }
            if facts.installs {
                note.push_str(
                    "; more can be installed: put `%pip install NAME` (or NAME==VERSION) lines at \
                     the top of the program, then import them; in a session they stay for later \
                     calls",
                );
            }
            note.push('.');
            note
        }
        Language::Javascript => "javascript: QuickJS (modern ECMAScript, top-level await) with \
            console, setTimeout/setInterval, Promise, URL, TextEncoder/TextDecoder, \
            structuredClone, atob/btoa and crypto.getRandomValues; no Node.js modules \
            (no require, no fs), no fetch, no Intl."
            .to_owned(),
    }
}

fn seconds(ms: u64) -> String {
    let s = ms as f64 / 1000.0;
    if s.fract() == 0.0 {
        format!("{s:.0}")
    } else {
        format!("{s}")
    }
}

/// What to do about a failure of `kind`.
pub(super) fn advice(kind: ErrorKind, context: &Context<'_>) -> String {
    let limits = context.facts.limits.as_ref();
    match kind {
        ErrorKind::SyntaxError => "The program does not parse. Fix the syntax at the place the \
            message names and run it again."
            .to_owned(),
        ErrorKind::Exception => "The program raised an exception. Read the message and the \
            traceback in stderr, fix the code, and run it again."
            .to_owned(),
        ErrorKind::Timeout => {
            let ran = context
                .timeout_ms
                .map_or(String::new(), |ms| format!(" of {ms} ms"));
            let max = limits.map_or(String::new(), |l| {
                format!(" (at most {} ms)", l.max_timeout_ms)
            });
            format!(
                "The program ran past its time limit{ran} and was stopped; output printed before \
                 that is kept (past its first 100 lines, up to the last 8 KiB may be missing). \
                 Make it faster (less work, smaller inputs, no endless loop), or \
                 pass a larger timeout_ms{max} if the work really takes that long."
            )
        }
        ErrorKind::OutOfMemory => {
            let memory = context
                .language
                .and_then(|l| limits?.memory_mib.get(&l).copied())
                .map_or(String::new(), |mib| format!(" ({mib} MiB)"));
            format!(
                "The program used more memory than its sandbox has{memory} (deep recursion \
                 counts too). Use less: process data in pieces, avoid building huge lists or \
                 strings, recurse less deeply."
            )
        }
        ErrorKind::ResultTooLarge => "The last expression's value is too large to return. \
            End the program with a smaller value (a summary, a count, the first items) or print \
            what matters."
            .to_owned(),
        ErrorKind::SandboxFailure => "The micro-VM failed under the program (a guest crash). \
            The next run gets a fresh one; simplify what the program does if it happens again."
            .to_owned(),
        ErrorKind::ResourceLimit => "The program used up a limit of the host (the message says \
            which) and was stopped. Do the same work with fewer of that resource."
            .to_owned(),
        ErrorKind::PolicyViolation => "The program uses modules or functions this service does \
            not allow (the message lists each, with its line); nothing ran. Rewrite it without \
            them, and run it again."
            .to_owned(),
        ErrorKind::FileLimit => {
            let max = limits.map_or(String::new(), |l| {
                format!(
                    " (at most {} files, {} bytes)",
                    l.max_files, l.max_file_bytes
                )
            });
            format!(
                "The program wrote more files, or more bytes of files, than its working \
                 directory may hold{max}, and failed when the write was refused. Write fewer or \
                 smaller files (summarise, or print what matters)."
            )
        }
        ErrorKind::InvalidRequest => "The service refused the request as invalid (the message \
            says why); nothing ran. Fix the arguments and call again."
            .to_owned(),
        ErrorKind::PayloadTooLarge => {
            let max = limits.map_or(String::new(), |l| {
                format!(" (at most {} bytes)", l.max_code_bytes)
            });
            format!("The code is too large{max}; nothing ran. Send a shorter program.")
        }
        ErrorKind::SessionNotFound => "The session is gone (deleted, or expired after being \
            idle), and with it every variable it held; nothing ran. Run again without the \
            session, or in a new one, and recreate what the program needs."
            .to_owned(),
        ErrorKind::SessionLost => "The service restarted and could not bring the session's \
            state back (the message says why): every variable it held is gone; nothing ran. \
            Run again in a new session, and recreate what the program needs."
            .to_owned(),
        ErrorKind::CheckpointNotFound => "The session keeps no such checkpoint (the message \
            lists those it keeps); nothing changed. Use one of those, or go on from the \
            session's current state."
            .to_owned(),
        ErrorKind::TooManySessions => "The service holds as many sessions as it may; nothing \
            ran. Run without a session (a fresh interpreter), or later."
            .to_owned(),
        ErrorKind::SessionBusy => "Earlier calls in the same session were still running for \
            this call's whole time limit; nothing ran. Call again once they are done."
            .to_owned(),
        ErrorKind::QuotaExceeded => "This caller already has as many programs running, or \
            sessions open, as the service allows one caller; nothing ran. Wait for running calls \
            to finish (or close sessions no longer needed), then call again."
            .to_owned(),
        ErrorKind::CallerNotAllowed => "The code execution service does not accept calls from \
            this user; nothing ran, and calling again will not help. Tell the user: the \
            service's operator must allow this user (hyperlightd --allow-uid / --allow-gid)."
            .to_owned(),
        ErrorKind::Overloaded | ErrorKind::NoSandboxAvailable | ErrorKind::ShuttingDown => {
            "The service is busy; nothing ran. Make the same call again in a few seconds."
                .to_owned()
        }
        ErrorKind::RequestTimeout => {
            "The request reached the service too slowly; nothing ran. Call again.".to_owned()
        }
        ErrorKind::WallClock => "The program ran past the longest time a program that calls \
            tools may take (waiting for tools included) and was stopped. Call fewer tools, or \
            slower ones less often, and return sooner."
            .to_owned(),
        ErrorKind::PackageRefused => "The package cannot be installed (the message names it \
            and says why); nothing ran and nothing changed. Do without it (the standard library \
            and the packages already there), pick another package or version, or tell the user \
            if it is needed."
            .to_owned(),
        ErrorKind::PackageIndexUnavailable => "The package index could not be reached; nothing \
            ran. Call again in a little while, or do without the package."
            .to_owned(),
        ErrorKind::InstallFailed => "A package could not be installed in the sandbox (the \
            message says why); the program did not run and the session is as it was. Try \
            another version of the package, or do without it."
            .to_owned(),
        ErrorKind::ExecutionNotFound
        | ErrorKind::ExecutionEnded
        | ErrorKind::ToolCallNotFound
        | ErrorKind::ToolCallAnswered => "A tool's answer did not reach the program (the \
            message says why); this is not the program's fault. Run it again."
            .to_owned(),
        ErrorKind::NotFound
        | ErrorKind::MethodNotAllowed
        | ErrorKind::Internal
        | ErrorKind::Unknown => "The code execution service failed; this is not the program's \
            fault. Try once more; if it fails again, tell the user."
            .to_owned(),
    }
}

/// Output and result cut to a budget.
#[derive(Debug)]
pub(super) struct Cut {
    pub stdout: String,
    pub stderr: String,
    pub result: Value,
    /// Whether anything was cut.
    pub cut: bool,
}

/// Cuts stdout, stderr and the result (as JSON text) so that together they keep at most
/// `budget` characters: each gets an equal share, and what a short one leaves goes to the
/// others. A part over its share keeps its head and its tail around a marker.
pub(super) fn cut_to_budget(stdout: &str, stderr: &str, result: &Value, budget: usize) -> Cut {
    let result_text = if result.is_null() {
        String::new()
    } else {
        result.to_string()
    };
    let parts = [stdout, stderr, result_text.as_str()];
    let lengths = parts.map(|p| p.chars().count());
    let shares = shares(&lengths, budget);
    let cut = lengths.iter().zip(&shares).any(|(len, share)| len > share);
    let result = if lengths[2] > shares[2] {
        Value::String(cut_middle(&result_text, shares[2]))
    } else {
        result.clone()
    };
    Cut {
        stdout: cut_middle(stdout, shares[0]),
        stderr: cut_middle(stderr, shares[1]),
        result,
        cut,
    }
}

/// Splits `budget` among parts of `lengths`: equal shares, a part needing less than its share
/// giving the rest to the others.
fn shares<const N: usize>(lengths: &[usize; N], budget: usize) -> [usize; N] {
    let mut shares = [0; N];
    let mut left = budget;
    let mut open: Vec<usize> = (0..N).filter(|&i| lengths[i] > 0).collect();
    while !open.is_empty() {
        let each = left / open.len();
        let (fits, over): (Vec<usize>, Vec<usize>) =
            open.iter().partition(|&&i| lengths[i] <= each);
        if fits.is_empty() {
            for i in over {
                shares[i] = each;
            }
            break;
        }
        for i in fits {
            shares[i] = lengths[i];
            left -= lengths[i];
        }
        open = over;
    }
    shares
}

/// `text` if it has at most `keep` characters; else its first and last characters, at most
/// `keep` in all, around a marker saying how many were cut. Each side ends at a line break when
/// one is near, so that no line is shown half.
fn cut_middle(text: &str, keep: usize) -> String {
    let length = text.chars().count();
    if length <= keep {
        return text.to_owned();
    }
    let head_chars = keep / 2;
    let tail_chars = keep - head_chars;
    let head_end = text
        .char_indices()
        .nth(head_chars)
        .map_or(text.len(), |(i, _)| i);
    let tail_start = text
        .char_indices()
        .nth(length - tail_chars)
        .map_or(text.len(), |(i, _)| i);
    let mut head = &text[..head_end];
    let mut tail = &text[tail_start..];
    // A line break in the last quarter of the head, or the first quarter of the tail.
    if let Some(i) = head.rfind('\n').filter(|&i| i >= head.len() * 3 / 4) {
        head = &head[..=i];
    }
    if let Some(i) = tail.find('\n').filter(|&i| i < tail.len() / 4) {
        tail = &tail[i + 1..];
    }
    let kept = head.chars().count() + tail.chars().count();
    let head = head.strip_suffix('\n').unwrap_or(head);
    format!(
        "{head}\n[... {} characters cut here: output over the budget keeps its start and its end ...]\n{tail}",
        length - kept
    )
}

/// The rendering a model reads.
/// What the model is told of each display item: an image by its type and size, anything else
/// by its `text/plain`, each cut to a quarter of the budget.
pub(super) fn display(items: &[DisplayData], budget: usize) -> Vec<ToolDisplay> {
    items
        .iter()
        .enumerate()
        .map(|(index, item)| {
            let image = item
                .data
                .iter()
                .find(|(kind, _)| kind.starts_with("image/"));
            ToolDisplay {
                index,
                image: image.map(|(kind, _)| kind.clone()),
                image_bytes: image.map(|(_, data)| data.len() / 4 * 3),
                text: match image {
                    Some(_) => None,
                    None => item
                        .data
                        .get("text/plain")
                        .map(|t| cut_middle(t, budget / 4)),
                },
            }
        })
        .collect()
}

pub(super) fn text(output: &ToolOutput, context: &Context<'_>) -> String {
    let mut text = String::new();
    let status = match output.status {
        ToolStatus::Ok => "ok",
        ToolStatus::Error => "error",
        ToolStatus::Timeout => "timeout",
        ToolStatus::InvalidArguments => "invalid arguments (nothing ran)",
        ToolStatus::Rejected => "refused (nothing ran)",
        ToolStatus::Unavailable => "unavailable",
    };
    let _ = write!(text, "status: {status}");
    if let (Some(language), Some(ms)) = (context.language, output.duration_ms) {
        let _ = write!(text, " ({language}, {ms:.1} ms)");
    }
    text.push('\n');
    if !output.result.is_null() {
        let _ = writeln!(text, "result: {}", output.result);
    }
    for (name, stream) in [("stdout", &output.stdout), ("stderr", &output.stderr)] {
        if !stream.is_empty() {
            let _ = writeln!(text, "{name}:\n{}", stream.trim_end_matches('\n'));
        }
    }
    for item in &output.display {
        let n = item.index + 1;
        match (&item.image, &item.text) {
            (Some(kind), _) => {
                let kib = item.image_bytes.unwrap_or(0).div_ceil(1024);
                let _ = writeln!(
                    text,
                    "display {n}: a figure was produced ({kind}, {kib} KiB); it comes with this \
                     result as display[{}] for the user to see, not as text",
                    item.index
                );
            }
            (None, Some(shown)) => {
                let _ = writeln!(text, "display {n}:\n{}", shown.trim_end_matches('\n'));
            }
            (None, None) => {
                let _ = writeln!(text, "display {n}: rich output with no text form");
            }
        }
    }
    if let Some(error) = &output.error {
        let _ = writeln!(text, "error ({}): {}", error.kind, error.message);
        let _ = writeln!(text, "what to do: {}", error.advice);
    }
    if output.rolled_back {
        text.push_str(
            "note: this call was undone: nothing it did is kept, and what earlier calls defined \
             is still there.\n",
        );
    }
    if let Some(notice) = &output.notice {
        let _ = writeln!(text, "note: {notice}");
    }
    if output.truncated {
        text.push_str(
            "note: the program printed more than the output cap; output past it was cut and \
             the program ran on. Print less: a summary, counts, the first rows.\n",
        );
    }
    if output.cut_to_budget {
        text.push_str(
            "note: output was long and its middle was cut for this answer. Print less, or \
             print only what you need to see.\n",
        );
    }
    text
}
