"""hyperlightd's Python runner.

Built into the Python guest component by componentize-py, which runs this module once at build
time and keeps the initialised interpreter (with everything imported here) in the component, so
a sandbox starts with it warm. The daemon then snapshots the sandbox and restores it after every
request.

Contract with the daemon (the same for every language, plus Python's "prime"):
  event:  {"code": "<program text>", "max_result_bytes": N, "seed": "<hex>", "session": false,
           "prime": false, "policy": {"allowed_modules": [...], "blocked_functions": [...]}}
  reply:  {"ok": true, "result": <JSON value>}
        | {"ok": false, "error": {"kind": "syntax_error" | "exception" | "result_too_large"
                                          | "out_of_memory" | "policy_violation",
                                  "message": "...", "violations": [...]}}
  output: written through the host function `write(stream, text)`, 1 = stdout, 2 = stderr;
          it answers False once the request's output cap is reached.

The program's result is the value of its last statement when that statement is an expression, as
in a notebook cell; otherwise null. Values JSON cannot carry are rendered with repr().

The program's working directory is /work, the request's files (the host keeps them in its
memory; see the daemon's sandbox/python/wasi/work.rs): it reads and writes them with open(),
pathlib, csv, json as usual, and what it writes there goes back to the caller.

"seed" is entropy from the host for `random`; "session": true runs the program in the session's
globals, which live on in the session's saved state; "prime": true runs PRIME instead of "code"
(see below). Output is buffered here, since every host call is a VM exit (see _HostStream): the
first LINE_BY_LINE lines of a run go to the host line by line, as on a terminal, the rest in
blocks of FLUSH_AT characters, as into a pipe; a flush() or a sleep sends what is pending. A
program stopped at its time limit loses what is still pending: an unfinished last line, or past
the first LINE_BY_LINE lines, at most the last block.
"""

import ast
import io
import json
import sys
import traceback

# The standard library a program may use without paying for its import: imported here, at build
# time, so it is part of the warm interpreter. Any other module of the standard library, and any
# package built into the guest, is imported (and paid for) per request, read from the library the
# daemon serves read-only (python-lib.tar; see guest/README.md).
import array  # noqa: F401
import base64  # noqa: F401
import bisect  # noqa: F401
import calendar  # noqa: F401
import collections  # noqa: F401
import copy  # noqa: F401
import csv  # noqa: F401
import dataclasses  # noqa: F401
import datetime  # noqa: F401
import decimal  # noqa: F401
import difflib  # noqa: F401
import enum  # noqa: F401
import fractions  # noqa: F401
import functools  # noqa: F401
import hashlib  # noqa: F401
import heapq  # noqa: F401
import itertools  # noqa: F401
import math  # noqa: F401
import operator  # noqa: F401
import os  # noqa: F401
import pprint  # noqa: F401
import random
import re  # noqa: F401
import statistics  # noqa: F401
import string  # noqa: F401
import struct  # noqa: F401
import textwrap  # noqa: F401
import time
import typing  # noqa: F401
import unicodedata  # noqa: F401
import uuid  # noqa: F401

import asyncio

import wit_world
from wit_world.imports import host


class _EventLoop(asyncio.SelectorEventLoop):
    # asyncio's loop wakes itself from other threads and signal handlers through a socket pair.
    # The guest has neither threads nor sockets (creating one is refused), so the loop does
    # without: asyncio.run() and everything that runs coroutines on one thread work.
    def _make_self_pipe(self) -> None:
        self._ssock = self._csock = None

    def _close_self_pipe(self) -> None:
        pass


asyncio.unix_events._UnixDefaultEventLoopPolicy._loop_factory = _EventLoop


def _keep_import_caches() -> None:
    # Each directory on sys.path has a finder that lists the directory once and keeps the list
    # while the directory's modification time stays the same. The lists made here, at build
    # time, hold for the library the daemon serves (it is these very directories), which
    # reports every time as 0: say so, so that a request does not list /python again.
    for finder in sys.path_importer_cache.values():
        if hasattr(finder, "_path_mtime"):
            finder._path_mtime = 0


# hyperlight-component-util 0.17 registers the host's `monotonic-clock.now` and `wall-clock.now`
# under one name, and the wall clock answers both: the interpreter's own monotonic clock reads
# whole seconds as nanoseconds. The program's monotonic clocks are derived from the wall clock
# instead (nanosecond resolution), which the host keeps from stepping back during a request.
# None of the modules imported above binds them; a module a program imports binds these.
def _monotonic_ns() -> int:
    return time.time_ns()


def _monotonic() -> float:
    return time.time_ns() / 1e9


