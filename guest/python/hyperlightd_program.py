"""hyperlightd's Python programs: how a program is checked against its policy, compiled, run
and answered. Shared by both Python guests' runners, the WebAssembly one (runner.py, built into
the component) and the native one (guest/python-native/runner.py, loaded into the warm
interpreter), which differ in how they reach the host.

A program's result is the value of its last statement when that statement is an expression, as
in a notebook cell; otherwise null. numpy scalars and arrays become the numbers and lists they
hold; other values JSON cannot carry are rendered with repr().
"""

import ast
import builtins
import io
import json
import os
import sys
import traceback
import types

PROGRAM = "<program>"
# The longest error message a reply carries: the reply travels through the same buffer. The
# whole text still reaches stderr, in the traceback.
MAX_MESSAGE = 8192


STDOUT = 1
STDERR = 2
# Buffered output goes to the host once this many characters are pending, and at a newline
# for the first LINE_BY_LINE lines of a run: every host call is a VM exit (milliseconds under
# emulation, microseconds on hardware), and print() alone writes twice (the text, then the end).
FLUSH_AT = 8192
LINE_BY_LINE = 100
# The most characters one host call of the WebAssembly guest carries. A host call's arguments travel through the guest's
# output buffer, which holds 64 KiB beyond the result limit; 8192 characters are at most 32 KiB
# of UTF-8. One larger write would abort the guest.
WRITE_CHUNK = 8192


class HostStream(io.TextIOBase):
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
        if Output.open and text:
            self._pending.append(text)
            self._pending_chars += len(text)
            at_line_end = Output.lines_left > 0 and "\n" in text
            if at_line_end:
                Output.lines_left -= 1
            if at_line_end or self._pending_chars >= FLUSH_AT:
                self.flush()
        return len(text)

    def flush(self) -> None:
        if self._pending:
            text = "".join(self._pending)
            self._pending.clear()
            self._pending_chars = 0
            # Until the host says the output cap is reached; the rest is dropped here.
            for start in range(0, len(text), Output.chunk):
                if not Output.open:
                    break
                Output.open = Output.send(self._stream, text[start : start + Output.chunk])

    def isatty(self) -> bool:
        return False

    def fileno(self) -> int:
        # For libraries that ask (faulthandler, say); writing to the descriptor itself goes
        # around the buffer (in the WebAssembly guest through WASI, where a write may be
        # partial, as POSIX allows; in the native guest to the console).
        return self._stream


class Output:
    # The runner's way to the host: send(stream, text) -> whether there is room for more.
    send = None
    # The most characters one host call carries (the native guest's calls carry less).
    chunk = WRITE_CHUNK
    # Set to False once the host says the output cap is reached: further writes are dropped
    # here rather than sent to the host one by one.
    open = True
    # How many more of this run's lines go to the host at their newline.
    lines_left = LINE_BY_LINE

    @staticmethod
    def start() -> None:
        # Setting a class's attribute changes the class, and every specialised read of it then
        # starts over, writing its code's page: only what a run before changed is set.
        if not Output.open:
            Output.open = True
        if Output.lines_left != LINE_BY_LINE:
            Output.lines_left = LINE_BY_LINE

    @staticmethod
    def flush() -> None:
        stdout.flush()
        stderr.flush()


stdout = HostStream(STDOUT, "<stdout>")
stderr = HostStream(STDERR, "<stderr>")


class ToolError(Exception):
    """A tool call that failed: the tool's own error, or a call the daemon did not send (no such
    tool, arguments its schema refuses, a limit reached, no answer in time)."""


class Tools:
    # The runner's way to the host: call(name, arguments_json) -> {"id"} or {"error"}, and
    # wait(ms) -> {"id", "result"} | {"id", "error"} | {"wait": why} (see the daemon's
    # sandbox/tool_host.rs).
    call = None
    wait = None


class Http:
    # The runner's way to the host: fetch(request_json) -> the response, or {"error": {"kind",
    # "message"}} (see the daemon's sandbox/run_host.rs). The most characters a request may
    # carry: it travels through the guest's output buffer, which holds the result limit.
    fetch = None
    max_request = WRITE_CHUNK


def _host_open(request):
    """urllib's `http_open`/`https_open`: the request made by the host, the whole response back
    (an HTTP error status then raises HTTPError in urllib's own processing, as usual)."""
    import base64
    import http.client
    import urllib.error
    import urllib.response

    data = request.data
    if data is not None and not isinstance(data, (bytes, bytearray)):
        data = data.read() if hasattr(data, "read") else b"".join(data)
    sent = {
        "method": request.get_method(),
        "url": request.full_url,
        "headers": [[name, value] for name, value in request.header_items()],
        "redirect": "follow",
    }
    if data:
        sent["body"] = base64.b64encode(bytes(data)).decode("ascii")
    text = json.dumps(sent)
    if len(text) > Http.max_request:
        raise urllib.error.URLError(
            f"limit: the request is {len(text)} bytes encoded; the sandbox sends at most "
            f"{Http.max_request} (the daemon's --max-result-bytes)"
        )
    Output.flush()  # what the program wrote before the request is seen before it
    answer = Http.fetch(text)
    if "error" in answer:
        raise urllib.error.URLError(f"{answer['error']['kind']}: {answer['error']['message']}")
    headers = http.client.HTTPMessage()
    for name, value in answer["headers"]:
        headers[name] = value
    body = io.BytesIO(base64.b64decode(answer["body"]))
    response = urllib.response.addinfourl(body, headers, answer["url"], answer["status"])
    response.msg = response.reason = answer.get("status_text", "")
    return response


