"""The next-token candidates of a language model's graph: the k largest logits of its first
output, picked on the GPU (ops.topk.TopK) so that only they are read back."""

from __future__ import annotations

from ..gpu import GPUError
from ..ops.topk import TopK
from ..values import numel


class LogitsTopK:
    """A graph run followed by its top k (or a token drawn from them), in one submission."""

    def __init__(self, graph):
        self.graph = graph
        self.reducer: TopK | None = None  # made by build()

    async def build(self):
        """Make the top-k reducer over the graph's first output (once; execute does it)."""
        if self.reducer is None:
            logits = self.graph.outputs[0]
            reducer = TopK(self.graph.device, logits.buffer, numel(logits.max_sizes), self.graph.kernel_set)
            await reducer.build()
            self.reducer = reducer

    async def execute(self, *inputs, k: int = 1, penalty: float = 1.0, penalized_ids=()) -> list[tuple[float, int]]:
        """Run the graph and return the k largest values of its first output (a logits
        row) as (value, index) pairs, largest first, reading back only those. Logits of
        `penalized_ids` are first divided (if positive) or multiplied by `penalty`."""
        await self.build()
        return await self.submit(*inputs, k=k, penalty=penalty, penalized_ids=penalized_ids)

    def submit(self, *inputs, k: int = 1, penalty: float = 1.0, penalized_ids=(), token_from_last_run=False, draw=None):
        """execute's work submitted now; returns an awaitable of its result, so that a next
        run can be submitted before the host waits for this one.

        With a `draw` (ops.topk.Draw), the result is instead the one (value, index) pair
        drawn from the top k on the GPU (sampled decoding). With `token_from_last_run`,
        the first element of input 0 (a [1, 1] token input) is the last run's top-1 index,
        or the one it drew, copied on the GPU: the value given for it is only a
        placeholder; a `penalty` then applies to the last run's penalized tokens and that
        one (TopK.prepare's continued window)."""
        reducer, graph = self.reducer, self.graph
        if reducer is None:
            raise GPUError("build() the top-k before submitting runs to it")
        if token_from_last_run and graph.input_read_on_host(0):
            raise GPUError("the last run's token cannot be fed on the GPU: an op reads the token input on the host")
        schedule = graph.record_run(inputs, (0,) if token_from_last_run else ())
        logits, tokens = graph.outputs[0], graph.inputs[0]
        first = []
        if token_from_last_run:
            if tokens is None or tokens.sizes != (1, 1):
                raise GPUError("feeding the last run's token needs a [1, 1] token input")
            first = [reducer.feed_pick(tokens.buffer)]
        picks = graph.device.submit(
            *first,
            schedule,
            reducer.prepare(logits.numel, k, penalty, penalized_ids, draw, continue_window=token_from_last_run),
            read=reducer.result_bytes(k, drawn=draw is not None),
        )
        return reducer.picks(picks, 1 if draw is not None else k)
