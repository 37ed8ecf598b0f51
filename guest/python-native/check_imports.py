"""Run by `cargo xtask native-python` in a chroot of the staged root filesystem, with the
rootfs's own interpreter: imports every top-level module of every package installed in it and
writes what is there as JSON to the file its argument names (Python's version, each package's
version). A package any of whose
modules does not import fails the build, named with the error."""

import importlib
import importlib.metadata
import json
import os
import sys
import traceback

SITE = "/usr/lib/python3/dist-packages"


def top_level(dist) -> list[str]:
    """The importable top-level names a distribution installs."""
    text = dist.read_text("top_level.txt")
    if text:
        names = text.split()
    else:
        names = set()
        for file in dist.files or ():
            first = file.parts[0]
            if first.endswith((".dist-info", ".data")) or first == "..":
                continue
            if len(file.parts) > 1:
                names.add(first)
            elif first.endswith(".py"):
                names.add(first[:-3])
            elif first.endswith(".so"):
                names.add(first.split(".")[0])
    return sorted(n for n in names if n.isidentifier() and not n.startswith("_"))


def stable_font_cache() -> None:
    """matplotlib lists the fonts it finds (its cache, made at its first import, here) in the
    order the directory listing gave them: sorted, so that every build writes the same cache."""
    font_manager = sys.modules.get("matplotlib.font_manager")
    if font_manager is None:
        return
    manager = font_manager.fontManager
    manager.afmlist.sort(key=lambda font: (font.fname, font.name, font.style, font.weight))
    manager.ttflist.sort(key=lambda font: (font.fname, font.name, font.style, font.weight))
    import matplotlib

    version = font_manager.FontManager.__version__
    path = os.path.join(matplotlib.get_cachedir(), f"fontlist-v{version}.json")
    font_manager.json_dump(manager, path)


def main() -> int:
    packages, failures = {}, []
    for dist in importlib.metadata.distributions(path=[SITE]):
        name = dist.metadata["Name"]
        packages[name] = dist.version
        for module in top_level(dist):
            try:
                importlib.import_module(module)
            except BaseException as error:  # noqa: BLE001 - every failure is reported
                last = traceback.format_exception_only(error)[-1].strip()
                failures.append(f"{name} {dist.version}: import {module}: {last}")
    if failures:
        print("packages that do not import:", *failures, sep="\n  ", file=sys.stderr)
        return 1
    stable_font_cache()
    version = ".".join(str(part) for part in sys.version_info[:3])
    manifest = {"python": version, "packages": dict(sorted(packages.items()))}
    with open(sys.argv[1], "w", encoding="utf-8") as out:
        json.dump(manifest, out, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
