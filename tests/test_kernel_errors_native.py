"""A kernel with a validation error (a binding of the wrong size, usage or type, a binding
missing, another kernel's bind group, a pipeline beyond the adapter's limits), dispatched
through pywebgpu.gpu on wgpu-native: a GPUError naming the kernel and the reason, from
the call that caused it, and the device still runs a correct kernel afterwards."""

import asyncio

import pytest

from kernel_error_programs import CASES, error_case

pytestmark = pytest.mark.native

# What each message must say, besides the kernel's label: the reason, in the words of
# wgpu-native's validation.
EXPECTED = {
    "binding_too_small": ("GPUError", "fill_vec4", "less than minimum 64"),
    "binding_without_storage_usage": ("GPUError", "double", "STORAGE"),
    "storage_for_a_uniform": ("GPUError", "scale", "UNIFORM"),
    "missing_binding": ("GPUError", "scale", "number of bindings"),
    "bind_group_of_another_kernel": ("GPUError", "double", "not compatible"),
    "pipeline_too_wide": ("ShaderError", "too_wide", "workgroup size"),
}
# DOUBLE over four 1.0s.
AFTER = b"\x00\x00\x00\x40" * 4


@pytest.mark.parametrize("name", CASES)
def test_kernel_validation_error_names_the_kernel(name):
    outcome = asyncio.run(error_case(name))
    kind, label, reason = EXPECTED[name]
    assert outcome["type"] == kind, outcome
    assert f"kernel {label!r}" in outcome["message"], outcome["message"]
    assert reason.lower() in outcome["message"].lower(), outcome["message"]
    assert outcome["after"] == AFTER
