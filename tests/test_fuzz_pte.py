"""A seeded slice of devtools/fuzz_pte.py's fuzzer: mutants of the suite's exports
either parse or raise PteError, and those that parse either build on the native GPU
device or raise PteError, OpError or GPUError; no other exception, hang or crash."""

import pytest

from devtools.fuzz_pte import CORPUS, fuzz
from pte_fixtures import pte_exports  # noqa: F401  (the fixture)

pytestmark = pytest.mark.native

# Its own seed, so that CI tries inputs the long run (docs/reliability.md) did not.
SLICE_SEED = 49
SLICE_INPUTS = 3000
SLICE_LOADS = 300


def test_fuzzed_pte_inputs_fail_only_with_typed_errors(pte_exports):
    for name in CORPUS:  # exported once here, not by each worker
        pte_exports.path(name)
    parse_report, load_report = fuzz(SLICE_INPUTS, SLICE_LOADS, SLICE_SEED)
    assert parse_report.inputs == SLICE_INPUTS
    assert parse_report.defects == []
    assert set(parse_report.outcomes) == {"parsed", "PteError"}
    assert load_report.inputs == SLICE_LOADS
    assert load_report.defects == []
    assert set(load_report.outcomes) <= {"built", "PteError", "OpError", "GPUError"}
