"""GPU time of one submit, from timestamp queries."""

from __future__ import annotations

import struct

from .buffers import Buffer


class GPUTimer:
    """GPU time of one submit, from timestamp queries: the beginning of its first compute
    pass to the end of its last (copies between passes included, the queue's wait before
    the first not). Browsers may round timestamps (Chromium does by default)."""

    def __init__(self, device, query_set, resolved: Buffer):
        self.device = device
        self.query_set = query_set
        self.resolved = resolved  # the two timestamps (ns, u64) of the last timed submit
        self.backend_form = None  # the browser's JS [querySet, buffer] pair

    async def read_seconds(self) -> float:
        """GPU seconds of the last submit made with this timer (waits for it)."""
        begin, end = struct.unpack("<QQ", bytes(await self.device.read_buffer(self.resolved)))
        return max(0, end - begin) / 1e9
