"""Reading a model file's bytes with every OS failure a FormatError, pickles refused.

Shared by the tokenizer loader (`loader.sniff`) and the weight opener (`weights.sniff_weights`),
so that both recognise and refuse the same files with the same words.
"""
from __future__ import annotations

import os
import stat

from forma_gui.errors import FormatError

PICKLE_HINT = ("this is a pickle (PyTorch .bin/.pt); forma never unpickles files, because "
               "unpickling runs code. Convert the model to safetensors first")


def is_pickle(head: bytes) -> bool:
    """A pickle (protocol 2+ opens with PROTO, 0x80) or a zip (PyTorch's archive of pickles).

    >>> is_pickle(b"\\x80\\x02}q"), is_pickle(b"PK\\x03\\x04"), is_pickle(b"GGUF")
    (True, True, False)
    """
    return head[:1] == b"\x80" or head[:2] == b"PK"


def check_regular(path: str | os.PathLike) -> None:
    """FormatError unless `path` is a regular file: a named pipe or a device would block the
    read (or never end), so they are refused before it."""
    try:
        mode = os.stat(path).st_mode
    except OSError as e:
        raise FormatError(f"cannot read: {e.strerror or e}", path=path) from e
    if not stat.S_ISREG(mode):
        kind = ("a folder" if stat.S_ISDIR(mode) else "a named pipe" if stat.S_ISFIFO(mode)
                else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "a socket"
                if stat.S_ISSOCK(mode) else "not a regular file")
        raise FormatError(f"expected a regular file, found {kind}", path=path)


def read_head(path: str | os.PathLike, size: int) -> bytes:
    """The first `size` bytes of a file to sniff; FormatError if unreadable, empty, a pickle
    or not a regular file."""
    check_regular(path)
    try:
        with open(path, "rb") as f:
            head = f.read(size)
    except OSError as e:
        raise FormatError(f"cannot read: {e.strerror or e}", path=path) from e
    if not head:
        raise FormatError("the file is empty", path=path, offset=0)
    if is_pickle(head):
        raise FormatError(PICKLE_HINT, path=path, offset=0)
    return head


def read_bytes(path: str | os.PathLike, *, limit: int | None = None, what: str = "file") -> bytes:
    """The whole file, refused unread when it is over `limit` bytes or not a regular file;
    OSError -> FormatError."""
    check_regular(path)
    try:
        if limit is not None and os.stat(path).st_size > limit:
            raise FormatError(f"{what} larger than {limit} bytes", path=path, offset=0)
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise FormatError(f"cannot read: {e.strerror or e}", path=path) from e
