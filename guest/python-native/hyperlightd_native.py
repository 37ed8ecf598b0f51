"""hyperlightd's runner in the native Python guest: Debian's CPython 3.11 on a Unikraft kernel in a
Hyperlight micro-VM (hyperlight-unikraft), with the scientific stack.

The daemon imports this module once, while it builds the template: it puts `hyperlightd_run` in
__main__, where hyperlight-unikraft's driver finds the functions the host calls, and `warm()`
imports the packages most programs use, so that the template (a snapshot taken afterwards) holds
them imported. Every request is then a call of `hyperlightd_run` with the event the other
runners take (see guest/README.md), and its answer is the same reply, made by the same code
(hyperlightd_program, shared with the WebAssembly guest's runner).

What the host and this runner say through hyperlight-unikraft's calls, each of which carries at
most about 68 KB:
  hyperlightd_run(event) -> reply text, or None when the reply went in pieces; the event is
      {"pieces": n} when it is too large for the call, then fetched with event(i).
  event(i) -> piece i of the event's JSON text, base64.
  file(i, offset) -> the bytes of the request's file i from offset (at most PIECE), base64.
  write(stream, text) -> whether the output cap leaves room (1 = stdout, 2 = stderr).
  wheel(i, offset) -> the bytes of the request's wheel i from offset (at most PIECE), base64.
  put(path, offset, data, last) -> None, or why the working directory's cap refuses it.
  remove(path) -> None: the program removed one of the request's files.
  reply(data) -> None: the next piece of the reply's UTF-8 text, base64.
  display(data, last) -> whether the output cap leaves room: the next piece of a display item's
      JSON text (an object of MIME type to content), base64; the item is complete at `last`.

Rich output: plt.show() sends each open figure as an `image/png` display item, and a figure
(or something drawn on one) or a pandas DataFrame or Series left as the last expression is
sent as one too (a table as `text/html` and `text/plain`) instead of being the result.
"""

import base64
import gc
import hashlib
import importlib
import io
import json
import os
import random
import shutil
import struct
import sys
import zipfile

import __main__
import hyperlight
import hyperlightd_program as program

WORKDIR = "/work"
# Where a session's installed packages live: in the guest's memory, so in its checkpoints.
SITE = "/opt/hyperlightd/site-packages"
# What a session installed, in its working directory, so that the host sees it (see
# daemon/src/packages/mod.rs).
MANIFEST = os.path.join(".hyperlightd", "packages.json")
# Bytes of a file or a reply per host call: 60,000 characters of base64.
PIECE = 45_000
# A reply this long or shorter, in ASCII, is the call's result; a longer one goes in pieces
# (the driver encodes the result as a JSON string, which may take up to 12 bytes a character).
INLINE_REPLY = 4096

# The program's output goes to the host as it is written (see hyperlightd_program.HostStream),
# at most 4096 characters a call: the driver encodes the arguments as JSON in ASCII.
program.Output.send = lambda stream, text: bool(hyperlight.call("write", stream, text))
program.Output.chunk = 4096


def _argument(text: str):
    """`text` for a host call: itself when a call carries it, else None, once it went before
    in pieces."""
    if len(text) <= program.Output.chunk and text.isascii():
        return text
    data = text.encode()
    for start in range(0, len(data), PIECE):
        hyperlight.call("argument_piece", base64.b64encode(data[start : start + PIECE]).decode("ascii"))
    return None


def _answer(answer: dict) -> dict:
    """A host call's answer, fetched in pieces when it was too large for the call."""
    if "pieces" in answer:
        pieces = (hyperlight.call("answer_piece", i) for i in range(answer["pieces"]))
        answer = json.loads(b"".join(base64.b64decode(piece) for piece in pieces))
    return answer


program.Tools.call = lambda name, arguments: hyperlight.call("tool_call", name, _argument(arguments))
program.Tools.wait = lambda ms: _answer(hyperlight.call("tool_wait", ms))
program.Http.fetch = lambda request: _answer(hyperlight.call("fetch", _argument(request)))
program.install_http()

