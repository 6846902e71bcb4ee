"""Where things lie in a `.pte` file: the extended header, segments, named data and
delegate blobs, as absolute byte ranges checked against the file."""

from __future__ import annotations

import struct
from dataclasses import dataclass

from ._generated.executorch_flatbuffer.DataLocation import DataLocation as _FbDataLocation
from .errors import PteError
from .flatbuffer import Flatbuffer
from .source import ByteSource, read_range
from .types import ConstantRef

PROGRAM_IDENTIFIER = b"ET12"
_EXTENDED_HEADER_OFFSET = 8
_EXTENDED_HEADER_MAGIC = b"eh00"
# Header lengths ExecuTorch has written: 24 before segment_data_size existed, then 32.
_EXTENDED_HEADER_LENGTHS = (24, 32)


@dataclass(frozen=True)
class FileLayout:
    """How the file splits into the Program flatbuffer and the segment area."""

    program_size: int
    # Absolute offset and size of the segment area. A file without segment data
    # (no extended header, or a zero segment base) can still list empty segments.
    segment_base: int
    segment_area_size: int


def read_file_layout(source: ByteSource) -> FileLayout:
    """Checks the file identifier and reads the extended header, if there is one."""
    file_size = source.size
    if file_size < 8:
        raise PteError(f"file of {file_size} bytes is too short for a .pte program")
    head = read_range(source, 0, min(file_size, _EXTENDED_HEADER_OFFSET + 32), "file header")
    if head[4:8] != PROGRAM_IDENTIFIER:
        raise PteError(
            f"file identifier at byte 4: expected {PROGRAM_IDENTIFIER!r}, found {head[4:8]!r}"
        )
    magic = head[_EXTENDED_HEADER_OFFSET : _EXTENDED_HEADER_OFFSET + 4]
    if magic != _EXTENDED_HEADER_MAGIC:
        # Programs without segment data may omit the header: the flatbuffer is the file.
        return FileLayout(program_size=file_size, segment_base=file_size, segment_area_size=0)
    if len(head) < _EXTENDED_HEADER_OFFSET + 8:
        raise PteError(f"extended header at byte 8: truncated (file of {file_size} bytes)")
    (header_length,) = struct.unpack_from("<I", head, _EXTENDED_HEADER_OFFSET + 4)
    if header_length not in _EXTENDED_HEADER_LENGTHS:
        raise PteError(f"extended header at byte 8: unknown header length {header_length}")
    header_end = _EXTENDED_HEADER_OFFSET + header_length
    if len(head) < header_end:
        raise PteError(f"extended header at byte 8: truncated (file of {file_size} bytes)")
    program_size, segment_base = struct.unpack_from("<QQ", head, _EXTENDED_HEADER_OFFSET + 8)
    if not header_end <= program_size <= file_size:
        raise PteError(
            f"extended header at byte 8: program size {program_size} is outside "
            f"{header_end}..{file_size} (file size)"
        )
    if segment_base == 0:
        return FileLayout(program_size, segment_base=program_size, segment_area_size=0)
    if not program_size <= segment_base <= file_size:
        raise PteError(
            f"extended header at byte 8: segment base offset {segment_base} is outside "
            f"{program_size} (program end)..{file_size} (file size)"
        )
    if header_length == 24:
        segment_area_size = file_size - segment_base
    else:
        (segment_area_size,) = struct.unpack_from("<Q", head, _EXTENDED_HEADER_OFFSET + 24)
        if segment_base + segment_area_size > file_size:
            raise PteError(
                f"extended header at byte 8: segment data of {segment_area_size} bytes at "
                f"{segment_base} runs past the end of the {file_size} byte file"
            )
    return FileLayout(program_size, segment_base, segment_area_size)


def read_segments(fb: Flatbuffer, program, layout: FileLayout) -> list[tuple[int, int]]:
    """Absolute (offset, size) of every segment, checked against the segment area."""
    segments = []
    count = fb.vector(program.SegmentsLength, program.Segments, "segments")
    for index in range(count):
        what = f"segment {index}"
        with fb.reading(what):
            segment = fb.table(program.Segments(index), what)
            offset, size = segment.Offset(), segment.Size()
        if offset + size > layout.segment_area_size:
            raise fb.error(
                what,
                f"{size} bytes at segment offset {offset} run past the "
                f"{layout.segment_area_size} byte segment area",
            )
        segments.append((layout.segment_base + offset, size))
    return segments


def read_named_data(fb: Flatbuffer, program, segments) -> dict[str, ConstantRef]:
    """The program's named data (constants shared by key) as byte ranges of the file."""
    named_data: dict[str, ConstantRef] = {}
    count = fb.vector(program.NamedDataLength, program.NamedData, "named_data")
    for index in range(count):
        what = f"named_data {index}"
        with fb.reading(what):
            entry = fb.table(program.NamedData(index), what)
            key = fb.required_string(entry.Key, f"{what} key")
            segment_index = entry.SegmentIndex()
        if segment_index >= len(segments):
            raise fb.error(
                f"{what} ({key!r})",
                f"segment index {segment_index} is out of range ({len(segments)} segments)",
            )
        if key in named_data:
            raise fb.error(what, f"duplicate key {key!r}")
        offset, size = segments[segment_index]
        named_data[key] = ConstantRef(offset, size, key)
    return named_data


class DelegateBlobs:
    """Resolves a BackendDelegateDataReference to the blob's absolute byte range."""

    def __init__(self, fb: Flatbuffer, program, segments) -> None:
        self._fb = fb
        self._program = program
        self._segments = segments
        self._inline_count = fb.vector(
            program.BackendDelegateDataLength,
            program.BackendDelegateData,
            "backend_delegate_data",
        )

    def span(self, reference, what: str) -> tuple[int, int]:
        fb = self._fb
        with fb.reading(what):
            fb.table(reference, what)
            location, index = reference.Location(), reference.Index()
        if location == _FbDataLocation.SEGMENT:
            if index >= len(self._segments):
                raise fb.error(
                    what, f"segment index {index} is out of range ({len(self._segments)} segments)"
                )
            return self._segments[index]
        if location == _FbDataLocation.INLINE:
            if index >= self._inline_count:
                raise fb.error(
                    what,
                    f"backend_delegate_data index {index} is out of range "
                    f"({self._inline_count} entries)",
                )
            with fb.reading(f"backend_delegate_data {index}"):
                inline = fb.table(
                    self._program.BackendDelegateData(index), f"backend_delegate_data {index}"
                )
                size = fb.vector(inline.DataLength, inline.Data, "data")
                # The generated class exposes the bytes only one by one (or through
                # numpy); take the vector's position from its table field instead.
                data_field = inline._tab.Offset(4)
                offset = inline._tab.Vector(data_field) if data_field else 0
            return (fb.file_offset + offset, size)
        raise fb.error(what, f"unknown data location {location}")
