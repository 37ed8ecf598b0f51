"""bz2's C half, for the hyperlightd guest: CPython's WASI build has no libbz2.

`import bz2` works, so that packages which import it to read compressed files when asked (such
as networkx) import too. Compressing or decompressing bzip2 data raises Bzip2Unavailable, an
OSError (what bz2's callers, such as tarfile's format detection, expect of data they cannot
read) and a NotImplementedError.
"""

_WHY = (
    "bzip2 is not available in this guest: its CPython is built for WASI without libbz2 "
    "(zlib and gzip work)"
)


class Bzip2Unavailable(NotImplementedError, OSError):
    pass


class BZ2Compressor:
    def __init__(self, compresslevel=9, /):
        pass

    def compress(self, data, /):
        raise Bzip2Unavailable(_WHY)

    def flush(self):
        raise Bzip2Unavailable(_WHY)


class BZ2Decompressor:
    eof = False
    unused_data = b""
    needs_input = True

    def decompress(self, data, max_length=-1):
        raise Bzip2Unavailable(_WHY)