def install_http() -> None:
    """Makes urllib (urlopen, and every opener build_opener makes) send http and https requests
    through the host. The guest has no socket: http.client's connections, and the clients built
    on them rather than on urllib, cannot connect."""
    import urllib.request

    def host_open(handler, request):
        return _host_open(request)

    urllib.request.HTTPHandler.http_open = host_open
    if hasattr(urllib.request, "HTTPSHandler"):
        urllib.request.HTTPSHandler.https_open = host_open
    else:
        # A CPython without ssl has no HTTPSHandler: the HTTP handler takes https too.
        urllib.request.HTTPHandler.https_open = host_open
        urllib.request.HTTPHandler.https_request = urllib.request.AbstractHTTPHandler.do_request_
    # urlopen's opener, built now (the runners call this before their template is taken), not
    # by every program's first request.
    urllib.request.install_opener(urllib.request.build_opener())


def _tool(name: str, description: str):
    def tool(*args, **kwargs):
        if args:
            if len(args) != 1 or not isinstance(args[0], dict) or kwargs:
                raise TypeError(f"tools.{name}: pass keyword arguments, or one dict of them")
            kwargs = dict(args[0])
        try:
            arguments = json.dumps(kwargs)
        except (TypeError, ValueError) as error:
            raise TypeError(f"tools.{name}: the arguments cannot be sent as JSON: {error}") from None
        Output.flush()  # what the program wrote before the call is seen before it
        sent = Tools.call(name, arguments)
        if "error" in sent:
            raise ToolError(f"tools.{name}: {sent['error']}")
        while True:
            answer = Tools.wait(-1.0)
            if answer.get("id") == sent["id"]:
                if "error" in answer:
                    raise ToolError(f"tools.{name}: {answer['error']}")
                return json.loads(answer["result"])
            why = answer.get("wait")
            if why in ("gone", "wall_clock", "idle"):
                raise ToolError(f"tools.{name}: no answer will come ({why})")

    tool.__name__ = tool.__qualname__ = name
    tool.__doc__ = description or None
    return tool


def install_tools(declared, scope: dict) -> None:
    """Makes the module `tools` of this run: each tool a function of keyword arguments (or one
    dict) returning the tool's result, decoded; `tools.ToolError` what a failed call raises.
    It is the program's global `tools` and importable (`from tools import get_weather`); a run
    without tools gets an empty one, so that a session's later exec cannot call an earlier
    exec's tools."""
    module = types.ModuleType("tools", "The tools this execution may call.")
    module.ToolError = ToolError
    for item in declared or ():
        setattr(module, item["name"], _tool(item["name"], item.get("description", "")))

    def missing(name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        return _tool(name, "")  # the daemon refuses it, naming the tools there are

    module.__getattr__ = missing
    sys.modules["tools"] = module
    scope["tools"] = module


# The encoders, built once in the template: json.dumps with any option builds a new encoder on
# every call, and every object it allocates writes a page the restore has to give back.
def _plain(value):
    """numpy's scalars and arrays as the numbers and lists they hold (`df.x.sum()` is 6, as a
    notebook shows it, not "np.int64(6)"); anything else JSON cannot carry is refused, and the
    result becomes its repr."""
    if type(value).__module__ == "numpy" and hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not JSON")


_RESULT_JSON = json.JSONEncoder(allow_nan=False, ensure_ascii=False, default=_plain)
_TEXT_JSON = json.JSONEncoder(ensure_ascii=False)


def _json_or_repr(value) -> str:
    """The value as JSON text, or its repr as a JSON string when JSON cannot carry it."""
    try:
        return _RESULT_JSON.encode(value)
    except (TypeError, ValueError, RecursionError):
        return _TEXT_JSON.encode(repr(value))


# Replies are JSON text: a result is encoded once, and spliced into its reply.
def failure_reply(kind: str, message: str) -> str:
    reply = {"ok": False, "error": {"kind": kind, "message": message}}
    return _TEXT_JSON.encode(reply)


def completed_reply(value, max_bytes: int) -> str:
    text = _json_or_repr(value)
    if len(text.encode("utf-8", "surrogatepass")) > max_bytes:
        return failure_reply(
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
    return failure_reply(kind, message)


def _program_traceback(error: BaseException) -> str:
    """The traceback from the program's frames on: the runner's own frames are left out."""
    tb = error.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename != PROGRAM:
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(error), error, tb))


