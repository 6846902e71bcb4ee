"""The top k logits of a row, chosen on the GPU (kernels: wgsl/topk/), so a generated
token costs a readback of k (value, index) pairs instead of the whole vocabulary; and,
for sampled decoding, a token drawn from them on the GPU (`Draw`), so that the next step
can take it there before the host has read it.

Not a graph op: it runs after a graph's logits output.
"""

from __future__ import annotations

import array
import math
import struct
from dataclasses import dataclass

from ..gpu import STORAGE_USAGE, UNIFORM_USAGE, Buffer, Device, GPUError, linear_grid
from ..kernels import load_wgsl

K_MAX = 64
PENALIZED_MAX = 256  # tokens in a repetition penalty's window (a multiple of 64)
HISTORY_RING = 2 * PENALIZED_MAX
# Logits per first-pass workgroup: enough workgroups to fill a GPU, few enough candidates
# (n / CHUNK * k) for the single merging workgroup.
CHUNK = 2048
# The kernels for CPU adapters (no barriers): chunk_top_k_lanes, an invocation per
# LANE_CHUNK logits, then merge_top_k_lanes in levels, an invocation per `group` lists of
# k candidates, LANE_THREADS invocations per workgroup. For k >= LANE_BOUND_MIN_K,
# chunk_max_lanes and lane_threshold first find a bound no top-k logit lies below, at
# which each chunk's scans stop (for fewer picks the scans saved cost less than the two
# dispatches). Each invocation's loop runs at most LANE_LOOP_ITERATIONS times
# (k * LANE_CHUNK, k * k * group): llvmpipe stops a loop after 65,535.
LANE_CHUNK = 512
LANE_THREADS = 4  # the kernels' LANE_THREADS
LANE_LOOP_ITERATIONS = 32768
LANE_BOUND_MIN_K = 4


