"""A seeded slice of devtools/fuzz_model_files.py: mutated manifests are refused with a
ModelFileError or hold what LanguageModel reads; mutated tokenizer.json files are refused
with a TokenizerError or encode and decode like Hugging Face `tokenizers`."""

import pytest

from devtools.fuzz_model_files import fuzz

# Its own seed, so that CI tries inputs the long run (docs/reliability.md) did not.
SLICE_SEED = 49
SLICE_INPUTS = 2000


@pytest.mark.parametrize("kind", ["manifest", "tokenizer"])
def test_fuzzed_model_files_are_refused_with_typed_errors_or_usable(kind, bundled_model):
    outcomes, defects = fuzz(kind, SLICE_INPUTS, SLICE_SEED, bundled_model)
    assert defects == []
    assert sum(outcomes.values()) == SLICE_INPUTS
    refused = "ModelFileError" if kind == "manifest" else "TokenizerError"
    assert outcomes.get(refused, 0) > 0 and outcomes.get("accepted", 0) > 0
