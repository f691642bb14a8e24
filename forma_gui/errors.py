"""The one error type the readers raise."""
from __future__ import annotations

import os


#: the longest message an error keeps (a hostile file's names can run to megabytes)
MAX_MESSAGE = 2000


def shown(name: str | bytes, limit: int = 100) -> str:
    """repr() of a name read from a file, cut after `limit` characters.

    >>> shown("blk.0.attn_q.weight"), shown("x" * 500, 4)
    ("'blk.0.attn_q.weight'", "'xxxx'... (500 characters)")
    """
    if len(name) <= limit:
        return repr(name)
    return f"{name[:limit]!r}... ({len(name)} {'bytes' if isinstance(name, bytes) else 'characters'})"


class FormatError(ValueError):
    """A file could not be read: names the file, the byte offset (or line) and what was expected.

    >>> str(FormatError("bad magic", path="m.gguf", offset=0))
    'm.gguf: at byte 0: bad magic'
    """

    def __init__(self, message: str, *, path: str | os.PathLike | None = None,
                 offset: int | None = None, line: int | None = None,
                 json_path: tuple[str | int, ...] | None = None) -> None:
        if len(message) > MAX_MESSAGE:
            message = f"{message[:MAX_MESSAGE]}... ({len(message)} characters)"
        self.message = message
        self.path = os.fspath(path) if path is not None else None
        self.offset = offset
        self.line = line
        # the object keys and array indices of the JSON value at fault: the reader that holds
        # the file's bytes turns them into the offset (`json_text.located`)
        self.json_path = json_path
        super().__init__(self._render())

    def _render(self) -> str:
        parts = []
        if self.path is not None:
            parts.append(self.path)
        if self.offset is not None:
            parts.append(f"at byte {self.offset}")
        if self.line is not None:
            parts.append(f"line {self.line}")
        parts.append(self.message)
        return ": ".join(parts)

    def with_path(self, path: str | os.PathLike) -> "FormatError":
        """Return a copy that names `path` (used when a parser ran on bytes, not a file)."""
        return FormatError(self.message, path=path, offset=self.offset, line=self.line,
                           json_path=self.json_path)