time.monotonic_ns = time.perf_counter_ns = _monotonic_ns
time.monotonic = time.perf_counter = _monotonic

STDOUT = 1
STDERR = 2
PROGRAM = "<program>"
# Buffered output goes to the host once this many characters are pending, and at a newline
# for the first LINE_BY_LINE lines of a run: every host call is a VM exit (milliseconds under
# emulation, microseconds on hardware), and print() alone writes twice (the text, then the end).
FLUSH_AT = 8192
LINE_BY_LINE = 100
# The most characters one host call carries. A host call's arguments travel through the guest's
# output buffer, which holds 64 KiB beyond the result limit; 8192 characters are at most 32 KiB
# of UTF-8. One larger write would abort the guest.
WRITE_CHUNK = 8192
# The longest error message a reply carries: the reply travels through the same buffer. The
# whole text still reaches stderr, in the traceback.
MAX_MESSAGE = 8192

# What the daemon runs after every restore, before the sandbox takes its next request. A restore
# puts back the snapshot's pages, and the first write to each page after it faults and copies
# it, which costs far more than the work here. This program makes the interpreter write the pages
# a typical request writes (the runner's own path, compiling, a loop, a function, printing, JSON),
# so that a request does not pay for them. Its output is refused by the host and its result is
# dropped. It is fixed text: what it leaves behind is the same for every request, and no request's
# data can be in it.
PRIME = """
import json
squares = []
for i in range(100):
    squares.append(i * i)
def shifted(value, by=1):
    return value + by
text = f"{shifted(sum(squares))} {len(squares)}"
print(text, squares[:3], {"k": text})
json.dumps({"squares": squares[:10], "text": text, "ratio": 0.5})
"""


class _HostStream(io.TextIOBase):
    """sys.stdout / sys.stderr for the program: buffered into the host's capture (FLUSH_AT)."""

    def __init__(self, stream: int, name: str):
        self._stream = stream
        self._name = name
        self._pending: list[str] = []
        self._pending_chars = 0

    @property
    def name(self) -> str:
        return self._name

    @property
    def encoding(self) -> str:
        return "utf-8"

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        if not isinstance(text, str):
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        if _Output.open and text:
            self._pending.append(text)
            self._pending_chars += len(text)
            at_line_end = _Output.lines_left > 0 and "\n" in text
            if at_line_end:
                _Output.lines_left -= 1
            if at_line_end or self._pending_chars >= FLUSH_AT:
                self.flush()
        return len(text)

    def flush(self) -> None:
        if self._pending:
            text = "".join(self._pending)
            self._pending.clear()
            self._pending_chars = 0
            # Until the host says the output cap is reached; the rest is dropped here.
            for start in range(0, len(text), WRITE_CHUNK):
                if not _Output.open:
                    break
                _Output.open = host.write(self._stream, text[start : start + WRITE_CHUNK])

    def isatty(self) -> bool:
        return False

    def fileno(self) -> int:
        # For libraries that ask (faulthandler, say); writing to the descriptor itself goes
        # through WASI, where a write may be partial (os.write says how much, as POSIX allows).
        return self._stream


class _Output:
    # Set to False once the host says the output cap is reached: further writes are dropped
    # here rather than sent to the host one by one.
    open = True
    # How many more of this run's lines go to the host at their newline.
    lines_left = LINE_BY_LINE

    @staticmethod
    def start() -> None:
        _Output.open = True
        _Output.lines_left = LINE_BY_LINE

    @staticmethod
    def flush() -> None:
        _stdout.flush()
        _stderr.flush()


_stdout = _HostStream(STDOUT, "<stdout>")
_stderr = _HostStream(STDERR, "<stderr>")
# The interpreter's own streams are text wrappers straight over unbuffered WASI descriptors,
# which take at most 32 KiB a write: the wrapper reports a larger write as done and silently
# drops the rest. So sys.__stdout__ and sys.__stderr__ are the runner's streams as well, and
# every way a program writes through Python is capped (and flagged) the same way.
sys.__stdout__, sys.__stderr__ = _stdout, _stderr


def _sleep_after_flushing(seconds: float, sleep=time.sleep) -> None:
    # A program about to wait has its output seen first.
    _Output.flush()
    sleep(seconds)


_sleep_after_flushing.__doc__ = time.sleep.__doc__
time.sleep = _sleep_after_flushing


def _json_or_repr(value) -> str:
    """The value as JSON text, or its repr as a JSON string when JSON cannot carry it."""
    try:
        return json.dumps(value, allow_nan=False, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError):
        return json.dumps(repr(value), ensure_ascii=False)