# What the daemon runs after every restore, before the sandbox takes its next request (see
# PRIME in runner.py): the pages a typical request writes are copied here, off its path.
PRIME = """
import numpy as np
import pandas as pd
values = np.arange(1000, dtype=float)
frame = pd.DataFrame({"k": values.astype(int) % 7, "v": values})
summary = frame.groupby("k")["v"].agg(["sum", "mean"])
print(summary.head(2), float(values.std()))
{"rows": len(frame), "total": float(summary["sum"].sum())}
"""

# The packages imported before the template is taken, so that no request pays for them.
WARM = (
    "numpy",
    "pandas",
    "matplotlib",
    "matplotlib.pyplot",
    "scipy",
    "scipy.optimize",
    "scipy.stats",
    "sklearn",
    "sklearn.linear_model",
)

# The request's files as they were written into WORKDIR: (size, modification time) by path.
_given = {}


def warm() -> dict:
    """Imports WARM, and says what the guest has: Python's version and every package's."""
    import importlib
    import importlib.metadata

    for module in WARM:
        importlib.import_module(module)
    import matplotlib.pyplot as plt

    plt.show = _show
    # Drawing loads the fonts: done here, it is in the template, not in a request's time.
    figure = plt.figure(figsize=(1, 1))
    figure.gca().plot([0, 1], [0, 1])
    figure.gca().set_title("warm")
    figure.savefig(io.BytesIO(), format="png")
    plt.close(figure)
    os.makedirs(WORKDIR, exist_ok=True)
    os.chdir(WORKDIR)
    os.makedirs(SITE, exist_ok=True)
    sys.path.append(SITE)
    packages = {
        dist.metadata["Name"]: dist.version
        for dist in importlib.metadata.distributions(path=["/usr/lib/python3/dist-packages"])
    }
    version = ".".join(str(part) for part in sys.version_info[:3])
    _freeze()
    return {"python": version, "packages": dict(sorted(packages.items()))}


def _freeze() -> None:
    """Takes the template's objects out of the garbage collector's reach, as a server does
    before it forks: a collection a request sets off then walks the request's own objects only.
    Otherwise it writes the header of every object it walks, and each of those pages is copied
    into the sandbox (the packages' objects fill hundreds of megabytes). Collected first, so
    that no garbage is frozen with it."""
    gc.collect()
    gc.freeze()


def _request(event: dict) -> dict:
    if "pieces" not in event:
        return event
    data = b"".join(base64.b64decode(hyperlight.call("event", i)) for i in range(event["pieces"]))
    return json.loads(data.decode("utf-8"))


def _reseed(seed: str) -> None:
    """Seeds the generators a program uses without making its own from the host's entropy
    (the kernel's, which os.urandom, secrets and uuid4 read, is reseeded on every restore)."""
    random.seed(int(seed, 16))
    numpy_random = sys.modules.get("numpy.random")
    if numpy_random is not None:
        # Its own entropy: seeded from the host's seed, its Mersenne Twister would draw the
        # very numbers random's does.
        numpy_random.seed(list(struct.unpack("4I", os.urandom(16))))


def _clear(directory: str) -> None:
    for entry in os.scandir(directory):
        if entry.is_dir(follow_symlinks=False):
            _clear(entry.path)
            os.rmdir(entry.path)
        else:
            os.unlink(entry.path)


def _receive_files(files: list) -> None:
    """Makes WORKDIR hold exactly the request's files."""
    os.makedirs(WORKDIR, exist_ok=True)
    _clear(WORKDIR)
    os.chdir(WORKDIR)
    _given.clear()
    for index, file in enumerate(files):
        path = os.path.join(WORKDIR, file["path"])
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as out:
            offset = 0
            while offset < file["size"]:
                piece = base64.b64decode(hyperlight.call("file", index, offset))
                if not piece:
                    raise OSError(f"the host gave {offset} of {file['size']} bytes of {path}")
                out.write(piece)
                offset += len(piece)
        stat = os.stat(path)
        _given[file["path"]] = (stat.st_size, stat.st_mtime_ns)


