"""hyperlightd's Python runner.

Built into the Python guest component by componentize-py, which runs this module once at build
time and keeps the initialised interpreter (with everything imported here) in the component, so
a sandbox starts with it warm. The daemon then snapshots the sandbox and restores it after every
request.

Contract with the daemon (the same for every language, plus Python's "prime"):
  event:  {"code": "<program text>", "max_result_bytes": N, "seed": "<hex>", "session": false,
           "prime": false, "policy": {"allowed_modules": [...], "blocked_functions": [...]},
           "env": {"NAME": "value", ...} (optional: set in os.environ, see program.set_env)}
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
(see below). Output is buffered here, since every host call is a VM exit (see hyperlightd_program.HostStream): the
first LINE_BY_LINE lines of a run go to the host line by line, as on a terminal, the rest in
blocks of FLUSH_AT characters, as into a pipe; a flush() or a sleep sends what is pending. A
program stopped at its time limit loses what is still pending: an unfinished last line, or past
the first LINE_BY_LINE lines, at most the last block.
"""

import _random
import gc
import json
import sys

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
import functools
import hashlib  # noqa: F401
import heapq  # noqa: F401
import itertools
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

import hyperlightd_program as program
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


# Every host call is a VM exit: output is buffered (see hyperlightd_program.HostStream).
program.Output.send = host.write
program.Tools.call = lambda name, arguments: json.loads(host.tool_call(name, arguments))
program.Tools.wait = lambda ms: json.loads(host.tool_wait(ms))
program.Http.fetch = lambda request: json.loads(host.fetch(request))
program.install_http()
_stdout, _stderr = program.stdout, program.stderr
# The interpreter's own streams are text wrappers straight over unbuffered WASI descriptors,
# which take at most 32 KiB a write: the wrapper reports a larger write as done and silently
# drops the rest. So sys.__stdout__ and sys.__stderr__ are the runner's streams as well, and
# every way a program writes through Python is capped (and flagged) the same way.
sys.__stdout__, sys.__stderr__ = _stdout, _stderr


def _sleep_after_flushing(seconds: float, sleep=time.sleep) -> None:
    # A program about to wait has its output seen first.
    program.Output.flush()
    sleep(seconds)


_sleep_after_flushing.__doc__ = time.sleep.__doc__
time.sleep = _sleep_after_flushing


_keep_import_caches()


# The pool size of CPython's small-object allocator in a 32-bit build.
POOL = 4096


def _fill_allocator_holes() -> list:
    """Takes, and keeps, the free memory the template's allocators would hand out first.

    Importing the modules above left holes all over the heap: free blocks in half-used pools
    of every size class (a pool is one 4 KiB page in this 32-bit guest), objects kept on the
    interpreter's free lists, free chunks between the malloc'd ones. A request's objects would
    land in those holes, one here and one there, and each page written is a copy-on-write
    fault and a page the restore gives back. Filled, a request's objects come from fresh
    memory, one after another: about half as many pages written (docs/BENCHMARKS.md).

    For each kind and size of object, this makes objects until half a pool of them in a row
    (4 of the large ones) lie at equal steps going up, which holes seldom do (their order is
    the order they were freed in): then the allocator is carving a fresh pool (fresh memory).
    It costs the template under 3 MiB.
    """
    kept = []

    def fill(make, most: int = 60_000, in_a_row: int = 0) -> None:
        made, run, last, step = [make()], 0, 0, 0
        # A pool's header is 32 bytes; blocks are multiples of 8.
        in_a_row = in_a_row or (POOL - 32) // (-(-sys.getsizeof(made[0]) // 8) * 8) // 2
        # itertools.repeat: no int is made per turn, in the size class being filled.
        for _ in itertools.repeat(None, most):
            made.append(make())
            address = id(made[-1])
            run = run + 1 if address - last == step > 0 else 0
            last, step = address, address - last
            if run >= in_a_row:
                break
        kept.append(made)

    # The smallest block (a bare object), then the kinds with a free list of their own, made
    # until the list is empty and fresh memory is carved.
    for make in (object, functools.partial(iter, ()), functools.partial(iter, []),
                 functools.partial(iter, range(0)), functools.partial(range, 0),
                 functools.partial(slice, None), functools.partial(getattr, kept, "append"),
                 functools.partial(_keep_import_caches.__get__, 0)):
        fill(make)
    ints, floats = itertools.count(1 << 20), itertools.count(0.5)
    fill(lambda: next(ints))
    fill(lambda: next(floats))
    for length in range(1, 21):  # the lengths with a free list of their own
        fill(functools.partial(tuple, [None] * length))
    fill(lambda: [None])
    fill(lambda: {"a": None})
    empty = sys.getsizeof(b"")
    for size in [*range(empty + 2, 513, 8), *(2**k for k in range(16, 9, -1)), 600]:
        small = size <= 512
        fill(functools.partial(bytes.__mul__, b"x", size - empty),
             most=60_000 if small else (8 << 20) // size,
             in_a_row=0 if small else 4)
    return kept


# The template's objects are taken out of the garbage collector's reach, as a server does
# before it forks: a collection a request sets off (gc.collect() in a program or a library)
# then walks the request's own objects only, instead of writing the header of every object
# in the template, each of whose pages would then be copied into the sandbox. Collected first,
# so that no garbage is frozen with it, and the holes filled after the collection.
gc.collect()
_HOLES = _fill_allocator_holes()
gc.freeze()


# The working directory, preopened by the host as "work".
WORKDIR = "/work"
_in_workdir = False
# Where a session's installed packages are: in its working directory, where the host unpacks
# their wheels (see the daemon's packages/unpack.rs). Importing them writes no bytecode there.
SITE = WORKDIR + "/.hyperlightd/site-packages"
sys.path.append(SITE)
sys.dont_write_bytecode = True


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


# The event's decoder, reached directly: json.loads wraps it in Python code (and two regular
# expression matches) whose every run writes pages of the template.
_decode_event = json.scanner.make_scanner(json.JSONDecoder())


def _seed_random(seed: int) -> None:
    """random.seed(seed) for an int, without the Python wrapper's pages: the C seeding it
    calls, and the one attribute it resets, written only when a run before set it."""
    _random.Random.seed(random._inst, seed)
    if random._inst.gauss_next is not None:
        random._inst.gauss_next = None


class WitWorld(wit_world.WitWorld):
    def run(self, event: str) -> str:
        _enter_workdir()
        request = _decode_event(event, 0)[0]
        # The interpreter's state, random's included, was frozen at build time and every
        # request starts from the same snapshot: seed from the host's entropy so that requests
        # do not share a sequence. (random.seed() would read 2.5 KB through os.urandom, in
        # several host calls: about 6 ms a request in the nested-KVM VM.)
        _seed_random(int(request["seed"], 16))
        program.Output.start()
        sys.stdout, sys.stderr = _stdout, _stderr
        prime = bool(request.get("prime"))
        code = PRIME if prime else request["code"]
        scope = program.scope(bool(request.get("session")) and not prime)
        program.install_tools(request.get("tools"), scope)
        program.set_env(request.get("env"))
        # Packages installed since the site directory was last listed (or made) are found.
        sys.path_importer_cache.pop(SITE, None)
        try:
            policy = None if prime else request.get("policy")
            return program.run(code, int(request["max_result_bytes"]), scope, _stderr, policy)
        finally:
            program.Output.flush()