# Replies are JSON text: a result is encoded once, and spliced into its reply.
def _error(kind: str, message: str) -> str:
    reply = {"ok": False, "error": {"kind": kind, "message": message}}
    return json.dumps(reply, ensure_ascii=False)


def _completed(value, max_bytes: int) -> str:
    text = _json_or_repr(value)
    if len(text.encode("utf-8", "surrogatepass")) > max_bytes:
        return _error(
            "result_too_large",
            f"the result, as JSON, is over the limit of {max_bytes} bytes; "
            "print large output instead, or return less",
        )
    return '{"ok": true, "result": ' + text + "}"


def _failed(kind: str, error: BaseException) -> str:
    message = "".join(traceback.format_exception_only(error)).strip()
    if len(message) > MAX_MESSAGE:
        more = len(message) - MAX_MESSAGE
        message = f"{message[:MAX_MESSAGE]}... ({more} more characters in stderr)"
    return _error(kind, message)


def _program_traceback(error: BaseException) -> str:
    """The traceback from the program's frames on: the runner's own frames are left out."""
    tb = error.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename != PROGRAM:
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(error), error, tb))


def _split(code: str):
    """The usual program, one whose last statement is an expression starting at column 0,
    compiled straight from its source: the statements before that line, and the expression.
    This skips building the program's syntax tree as Python objects, which costs about as much
    as compiling it. None when the program does not split that way; the syntax tree decides.

    The split is sound when both parts compile on their own: a line at column 0 starts a new
    top-level statement unless an open bracket, string or backslash carries the line before it
    on, and each of those leaves the part before it unable to compile."""
    if "\r" in code:  # line numbers below count "\n" only
        return None
    lines = code.split("\n")
    for index in range(len(lines) - 1, -1, -1):
        first = lines[index][:1]
        if first and first not in " \t\f#":
            break
    else:
        return None
    try:
        last = compile("\n" * index + "\n".join(lines[index:]), PROGRAM, "eval")
        body = compile("\n".join(lines[:index]), PROGRAM, "exec")
    except Exception:  # noqa: BLE001 - whatever it is, the syntax tree path reports it
        return None
    return body, last


# At most this many violations go back; the message says how many more there were.
MAX_VIOLATIONS = 100


class _PolicyCheck(ast.NodeVisitor):
    """What a program's syntax tree names that its policy refuses (see hyperlightd_api::Policy):
    imports of modules outside `allowed_modules` (relative imports and `__import__` too, when
    there is a list), and names in `blocked_functions`, also as attributes of `builtins` or
    `__builtins__`, imported from `builtins`, or fetched with getattr by a literal name. A guard
    rail, not a boundary: a program bent on it can reach any function some other way."""

    def __init__(self, policy: dict):
        allowed = policy.get("allowed_modules")
        self.allowed = None if allowed is None else tuple(allowed)
        self.blocked = frozenset(policy.get("blocked_functions") or ())
        self.found = []

    def _refuse(self, node, rule: str, name: str) -> None:
        self.found.append({"line": node.lineno, "rule": rule, "name": name})

    def _allows(self, module: str) -> bool:
        return any(module == a or module.startswith(a + ".") for a in self.allowed)

    def visit_Import(self, node):
        for alias in node.names:
            if self.allowed is not None and not self._allows(alias.name):
                self._refuse(node, "allowed_modules", alias.name)
        self.generic_visit(node)

    def visit_ImportFrom(self, node):
        module = node.module or ""
        if self.allowed is not None:
            if node.level:
                self._refuse(node, "allowed_modules", "." * node.level + module)
            elif not self._allows(module) and not all(
                self._allows(f"{module}.{alias.name}") for alias in node.names
            ):
                self._refuse(node, "allowed_modules", module)
        if module == "builtins" and not node.level:
            for alias in node.names:
                if alias.name in self.blocked:
                    self._refuse(node, "blocked_functions", alias.name)
        self.generic_visit(node)

    def visit_Name(self, node):
        if self.allowed is not None and node.id == "__import__":
            self._refuse(node, "allowed_modules", "__import__")
        elif node.id in self.blocked:
            self._refuse(node, "blocked_functions", node.id)
        elif self.blocked and node.id == "__builtins__":
            self._refuse(node, "blocked_functions", "__builtins__")
        self.generic_visit(node)

    def visit_Attribute(self, node):
        value = node.value
        if (
            node.attr in self.blocked
            and isinstance(value, ast.Name)
            and value.id in ("builtins", "__builtins__")
        ):
            self._refuse(node, "blocked_functions", node.attr)
        self.generic_visit(node)

    def visit_Call(self, node):
        func, args = node.func, node.args
        if (
            isinstance(func, ast.Name)
            and func.id == "getattr"
            and len(args) >= 2
            and isinstance(args[1], ast.Constant)
            and args[1].value in self.blocked
        ):
            self._refuse(node, "blocked_functions", args[1].value)
        self.generic_visit(node)