def _send_files() -> None:
    """Sends the host every file of WORKDIR that is new or changed since the request began,
    and says which of the request's files are gone."""
    seen = set()
    for directory, subdirectories, names in os.walk(WORKDIR):
        subdirectories.sort()
        for name in sorted(names):
            path = os.path.join(directory, name)
            stat = os.lstat(path)
            relative = os.path.relpath(path, WORKDIR)
            if not os.path.isfile(path) or os.path.islink(path):
                continue
            seen.add(relative)
            if _given.get(relative) == (stat.st_size, stat.st_mtime_ns):
                continue
            with open(path, "rb") as source:
                offset = 0
                while True:
                    data = source.read(PIECE)
                    last = len(data) < PIECE
                    text = base64.b64encode(data).decode("ascii")
                    refused = hyperlight.call("put", relative, offset, text, last)
                    if refused is not None or last:
                        break
                    offset += len(data)
    for relative in _given.keys() - seen:
        hyperlight.call("remove", relative)


class InstallError(Exception):
    pass


def _wheel_bytes(index: int, wheel: dict) -> bytes:
    data = bytearray()
    while len(data) < wheel["size"]:
        piece = base64.b64decode(hyperlight.call("wheel", index, len(data)))
        if not piece:
            raise InstallError(f"the host gave {len(data)} of {wheel['size']} bytes")
        data += piece
    if hashlib.sha256(data).hexdigest() != wheel["sha256"]:
        raise InstallError("its bytes do not match the SHA-256 the host checked")
    return bytes(data)


def _unpack(data: bytes, into: str) -> None:
    """Unpacks a wheel into `into`: the archive's files, a .data directory's purelib and platlib
    laid beside them (its scripts, headers and data are not installed)."""
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        for member in archive.infolist():
            parts = member.filename.split("/")
            if member.filename.startswith("/") or ".." in parts or "\\" in member.filename:
                raise InstallError(f"it names a path outside its directory: {member.filename!r}")
        archive.extractall(into)
    for entry in os.listdir(into):
        data_dir = os.path.join(into, entry)
        if not entry.endswith(".data") or not os.path.isdir(data_dir):
            continue
        for scheme in ("purelib", "platlib"):
            source = os.path.join(data_dir, scheme)
            if os.path.isdir(source):
                for name in os.listdir(source):
                    os.rename(os.path.join(source, name), os.path.join(into, name))
        shutil.rmtree(data_dir)


