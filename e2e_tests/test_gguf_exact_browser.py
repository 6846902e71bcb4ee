"""The exact GGUF exports (tests/gguf_exact_fixtures.py) in headless Chromium: both kernel
sets' logits within 1e-4 of the eager exact module, token for token."""

from pathlib import Path

import pytest

import graph_programs
from gguf_exact_fixtures import MODELS
from gguf_exact_traces import check_exact_run, exact_gguf_trace


@pytest.mark.parametrize("model_name", sorted(MODELS))
def test_exact_gguf_pte_in_chromium(python_page, tmp_path_factory, model_name):
    trace = exact_gguf_trace(str(tmp_path_factory.getbasetemp()), model_name)
    file_name = f"exact_{model_name}.pte"
    (python_page.server.files_dir / file_name).write_bytes(trace.pte)
    python_page.load_module("graph_programs", Path(graph_programs.__file__).read_text())
    jobs = [[f"/files/{file_name}", trace.runs, kernel_set, [], False, None] for kernel_set in ("cpu", "gpu")]
    answers = python_page.call("graph_programs", "run_graphs_from_urls", jobs)
    for answer in answers:
        assert "error" not in answer, answer.get("error")
        check_exact_run(trace, answer["results"])
