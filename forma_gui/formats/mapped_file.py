"""`MappedFile`: a weight file opened read-only and memory-mapped, the part GGUF and safetensors share.

Subclasses parse their header in `__init__` inside ``with self._closing_on_error():``, so a
file that fails to parse is never left open. Views handed out by `data` keep the map alive
after `close`.
"""
from __future__ import annotations

import contextlib
import mmap
import os
from typing import BinaryIO, Iterator, Self

import numpy as np

from forma_gui.errors import FormatError


class MappedFile:
    """`path`, `file_size`, `data` (read-only uint8 view of the whole file), `check_size`, `close`."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = os.fspath(path)
        self._file: BinaryIO | None = None
        self._mm: mmap.mmap | None = None
        try:
            self._file = open(self.path, "rb")
        except OSError as e:
            raise FormatError(f"cannot open: {e.strerror or e}", path=self.path) from e
        with self._closing_on_error():
            self.file_size = self._current_size()

    @contextlib.contextmanager
    def _closing_on_error(self) -> Iterator[None]:
        """Close the file on any exception (FormatError included), then let it propagate."""
        try:
            yield
        except BaseException:
            self.close()
            raise

    def _map(self) -> None:
        """Map the whole file read-only (an empty file cannot be mapped: `data` is then empty)."""
        if self.file_size:
            self._mm = mmap.mmap(self._file.fileno(), 0, access=mmap.ACCESS_READ)

    def _current_size(self) -> int:
        try:
            return os.fstat(self._file.fileno()).st_size
        except OSError as e:
            raise FormatError(f"cannot stat: {e.strerror or e}", path=self.path) from e

    @property
    def data(self) -> np.ndarray:
        """The whole file as a read-only uint8 array (a view of the map, nothing is read)."""
        if self._file is None:
            raise FormatError("the file is closed", path=self.path)
        if self._mm is None:
            return np.zeros(0, dtype=np.uint8)
        return np.frombuffer(self._mm, dtype=np.uint8)

    def check_size(self) -> None:
        """FormatError if the file shrank since it was opened (reading it would crash)."""
        if self._file is None:
            raise FormatError("the file is closed", path=self.path)
        size = self._current_size()
        if size < self.file_size:
            raise FormatError(f"the file shrank from {self.file_size} to {size} bytes while "
                              "open; reopen it", path=self.path, offset=size)

    def close(self) -> None:
        """Release the map and the file; views already handed out keep the map alive."""
        if self._mm is not None:
            try:
                self._mm.close()
            except BufferError:
                pass  # numpy views still point into it; it is unmapped when they go
            self._mm = None
        if self._file is not None:
            self._file.close()
            self._file = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