def _install(wheels: list, session: bool) -> None:
    """Installs the request's wheels into SITE, all or none: each is unpacked into a staging
    directory, and moved into SITE only when every one unpacked and no file of one is already
    there. In a session, the manifest records them."""
    staging = SITE + ".staging"
    shutil.rmtree(staging, ignore_errors=True)
    try:
        for index, wheel in enumerate(wheels):
            into = os.path.join(staging, str(index))
            os.makedirs(into)
            try:
                _unpack(_wheel_bytes(index, wheel), into)
            except (InstallError, OSError, zipfile.BadZipFile, ValueError) as error:
                raise InstallError(f"{wheel['filename']}: {error}") from None
        # File by file, so that wheels sharing a namespace package's directory merge.
        moves = {}
        for index, wheel in enumerate(wheels):
            into = os.path.join(staging, str(index))
            for directory, _, names in os.walk(into):
                for name in names:
                    source = os.path.join(directory, name)
                    relative = os.path.relpath(source, into)
                    if relative in moves or os.path.lexists(os.path.join(SITE, relative)):
                        raise InstallError(
                            f"{wheel['filename']}: {relative} is already installed in this session"
                        )
                    moves[relative] = source
        for relative, source in moves.items():
            target = os.path.join(SITE, relative)
            os.makedirs(os.path.dirname(target), exist_ok=True)
            os.rename(source, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    importlib.invalidate_caches()
    if session:
        path = os.path.join(WORKDIR, MANIFEST)
        try:
            with open(path, encoding="utf-8") as source:
                recorded = json.load(source)
        except (OSError, ValueError):
            recorded = []
        recorded = recorded if isinstance(recorded, list) else []
        recorded += [{k: w[k] for k in ("name", "version", "sha256")} for w in wheels]
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as out:
            json.dump(recorded, out, indent=1)
    names = " ".join(f"{w['name']}-{w['version']}" for w in wheels)
    print(f"Successfully installed {names}")


def _deliver(reply: str):
    if len(reply) <= INLINE_REPLY and reply.isascii():
        return reply
    data = reply.encode("utf-8", "surrogatepass")
    for start in range(0, len(data), PIECE):
        hyperlight.call("reply", base64.b64encode(data[start : start + PIECE]).decode("ascii"))
    return None


def _display(bundle: dict, result: bool = False) -> bool:
    """Sends the host one display item (`result`: the program's last expression), after the
    output written before it; whether the output cap leaves room."""
    program.Output.flush()
    data = json.dumps({"data": bundle, "result": result}).encode("utf-8")
    for start in range(0, len(data), PIECE):
        last = start + PIECE >= len(data)
        text = base64.b64encode(data[start : start + PIECE]).decode("ascii")
        if not hyperlight.call("display", text, last):
            return False
    return True


def _show_figure(figure, result: bool = False) -> None:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", bbox_inches="tight")
    image = base64.b64encode(buffer.getvalue()).decode("ascii")
    _display({"image/png": image, "text/plain": repr(figure)}, result)


def _show(*_args, **_kwargs) -> None:
    """plt.show(): every open figure as an image, then closed, as a notebook shows them."""
    import matplotlib.pyplot as plt

    for number in plt.get_fignums():
        _show_figure(plt.figure(number))
    plt.close("all")


def _figure_of(value):
    """The figure `value` is, or is drawn on (axes, a line, a list of lines); else None."""
    figure_module = sys.modules.get("matplotlib.figure")
    if figure_module is None:
        return None
    from matplotlib.artist import Artist

    items = value if isinstance(value, (list, tuple)) and value else (value,)
    if not all(isinstance(item, (Artist, figure_module.Figure)) for item in items):
        return None
    figure = items[0]
    while figure is not None and not isinstance(figure, figure_module.Figure):
        figure = getattr(figure, "figure", None)
    return figure


def _rich(value) -> bool:
    """Sends `value` as display data when it is a figure or a pandas table; whether it did."""
    figure = _figure_of(value)
    if figure is not None:
        import matplotlib.pyplot as plt

        _show_figure(figure, result=True)
        plt.close(figure)
        return True
    pandas = sys.modules.get("pandas")
    if pandas is not None and isinstance(value, (pandas.DataFrame, pandas.Series)):
        frame = value if isinstance(value, pandas.DataFrame) else value.to_frame()
        html = frame._repr_html_() or frame.to_html(max_rows=60)
        _display({"text/html": html, "text/plain": repr(value)}, result=True)
        return True
    return False


def hyperlightd_run(event: dict):
    """One request: its files into WORKDIR, its program run, the files it wrote back, the reply."""
    request = _request(event)
    _reseed(request["seed"])
    program.Output.start()
    sys.stdout, sys.stderr = program.stdout, program.stderr
    prime = bool(request.get("prime"))
    try:
        _receive_files(request.get("files") or [])
        code = PRIME if prime else request["code"]
        scope = program.scope(bool(request.get("session")) and not prime)
        program.install_tools(request.get("tools"), scope)
        program.set_env(request.get("env"))
        policy = None if prime else request.get("policy")
        max_result = int(request["max_result_bytes"])
        try:
            if request.get("install"):
                _install(request["install"], bool(request.get("session")))
        except (InstallError, OSError) as error:
            reply = program.failure_reply("install_failed", str(error))
        else:
            reply = program.run(code, max_result, scope, program.stderr, policy, _rich)
    finally:
        program.Output.flush()
    if not prime:
        _send_files()
    return _deliver(reply)


__main__.hyperlightd_run = hyperlightd_run
__main__.hyperlightd_warm = warm
