"""Every op case (tests/op_cases/) in headless Chromium on WebGPU against PyTorch, on a
device with WebGPU's default limits only (the cases' kernels and buffers do not depend on
the limits; Dawn checks workgroup memory and invocations against them). All cases run in
one page visit (few page loads keep CI fast); each is then checked alone."""

from pathlib import Path

import pytest

import graph_programs
from op_harness import all_cases, check_case, encode_inputs, export_case
from pywebgpu.gpu import DEFAULT_LIMITS

CASES = all_cases()


@pytest.fixture(scope="module")
def browser_results(_python_page):
    load_graph_programs(_python_page)
    assert _python_page.call("graph_programs", "use_device", "default") == DEFAULT_LIMITS
    try:
        return run_cases(_python_page)
    finally:
        _python_page.call("graph_programs", "use_device")


def load_graph_programs(page):
    page.load_module("graph_programs", Path(graph_programs.__file__).read_text())


def run_cases(page, cases=CASES, prefix=""):
    """Each of `cases`' answers (graph_programs.run_graph's, or its error) from `page` (a
    PythonPage with the test server, its problem list and graph_programs loaded), by case
    id; their exports are served as /files/<prefix><id>.pte."""
    files = page.server.files_dir
    jobs = []
    for case in cases:
        (files / f"{prefix}{case.id}.pte").write_bytes(export_case(case))
        jobs.append([f"/files/{prefix}{case.id}.pte", [encode_inputs(inputs) for inputs in case.runs], case.kernel_set, list(case.hidden_features), case.batched, case.upgrade_before_run])
    answers = page.call("graph_programs", "run_graphs_from_urls", jobs)
    problems = page.problems.take()
    assert not problems, "\n".join(problems)
    return dict(zip((c.id for c in cases), answers))


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_op(case, browser_results):
    answer = browser_results[case.id]
    assert "error" not in answer, answer.get("error")
    check_case(case, answer)
