"""Tables split by row blocks where one storage binding cannot hold them whole.

A table (an embedding's weights and scales, a linear's by outputs) larger than the device's
`maxStorageBufferBindingSize` or `maxBufferSize` is stored as several buffers of whole
rows, one block of rows each, and its op dispatches once per block; where the device has
room the table stays one buffer, uploaded by the graph as every constant is.
"""

from __future__ import annotations

from ..gpu import STORAGE_USAGE


def binding_bytes(device) -> int:
    """The most bytes one storage binding, and the buffer behind it, holds on `device`, in
    whole vec4s (constants upload as whole vec4s)."""
    limits = device.limits
    return min(limits["maxStorageBufferBindingSize"], limits["maxBufferSize"]) & ~15


def row_blocks(rows: int, row_bytes, device, multiple: int = 1) -> list[tuple[int, int]]:
    """(first row, rows) of each block of tables of `rows` rows (of `row_bytes[i]` bytes in
    table i) such that every table's block fits one binding, each block but the last a
    multiple of `multiple` rows; one block where all fit whole, or where not even
    `multiple` rows fit (the graph then refuses the table: runtime/fit.py)."""
    most = binding_bytes(device)
    per_block = min(most // size for size in row_bytes) // multiple * multiple
    if per_block == 0 or all(-(-rows * size // 16) * 16 <= most for size in row_bytes):
        return [(0, rows)]
    return [(first, min(per_block, rows - first)) for first in range(0, rows, per_block)]


def store_row_blocks(op, tensor, blocks, row_bytes: int) -> list:
    """Buffers holding constant `tensor`'s rows (`row_bytes` each) block by block, written
    from the program's bytes (GraphRuntime.write_constant)."""
    buffers = []
    for first, rows in blocks:
        size = rows * row_bytes
        buffer = op.graph.device.create_buffer(
            -(-size // 16) * 16, STORAGE_USAGE, label=f"{tensor.label}.rows{first}-{first + rows - 1}"
        )
        op.graph.write_constant(buffer, tensor, [(0, first * row_bytes, size)])
        buffers.append(buffer)
    return buffers