def _refused(tree, policy: dict):
    """The reply refusing the program in `tree` under `policy`, or None when nothing is refused."""
    check = _PolicyCheck(policy)
    check.visit(tree)
    if not check.found:
        return None
    found = sorted(check.found, key=lambda v: v["line"])
    shown = found[:MAX_VIOLATIONS]
    listed = "; ".join(f"line {v['line']}: {v['name']} ({v['rule']})" for v in shown)
    more = f"; and {len(found) - len(shown)} more" if len(found) > len(shown) else ""
    message = f"the program was not run: it names what its policy refuses: {listed}{more}"
    error = {"kind": "policy_violation", "message": message, "violations": shown}
    reply = {"ok": False, "error": error}
    return json.dumps(reply, ensure_ascii=False)


def _compile(code: str, tree=None):
    """The program's statements, and its last expression apart when it ends with one; from
    `tree`, its syntax tree, when the caller has it."""
    if tree is None:
        split = _split(code)
        if split is not None:
            return split
        tree = ast.parse(code, PROGRAM, "exec")
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr):
        last = ast.Expression(tree.body.pop().value)
    body = compile(tree, PROGRAM, "exec")
    return body, (compile(last, PROGRAM, "eval") if last is not None else None)


def _new_scope() -> dict:
    return {"__name__": "__main__", "__builtins__": __builtins__}


# A session's globals: made by its first exec and kept in its saved state, so that every later
# exec of the session runs in them. Other programs get a scope of their own.
_session_scope = None


def _scope(session: bool) -> dict:
    global _session_scope
    if not session:
        return _new_scope()
    if _session_scope is None:
        _session_scope = _new_scope()
    return _session_scope


def _run(code: str, max_result_bytes: int, scope: dict, policy=None) -> str:
    try:
        tree = None
        if policy:
            # The check reads the program's syntax tree; compiling goes on from the same tree.
            tree = ast.parse(code, PROGRAM, "exec")
            refused = _refused(tree, policy)
            if refused is not None:
                return refused
        body, last = _compile(code, tree)
    except (SyntaxError, ValueError) as error:
        # ValueError: source code string cannot contain null bytes.
        _stderr.write("".join(traceback.format_exception_only(error)))
        return _failed("syntax_error", error)
    except MemoryError as error:
        return _failed("out_of_memory", error)

    try:
        exec(body, scope)
        value = eval(last, scope) if last is not None else None
    except MemoryError:
        return _error("out_of_memory", "the program ran out of memory (MemoryError)")
    except SystemExit as error:
        # sys.exit() ends the program; a code other than 0 or None is a failure.
        if error.code in (None, 0):
            return _completed(None, max_result_bytes)
        _stderr.write(_program_traceback(error))
        return _failed("exception", error)
    except BaseException as error:  # noqa: BLE001 - every failure goes back to the caller
        _stderr.write(_program_traceback(error))
        return _failed("exception", error)
    try:
        return _completed(value, max_result_bytes)
    except MemoryError:
        return _error("out_of_memory", "the program ran out of memory rendering its result")


_keep_import_caches()


# The working directory, preopened by the host as "work".
WORKDIR = "/work"
_in_workdir = False


def _enter_workdir() -> None:
    """Makes WORKDIR the current directory, once: the first call (the daemon's, while it builds
    the template) does it, and the snapshot keeps it for every request."""
    global _in_workdir
    if not _in_workdir:
        try:
            os.chdir(WORKDIR)
        except FileNotFoundError:
            # Only a daemon from before working directories (the benchmark's baseline) has none;
            # the end-to-end tests check that programs start in WORKDIR.
            pass
        _in_workdir = True


class WitWorld(wit_world.WitWorld):
    def run(self, event: str) -> str:
        _enter_workdir()
        request = json.loads(event)
        # The interpreter's state, random's included, was frozen at build time and every
        # request starts from the same snapshot: seed from the host's entropy so that requests
        # do not share a sequence. (random.seed() would read 2.5 KB through os.urandom, in
        # several host calls: about 6 ms a request in the nested-KVM VM.)
        random.seed(int(request["seed"], 16))
        _Output.start()
        sys.stdout, sys.stderr = _stdout, _stderr
        prime = bool(request.get("prime"))
        code = PRIME if prime else request["code"]
        scope = _scope(bool(request.get("session")) and not prime)
        try:
            policy = None if prime else request.get("policy")
            return _run(code, int(request["max_result_bytes"]), scope, policy)
        finally:
            _Output.flush()
