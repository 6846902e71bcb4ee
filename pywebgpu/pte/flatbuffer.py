"""Flatbuffer access with the bounds checks the flatbuffers Python runtime lacks.

The runtime does no verification (it follows any offset, wraps negative positions
around to the end of the buffer and truncates out-of-range strings), so `Flatbuffer`
checks every table and vector the reader touches before trusting it, and turns every
low-level failure into a `PteError` naming what was being read.
"""

from __future__ import annotations

import struct
from contextlib import contextmanager
from typing import Callable, Iterator

from .errors import PteError

# ExecuTorch's kTensorDimensionLimit; also keeps a corrupt dims vector from making
# numel a product of thousands of factors.
MAX_TENSOR_DIMS = 16

# What the flatbuffers runtime raises on out-of-range reads: struct.error past the
# end of the buffer, TypeError for positions beyond 32 bits (enforce_number),
# IndexError from _CheckedBytes, UnicodeDecodeError (a ValueError) for bad strings.
_LOW_LEVEL_ERRORS = (struct.error, IndexError, TypeError, ValueError, OverflowError)


class _CheckedBytes(bytes):
    """bytes whose slices raise IndexError when they run past the end, where plain
    bytes would silently truncate (flatbuffers reads strings by slicing)."""

    def __getitem__(self, key):
        if isinstance(key, slice) and key.stop is not None and key.stop > len(self):
            raise IndexError(f"slice to byte {key.stop} runs past the {len(self)} byte buffer")
        return super().__getitem__(key)


class Flatbuffer:
    """A flatbuffer read through the generated classes, with the checks flatbuffers'
    Python runtime lacks. `file_offset` (where the buffer starts in the file) turns
    buffer positions into file offsets for error messages."""

    def __init__(self, data: bytes, file_offset: int, name: str) -> None:
        self.buf = _CheckedBytes(data)
        self.file_offset = file_offset
        self.name = name

    @contextmanager
    def reading(self, what: str) -> Iterator[None]:
        """Turns the runtime's low-level exceptions into PteError naming `what`."""
        try:
            yield
        except _LOW_LEVEL_ERRORS as exc:
            raise PteError(f"{self.name}: {what}: malformed flatbuffer ({exc})") from exc

    def error(self, what: str, problem: str) -> PteError:
        return PteError(f"{self.name}: {what}: {problem}")

    def root(self, table_class, identifier: bytes):
        if len(self.buf) < 8:
            raise self.error("header", f"{len(self.buf)} bytes is too short for a flatbuffer")
        if self.buf[4:8] != identifier:
            raise self.error(
                f"file identifier at byte {self.file_offset + 4}",
                f"expected {identifier!r}, found {bytes(self.buf[4:8])!r}",
            )
        with self.reading("root table offset"):
            root = table_class.GetRootAs(self.buf, 0)
        return self.table(root, "root table")

    def table(self, obj, what: str):
        """Checks that the table `obj` (a generated class instance) and its vtable
        lie inside the buffer, so every later field lookup reads inside it too."""
        size = len(self.buf)
        pos = obj._tab.Pos
        at = f"table at byte {self.file_offset + pos}"
        if pos + 4 > size:
            raise self.error(what, f"{at} lies outside the {size} byte flatbuffer")
        (vtable_distance,) = struct.unpack_from("<i", self.buf, pos)
        vtable = pos - vtable_distance
        if vtable < 0 or vtable + 4 > size:
            raise self.error(what, f"{at} has its vtable outside the flatbuffer")
        vtable_size, table_size = struct.unpack_from("<HH", self.buf, vtable)
        if vtable_size < 4 or vtable_size % 2 or vtable + vtable_size > size:
            raise self.error(what, f"{at} has a vtable of invalid size {vtable_size}")
        if table_size < 4 or pos + table_size > size:
            raise self.error(what, f"{at} has an invalid size {table_size}")
        field_offsets = struct.unpack_from(f"<{(vtable_size - 4) // 2}H", self.buf, vtable + 4)
        for field_index, field_offset in enumerate(field_offsets):
            if field_offset >= table_size:
                raise self.error(
                    what, f"{at}: field {field_index} at offset {field_offset} lies outside the table"
                )
        return obj

    def vector(self, length: Callable[[], int], element: Callable[[int], object], what: str) -> int:
        """The length of a vector field, given its generated `XLength` and `X(j)`
        accessors. Reading the last element proves the whole vector lies inside the
        buffer (positions only grow), so a corrupt length fails here instead of
        driving a huge loop."""
        with self.reading(what):
            count = length()
        if count:
            with self.reading(f"{what}[{count - 1}] (vector of {count})"):
                element(count - 1)
        return count

    def ints(self, length: Callable[[], int], element: Callable[[int], int], what: str) -> tuple:
        """The elements of a scalar vector field, given its `XLength` and `X(j)`."""
        count = self.vector(length, element, what)
        with self.reading(what):
            return tuple(element(j) for j in range(count))

    def value_ids(
        self, length: Callable[[], int], element: Callable[[int], int], what: str, value_count: int
    ) -> tuple[int, ...]:
        """A vector field of value ids, each checked to index one of `value_count` values."""
        ids = self.ints(length, element, what)
        for position, value_id in enumerate(ids):
            if not 0 <= value_id < value_count:
                raise self.error(
                    f"{what}[{position}]", f"value id {value_id} is out of range ({value_count} values)"
                )
        return ids

    def string(self, read: Callable[[], bytes | None], what: str) -> str | None:
        """A string field, given its generated accessor (None when absent)."""
        with self.reading(what):
            raw = read()
            return None if raw is None else raw.decode("utf-8")

    def required_string(self, read: Callable[[], bytes | None], what: str) -> str:
        text = self.string(read, what)
        if text is None:
            raise self.error(what, "missing")
        return text

    def union_table(self, kind_name: str, raw_table, table_class, what: str):
        """Wraps the flatbuffers Table of a union member in its generated class."""
        if raw_table is None:
            raise self.error(what, f"{kind_name} value has no table")
        obj = table_class()
        obj.Init(raw_table.Bytes, raw_table.Pos)
        return self.table(obj, f"{what} ({kind_name})")

    def enum(self, read: Callable[[], int], known: frozenset[int], what: str) -> int:
        """An enum field, given its generated accessor, checked to be one of `known`."""
        with self.reading(what):
            value = read()
        if value not in known:
            raise self.error(what, f"unknown value {value}")
        return value

    def tensor_dims(
        self, length: Callable[[], int], element: Callable[[int], int], field: str, what: str
    ) -> tuple[int, ...]:
        """The sizes vector `field` of tensor `what`, at most MAX_TENSOR_DIMS long."""
        dims = self.ints(length, element, field)
        if len(dims) > MAX_TENSOR_DIMS:
            raise self.error(what, f"{len(dims)} dims, more than ExecuTorch's limit of {MAX_TENSOR_DIMS}")
        return dims


def enum_names(enum_class) -> dict[int, str]:
    """Value -> name of a generated flatbuffers enum class."""
    return {value: name for name, value in vars(enum_class).items() if not name.startswith("_")}


def enum_values(enum_class) -> frozenset[int]:
    """The values of a generated flatbuffers enum class."""
    return frozenset(enum_names(enum_class))
