"""Build time only: exports the Python guest's library for the daemon to serve.

componentize-py keeps in the component only what the runner imported while it pre-initialised
the interpreter; every other module is looked up at run time in the directories the interpreter
was built with: /python (CPython's standard library, as componentize-py ships it) and /0 (the
runner's directory, with any packages). The daemon serves those two directories, read-only, from
an image in its memory. This module makes that image.

`cargo xtask python-guest` builds a throwaway component with this module as its app, with the
output directory as its first path (/0) and the runner's directory as its second (/1). Importing
this module (which componentize-py does while pre-initialising) copies /python and /1 into
/0/image/python and /0/image/0, and compiles every module to bytecode with this very interpreter,
hash-based and unchecked: the guest never compiles a module it imports, and never looks at a
source file's time. Modules that do not compile (none are known) are listed in
/0/image-failures.txt. Then it imports every package, as the guest would, and lists those that
do not import, with why, in /0/import-failures.txt: the build refuses them.
"""

import importlib.util
import os

import wit_world

OUT = "/0/image"
# Where each directory is read now, and where the guest sees it at run time.
TREES = (("/python", "python"), ("/1", "0"))
# The runner's directory, with the packages.
APP = "/1"


def _compile(source: bytes, path: str, seen_as: str) -> None:
    """Writes `path`'s bytecode where the import system looks for it: what py_compile does,
    but through a buffered file (py_compile writes with one os.write, which this WASI host may
    cut short for a large module)."""
    code = compile(source, seen_as, "exec", dont_inherit=True)
    pyc = importlib._bootstrap_external._code_to_hash_pyc(
        code, importlib.util.source_hash(source), checked=False
    )
    cfile = importlib.util.cache_from_source(path)
    os.makedirs(os.path.dirname(cfile), exist_ok=True)
    with open(cfile, "wb") as f:
        f.write(pyc)


def _export(source: str, name: str, failures: list) -> int:
    files = 0
    for folder, folders, names in os.walk(source):
        folders[:] = sorted(f for f in folders if f != "__pycache__")
        relative = os.path.relpath(folder, source)
        target = os.path.normpath(os.path.join(OUT, name, relative))
        os.makedirs(target, exist_ok=True)
        for file in sorted(names):
            if file.endswith(".pyc"):
                continue
            with open(os.path.join(folder, file), "rb") as f:
                data = f.read()
            destination = os.path.join(target, file)
            with open(destination, "wb") as f:
                f.write(data)
            files += 1
            if file.endswith(".py"):
                seen_as = os.path.normpath(os.path.join("/", name, relative, file))
                try:
                    _compile(data, destination, seen_as)
                except (SyntaxError, ValueError):
                    failures.append(seen_as)
    return files


def _top_level_names(dist_info: str) -> set:
    """The modules and packages a distribution installs at the top level, from its RECORD."""
    names = set()
    with open(os.path.join(APP, dist_info, "RECORD")) as f:
        for line in f:
            top = line.split(",", 1)[0].split("/", 1)[0]
            name = top[:-3] if top.endswith(".py") else top
            if name.isidentifier() and not top.endswith(".dist-info"):
                names.add(name)
    return names


def _check_packages() -> list:
    """Imports every package installed beside the runner, as the guest will: one that does not
    import (it needs a module WASI lacks, such as _ctypes) is reported, with why."""
    broken = []
    for entry in sorted(os.listdir(APP)):
        if not entry.endswith(".dist-info"):
            continue
        for name in sorted(_top_level_names(entry)):
            try:
                importlib.import_module(name)
            except BaseException as e:
                broken.append(f"{entry[:-len('.dist-info')]}: import {name}: {type(e).__name__}: {e}")
    return broken


def _main() -> None:
    failures: list = []
    files = sum(_export(source, name, failures) for source, name in TREES)
    with open("/0/image-failures.txt", "w") as f:
        f.write("".join(line + "\n" for line in failures))
    print(f"exported {files} files; {len(failures)} did not compile")
    with open("/0/import-failures.txt", "w") as f:
        f.write("".join(line + "\n" for line in _check_packages()))


_main()


class WitWorld(wit_world.WitWorld):
    def run(self, event: str) -> str:
        return ""
