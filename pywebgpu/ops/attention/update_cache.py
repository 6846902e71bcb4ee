"""update_cache alone: a buffer copy of this call's rows into a KV cache."""

from __future__ import annotations

from ..registry import OpHandler, register


@register("update_cache.default")
class UpdateCache(OpHandler):
    """Args: value [1, S, heads, head_dim], cache [1, context, heads, head_dim],
    input_pos (SymInt), out. `out` is a placeholder the exporter may plan into memory
    that other tensors use: it is never written."""

    RESIZED = ("offset", "size")

    def __init__(self, graph, index, name, args):
        super().__init__(graph, index, name, args)
        if len(args) != 4:
            self.fail(f"expected 4 arguments (value, cache, input_pos, out), got {len(args)}")
        self.src, self.cache = self.tensor(0), self.tensor(1)
        self.int_arg(2)
        sizes = self.cache.max_sizes
        if len(sizes) != 4 or sizes[0] != 1 or len(self.src.max_sizes) != 4 or self.src.max_sizes[2:] != sizes[2:]:
            self.fail(f"value {list(self.src.max_sizes)} does not fit cache rows {list(sizes)}")
        if self.src.dtype != "float32" or self.cache.dtype != "float32":
            self.fail(f"value is {self.src.dtype} and the cache {self.cache.dtype}; only float32 is supported")
        self.row_bytes = sizes[2] * sizes[3] * self.cache.itemsize

    def resize(self):
        seq_len = self.src.sizes[1]
        position = self.int_arg(2)
        if position < 0 or position + seq_len > self.cache.max_sizes[1]:
            self.fail(f"positions [{position}, {position + seq_len}) exceed the cache's {self.cache.max_sizes[1]}")
        self.offset = position * self.row_bytes
        self.size = seq_len * self.row_bytes

    def record(self, recorder):
        if self.size:
            recorder.copy(self.src.buffer, self.cache.buffer, self.size, dst_offset=self.offset)