# The name a program's last expression is left under: `_RESULT += <the expression>` is put in
# front of it (see _split). In builtins, the name finds _CAPTURE, whose `+=` gives back the
# value, which the program's scope then holds under the name until run() takes it out.
_RESULT = "__hyperlightd_result__"


class _Capture:
    __slots__ = ()

    def __iadd__(self, value):
        return value


_CAPTURE = _Capture()
setattr(builtins, _RESULT, _CAPTURE)
# What _compile returns in place of the last expression's code when the program captures it.
_CAPTURED = object()


def _split(code: str):
    """The usual program, one whose last statement is an expression starting at column 0,
    compiled once, straight from its source, with `_RESULT += ` in front of that expression:
    a compile costs the same again however short its source is (about 2 ms of the worker's
    time under emulation, and a third of that again in the restore), and building the
    program's syntax tree as Python objects costs about as much as compiling it. Lines and
    line numbers stay as the program has them. None when the program does not compile that
    way; then the syntax tree decides.

    The capture is sound because an augmented assignment takes exactly what an expression
    statement does (star expressions; `yield` and `await` are refused at the top level either
    way) and cannot be chained: at column 0 it starts a statement only at the top level, and
    anywhere else (in brackets, after a backslash, as a keyword argument) it does not compile,
    or, inside a string, it names nothing, which the check of the code's names catches. A `;`
    would end the expression before the program's last statement does: such programs go the
    other way. A program that binds the name itself gets what it asks for."""
    if "\r" in code:  # line numbers below count "\n" only
        return None
    lines = code.split("\n")
    for index in range(len(lines) - 1, -1, -1):
        first = lines[index][:1]
        if first and first not in " \t\f#":
            break
    else:
        return None
    if any(";" in line for line in lines[index:]):
        return None
    lines[index] = f"{_RESULT} += {lines[index]}"
    try:
        program = compile("\n".join(lines), PROGRAM, "exec")
    except Exception:  # noqa: BLE001 - whatever it is, the syntax tree path reports it
        return None
    return program if _RESULT in program.co_names else None


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
        # The tools the exec declared are the caller's own: always allowed.
        return module == "tools" or any(module == a or module.startswith(a + ".") for a in self.allowed)

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
    return _TEXT_JSON.encode(reply)


def _compile(code: str, tree=None):
    """The program's statements, and how its result is found: _CAPTURED (the statements leave
    it in the scope, under _RESULT), its last expression's code apart, or None (it does not end
    with an expression). From `tree`, its syntax tree, when the caller has it."""
    if tree is None:
        program = _split(code)
        if program is not None:
            return program, _CAPTURED
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


def scope(session: bool) -> dict:
    global _session_scope
    if not session:
        return _new_scope()
    if _session_scope is None:
        _session_scope = _new_scope()
    return _session_scope


# The variables the last request set in os.environ: (name, value set, value replaced or None).
_env_set: list = []


def set_env(env) -> None:
    """Sets the request's environment variables (`env`, a dict or None) in os.environ, after
    putting back what the last request's replaced, unless its program changed it meanwhile: an
    exec's own variables do not outlive it in a session (whose own are in every request)."""
    global _env_set
    for name, value, replaced in _env_set:
        if os.environ.get(name) != value:
            continue
        if replaced is None:
            del os.environ[name]
        else:
            os.environ[name] = replaced
    _env_set = [(name, value, os.environ.get(name)) for name, value in (env or {}).items()]
    os.environ.update(env or {})


def run(code: str, max_result_bytes: int, scope: dict, stderr, policy=None, rich=None) -> str:
    """Runs `code` in `scope` (after checking it against `policy`, when there is one) and returns
    the reply; a failure's traceback goes to `stderr`. `rich(value)`, when given, may show the
    last expression's value as display data instead (a figure, a table): then the result is
    None."""
    if Http.max_request != max_result_bytes:  # see Output.start
        Http.max_request = max_result_bytes
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
        stderr.write("".join(traceback.format_exception_only(error)))
        return _failed("syntax_error", error)
    except MemoryError as error:
        return _failed("out_of_memory", error)

    try:
        exec(body, scope)
        if last is _CAPTURED:
            value = scope.pop(_RESULT, None)
        else:
            value = eval(last, scope) if last is not None else None
        if rich is not None and value is not None and rich(value):
            value = None
    except MemoryError:
        return failure_reply("out_of_memory", "the program ran out of memory (MemoryError)")
    except SystemExit as error:
        # sys.exit() ends the program; a code other than 0 or None is a failure.
        if error.code in (None, 0):
            return completed_reply(None, max_result_bytes)
        stderr.write(_program_traceback(error))
        return _failed("exception", error)
    except BaseException as error:  # noqa: BLE001 - every failure goes back to the caller
        stderr.write(_program_traceback(error))
        return _failed("exception", error)
    try:
        return completed_reply(value, max_result_bytes)
    except MemoryError:
        return failure_reply("out_of_memory", "the program ran out of memory rendering its result")
