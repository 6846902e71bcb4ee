"""A kernel with a validation error, dispatched through pywebgpu.gpu in the page (Pyodide,
WebGPU on SwiftShader): the same cases as natively (tests/kernel_error_programs.py), each
a GPUError naming the kernel and the reason by the readback of its submission, never a
hang or a silent result, and a correct kernel runs afterwards on the same device."""

from pathlib import Path

import pytest

import kernel_error_programs
from kernel_error_programs import CASES

# How each message names the kernel, and what it must say of the reason (in the words of
# Chromium's WebGPU, Dawn): a refused bind group comes named by pywebgpu, a dispatch
# refused at submit by Dawn's own message, which names the pipeline by its label.
EXPECTED = {
    "binding_too_small": ("GPUError", "kernel 'fill_vec4'", "smaller than the minimum binding size (64)"),
    "binding_without_storage_usage": ("GPUError", "kernel 'double'", "expected usage (BufferUsage::Storage)"),
    "storage_for_a_uniform": ("GPUError", "kernel 'scale'", "expected usage (BufferUsage::Uniform)"),
    "missing_binding": ("GPUError", "kernel 'scale'", "number of entries"),
    "bind_group_of_another_kernel": ("GPUError", '[ComputePipeline "double"]', "not compatible"),
    "pipeline_too_wide": ("ShaderError", "kernel 'too_wide'", "exceeds the maximum allowed"),
}
# DOUBLE over four 1.0s.
AFTER = b"\x00\x00\x00\x40" * 4
# A case waits for its readback at most this long: a hang fails here, not at the suite's timeout.
CASE_TIMEOUT_MS = 30_000


@pytest.mark.parametrize("name", CASES)
def test_kernel_validation_error_names_the_kernel(python_page, name):
    python_page.load_module("kernel_error_programs", Path(kernel_error_programs.__file__).read_text())
    python_page.page.set_default_timeout(CASE_TIMEOUT_MS)
    outcome = python_page.call("kernel_error_programs", "error_case", name)
    kind, named, reason = EXPECTED[name]
    assert outcome["type"] == kind, outcome
    assert named in outcome["message"], outcome["message"]
    assert reason.lower() in outcome["message"].lower(), outcome["message"]
    assert outcome["after"] == AFTER
