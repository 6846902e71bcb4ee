"""The exact GGUF exports' calls and eager logits, for running their `.pte`s on a GPU."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import torch

from gguf_exact_fixtures import exact_gguf_export
from test_export_tools import CONTINUATION, PROMPT


@dataclass
class ExactTrace:
    pte: bytes
    runs: list  # per call: [[shape, "int64", bytes] tokens, [shape, "int64", bytes] input_pos]
    logits: list  # the eager exact module's fp32 logits [1, vocab] per call


@cache
def exact_gguf_trace(tmp_dir: str, name: str) -> ExactTrace:
    """The prefill of PROMPT, then CONTINUATION one token a call, on `name`'s eager module."""
    result = exact_gguf_export(tmp_dir, name)[0]
    eager = result.eager
    eager.reset()
    calls = [(PROMPT, 0)] + [([token], len(PROMPT) + i) for i, token in enumerate(CONTINUATION)]
    runs, logits = [], []
    for tokens, position in calls:
        runs.append([[[1, len(tokens)], "int64", torch.tensor(tokens, dtype=torch.int64).numpy().tobytes()],
                     [[1], "int64", torch.tensor([position], dtype=torch.int64).numpy().tobytes()]])  # fmt: skip
        with torch.no_grad():
            logits.append(eager.forward(tokens, position).float().reshape(1, -1))
    return ExactTrace(result.pte_path.read_bytes(), runs, logits)


def check_exact_run(trace: ExactTrace, results) -> None:
    """Every call's logits from the GPU within 1e-4 of the eager exact module, same argmax."""
    assert len(results) == len(trace.logits)
    for step, (outputs, want) in enumerate(zip(results, trace.logits)):
        ((shape, data),) = outputs
        got = torch.frombuffer(bytearray(data), dtype=torch.float32).reshape(shape)
        torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4, msg=lambda m: f"step {step}: {m}")
        assert int(got.argmax()) == int(want.argmax()), f"step {step}: argmax differs"