@dataclass(frozen=True)
class Draw:
    """A token to draw from the top k on the GPU (the sample_pick kernel): softmax at
    `temperature` over the k, cut to the top_p nucleus, at the uniform `u` in [0, 1)."""

    temperature: float
    top_p: float
    u: float

    def __post_init__(self):
        if not (self.temperature > 0 and math.isfinite(self.temperature)):
            raise GPUError(f"top-k draw: temperature must be positive and finite, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise GPUError(f"top-k draw: top_p must be in (0, 1], got {self.top_p}")
        if not 0 <= self.u < 1:
            raise GPUError(f"top-k draw: u must be in [0, 1), got {self.u}")


def lane_levels(chunks: int, k: int) -> list[tuple[int, int]]:
    """The merge levels of the kernels for CPU adapters: (lists, group) each, from the
    chunks' lists down to one."""
    group = max(2, LANE_LOOP_ITERATIONS // (k * k))
    levels = [(chunks, group)]
    while levels[-1][0] > group:
        levels.append((-(-levels[-1][0] // group), group))
    return levels


class TopK:
    def __init__(self, device: Device, logits: Buffer, max_n: int, kernel_set: str = "gpu"):
        """`kernel_set`: "gpu" or "cpu", the graph's set of kernels: which top-k kernels run."""
        self.device = device
        self.logits = logits
        self.max_n = max_n
        self.lanes = kernel_set == "cpu"
        self.chunk = LANE_CHUNK if self.lanes else CHUNK  # logits per first-pass chunk
        groups = -(-max_n // self.chunk)
        self.candidates = device.create_buffer(8 * groups * K_MAX, STORAGE_USAGE, "top_k.candidates")
        # The k picks, then at K_MAX the drawn one (sample_pick's).
        self.result = device.create_buffer(8 * (K_MAX + 1), STORAGE_USAGE, "top_k.result")
        self.params = device.create_buffer(32, UNIFORM_USAGE, "top_k.params")
        self.draw_params = device.create_buffer(16, UNIFORM_USAGE, "top_k.draw")
        if self.lanes:
            # Merge levels read and write candidates and `merged` in turn, the last `result`.
            self.merged = device.create_buffer(8 * groups * K_MAX, STORAGE_USAGE, "top_k.merged")
            self.chunk_maxima = device.create_buffer(4 * (groups + 1), STORAGE_USAGE, "top_k.chunk_maxima")  # then the bound
            most_levels = len(lane_levels(groups, K_MAX))
            self.level_params = [device.create_buffer(16, UNIFORM_USAGE, f"top_k.level{i}") for i in range(most_levels)]
            self._level_groups = {}  # (level, last) -> bind group
        # The penalty's window of tokens fed: a ring of HISTORY_RING ids, then their count.
        self.history = device.create_buffer(4 * (HISTORY_RING + 1), STORAGE_USAGE, "top_k.history")
        self._window = False  # whether the last run appended its token to a penalty's window
        self._last_params = None
        self._recorder = None
        self._recorded_passes = None
        self._feed = None
        self._drew = False  # whether the last prepared run draws a token (its pick to feed)

    async def build(self):
        device = self.device

        async def pipeline(kernel, label, entry_point, constants=None):
            return await device.compute_pipeline(load_wgsl(f"topk/{kernel}"), f"top_k.{label}", entry_point, constants)

        if self.lanes:
            self.chunk_pass = await pipeline("lane_chunk_merge", "chunk", "chunk_top_k_lanes")
            self.merge_pass = await pipeline("lane_chunk_merge", "merge", "merge_top_k_lanes")
        else:
            self.chunk_pass = await pipeline("chunk_merge", "chunk", "chunk_top_k")
            self.merge_pass = await pipeline("chunk_merge", "merge", "merge_top_k")
        window = {"K_MAX": K_MAX, "RING": HISTORY_RING, "WINDOW": PENALIZED_MAX}
        self.penalty_pass = await pipeline("penalty", "penalty", "apply_penalty", window)
        self.append_pass = await pipeline("penalty", "append", "append_pick", window)
        self.sample_pass = await pipeline("sample", "sample", "sample_pick", {"K_MAX": K_MAX})
        bind = device.bind_group
        if self.lanes:
            self.max_pass = await pipeline("lane_bound", "chunk_max", "chunk_max_lanes")
            self.threshold_pass = await pipeline("lane_bound", "threshold", "lane_threshold")
            self.max_group = bind(self.max_pass, {0: self.logits, 2: self.params, 9: self.chunk_maxima})
            self.threshold_group = bind(self.threshold_pass, {2: self.params, 9: self.chunk_maxima})
            self.chunk_group = bind(self.chunk_pass, {0: self.logits, 1: self.candidates, 2: self.params, 9: self.chunk_maxima})
        else:
            self.chunk_group = bind(self.chunk_pass, {0: self.logits, 1: self.candidates, 2: self.params})
            self.merge_group = bind(self.merge_pass, {1: self.candidates, 2: self.params, 3: self.result})
        self.penalty_group = bind(self.penalty_pass, {2: self.params, 4: self.logits, 5: self.history})
        self.append_group = bind(self.append_pass, {2: self.params, 3: self.result, 5: self.history})
        self.sample_group = bind(self.sample_pass, {2: self.params, 3: self.result, 8: self.draw_params})

    def prepare(self, n: int, k: int, penalty: float = 1.0, penalized_ids=(), draw: Draw | None = None, continue_window=False):
        """Write the parameters for the first `n` logits and return the recorder of the
        passes to submit after the logits' producer (the same one while the passes are).
        With a `draw`, the passes end by drawing a token from the k picks.

        A `penalty` other than 1 applies to the distinct tokens of a window, the last
        PENALIZED_MAX tokens fed: `penalized_ids` (oldest first), or with
        `continue_window` the last run's window and its token (top 1 or drawn), which the
        run appended on the GPU (a step fed that token on the GPU). Such a run appends its
        own token in turn."""
        if not 1 <= k <= K_MAX:
            raise GPUError(f"top-k: k must be between 1 and {K_MAX}, got {k}")
        if not 1 <= n <= self.max_n:
            raise GPUError(f"top-k: {n} logits, but this reducer was built for at most {self.max_n}")
        if penalty <= 0:
            raise GPUError(f"top-k: repetition penalty must be positive, got {penalty}")
        penalized = penalty != 1.0
        if penalized and continue_window:
            if not self._window:
                raise GPUError("top-k: no window of penalized tokens to continue (the last run had no penalty)")
            if penalized_ids:
                raise GPUError("top-k: a continued window takes no penalized ids")
        elif penalized:
            ids = list(penalized_ids)[-PENALIZED_MAX:]
            if ids:
                self.device.write_buffer(self.history, array.array("I", ids))
            self.device.write_buffer(self.history, struct.pack("<I", len(ids)), buffer_offset=4 * HISTORY_RING)
        self._window = penalized
        bounded = self.lanes and k >= LANE_BOUND_MIN_K
        params = struct.pack("<IIIIfI8x", n, k, self.chunk, draw is not None, penalty, bounded)
        if params != self._last_params:
            self.device.write_buffer(self.params, params)
            self._last_params = params
        if draw is not None:
            self.device.write_buffer(self.draw_params, struct.pack("<3f4x", draw.temperature, draw.top_p, draw.u))
        self._drew = draw is not None
        passes = (n, k, penalized, self._drew)  # what the passes' grids follow from
        if passes != self._recorded_passes:
            chunks = -(-n // self.chunk)
            levels = lane_levels(chunks, k) if self.lanes else []
            grid = linear_grid(chunks, LANE_THREADS) if self.lanes else (chunks, 1)
            self._recorder = self.device.record()
            if penalized:
                self._recorder.dispatch(self.penalty_pass, self.penalty_group, PENALIZED_MAX // 64)
            if bounded:
                self._recorder.dispatch(self.max_pass, self.max_group, *grid)
                self._recorder.dispatch(self.threshold_pass, self.threshold_group, 1)
            self._recorder.dispatch(self.chunk_pass, self.chunk_group, *grid)
            if self.lanes:
                self._record_lane_levels(levels)
            else:
                self._recorder.dispatch(self.merge_pass, self.merge_group, 1)
            if self._drew:
                self._recorder.dispatch(self.sample_pass, self.sample_group, 1)
            if penalized:
                self._recorder.dispatch(self.append_pass, self.append_group, 1)
            self._recorded_passes = passes
        return self._recorder

    def _record_lane_levels(self, levels):
        for i, (lists, group) in enumerate(levels):
            self.device.write_buffer(self.level_params[i], struct.pack("<II8x", lists, group))
            last = i == len(levels) - 1
            bind_group = self._level_groups.get((i, last))
            if bind_group is None:
                source, target = (self.candidates, self.merged) if i % 2 == 0 else (self.merged, self.candidates)
                buffers = {1: source, 2: self.params, 6: self.level_params[i], 7: self.result if last else target}
                bind_group = self._level_groups[i, last] = self.device.bind_group(self.merge_pass, buffers)
            self._recorder.dispatch(self.merge_pass, bind_group, *linear_grid(-(-lists // group), LANE_THREADS))

    def feed_pick(self, destination: Buffer):
        """A recorder that copies the last prepared run's token id (u32) — its top 1, or
        the one it drew — into the first word of `destination` (a graph's token input),
        for a next step the host does not wait for."""
        offset = 8 * K_MAX + 4 if self._drew else 4  # (value, id) pairs: the id's word
        if self._feed is None or self._feed.commands[0][3] is not destination or self._feed.commands[0][2] != offset:
            self._feed = self.device.record()
            self._feed.copy(self.result, destination, 4, src_offset=offset)
        return self._feed

    def result_bytes(self, k: int, drawn: bool = False) -> tuple:
        """(buffer, offset, size) of the k picks, or of the drawn one, for Device.submit's
        `read`."""
        return (self.result, 8 * K_MAX, 8) if drawn else (self.result, 0, 8 * k)

    @staticmethod
    async def picks(pending, k: int) -> list[tuple[float, int]]:
        """(logit, token id) pairs, largest first, from the awaitable of result_bytes(k)."""
        words = array.array("I")
        words.frombytes(bytes(await pending))
        values = array.array("f")
        values.frombytes(words[0::2].tobytes())
        return [(values[i], words[2 * i + 1]) for i in range(k) if words[2 * i + 1] != 0xFFFFFFFF]
