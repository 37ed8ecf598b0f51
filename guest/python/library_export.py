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
/0/image-failures.txt.
"""

import importlib.util
import os
import py_compile

import wit_world

OUT = "/0/image"
# Where each directory is read now, and where the guest sees it at run time.
TREES = (("/python", "python"), ("/1", "0"))


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
                    py_compile.compile(
                        destination,
                        cfile=importlib.util.cache_from_source(destination),
                        dfile=seen_as,
                        doraise=True,
                        invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH,
                    )
                except py_compile.PyCompileError:
                    failures.append(seen_as)
    return files


def _main() -> None:
    failures: list = []
    files = sum(_export(source, name, failures) for source, name in TREES)
    with open("/0/image-failures.txt", "w") as f:
        f.write("".join(line + "\n" for line in failures))
    print(f"exported {files} files; {len(failures)} did not compile")


_main()


class WitWorld(wit_world.WitWorld):
    def run(self, event: str) -> str:
        return ""
