"""A graph's small uniform writes: buffers rewritten only when their bytes change (op
parameters, SymInt values), and the buffers holding Int and SymInt values for kernels
that read them on the GPU."""

from __future__ import annotations

import struct

from ..gpu import UNIFORM_USAGE, Device
from ..values import SymInt


def int_bytes(value: int) -> bytes:
    """An i32 in a 16-byte uniform."""
    return struct.pack("<i12x", value)


class Uniforms:
    def __init__(self, device: Device, value_keys: dict):
        self.device = device
        self.last_written: dict[int, bytes] = {}  # id(buffer) → bytes, of write_if_changed
        self._written_buffers: dict[int, object] = {}  # id(buffer) → buffer, the same ones
        self._value_keys = value_keys  # SymInt id → value_key() of the op making it
        self._keyed_int_buffers: dict = {}  # value key → the SymInts' shared buffer
        self._int_buffers: dict = {}  # value id → the buffer of a constant Int

    def write_if_changed(self, buffer, data: bytes):
        key = id(buffer)
        if self.last_written.get(key) != data:
            self.device.write_buffer(buffer, data)
            self.last_written[key] = data
            self._written_buffers[key] = buffer

    def restore(self, written: dict[int, bytes]):
        """Rewrite the buffers whose last bytes differ from `written` (a copy of last_written)."""
        last = self.last_written
        for key, data in written.items():
            if last[key] != data:
                self.device.write_buffer(self._written_buffers[key], data)
                last[key] = data

    def int_buffer(self, value_id: int, value):
        """The buffer of an Int or SymInt value (see GraphRuntime.int_on_gpu)."""
        if isinstance(value, SymInt):
            if value.buffer is None:
                key = self._value_keys.get(value_id)
                value.buffer = self._keyed_int_buffers.get(key) if key is not None else None
                if value.buffer is None:
                    value.buffer = self.device.create_buffer(16, UNIFORM_USAGE, label=f"symint{value_id}")
                    if key is not None:
                        self._keyed_int_buffers[key] = value.buffer
                self.write_if_changed(value.buffer, int_bytes(value.value))
            return value.buffer
        if value_id not in self._int_buffers:
            buffer = self.device.create_buffer(16, UNIFORM_USAGE, label=f"int{value_id}")
            self.device.write_buffer(buffer, int_bytes(value))
            self._int_buffers[value_id] = buffer
        return self._int_buffers[value_id]
