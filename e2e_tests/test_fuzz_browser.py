"""The .pte fuzzer's mutants (devtools/fuzz_pte.py) in Chromium: each read from a JS
ArrayBuffer through JsArrayBufferSource, those that parse loaded on the page's WebGPU
device. The reader must decide each as it does natively from bytes (a PteError naming the
same thing at the same place), and load may fail only with PteError, OpError or GPUError."""

import json

from devtools.fuzz_pte import corpus, mutant, parse, regions
from pte_fixtures import pte_exports  # noqa: F401  (the fixture)

BROWSER_SEED = 4949
BROWSER_INPUTS = 300

# Runs every span of /files/fuzz.bin (one mutant each, in fuzz.json) through the reader
# and, where it parses, load; one [outcome, message] per mutant.
PAGE_FUZZ = """
import js, json
from pywebgpu import pte
from pywebgpu.gpu import GPUError, request_device
from pywebgpu.ops.registry import OpError
from pywebgpu.runtime import JsArrayBufferSource, load

whole = await (await js.fetch("/files/fuzz.bin")).arrayBuffer()
spans = json.loads(await (await js.fetch("/files/fuzz.json")).text())
device = await request_device()
outcomes = []
for start, end in spans:
    data = whole.slice(start, end)
    try:
        program = pte.load_program(JsArrayBufferSource(data))
        program.method("forward")
        program.vulkan_graph("forward")
    except pte.PteError as error:
        outcomes.append(["PteError", str(error)])
        continue
    except Exception as error:
        outcomes.append(["defect", f"reader: {type(error).__name__}: {error}"])
        continue
    try:
        await load(device, data)
        await device.synchronize()
        outcomes.append(["built", ""])
    except (pte.PteError, OpError, GPUError) as error:
        kind = next(k for k in (pte.PteError, OpError, GPUError) if isinstance(error, k))
        outcomes.append([kind.__name__, str(error)])
    except Exception as error:
        outcomes.append(["defect", f"load: {type(error).__name__}: {error}"])
json.dumps(outcomes)
"""


def _what_and_where(message: str) -> str:
    """A PteError's message without the low-level exception it may quote, whose text
    differs on 32-bit Pyodide (flatbuffer.py's `reading`)."""
    return message.split(": malformed flatbuffer (")[0]


def _native_reader_message(data: bytes) -> str:
    from pywebgpu.pte import PteError, load_program

    try:
        program = load_program(data)
        program.method("forward")
        program.vulkan_graph("forward")
    except PteError as error:
        return str(error)
    return ""


def test_fuzzed_pte_array_buffers_fail_only_with_typed_errors(python_page, pte_exports):
    files = corpus()
    spans = [regions(data) for _, data in files]
    mutants = [mutant(files, spans, BROWSER_SEED, index)[1] for index in range(BROWSER_INPUTS)]
    offsets, position = [], 0
    for data in mutants:
        offsets.append([position, position + len(data)])
        position += len(data)
    (python_page.server.files_dir / "fuzz.bin").write_bytes(b"".join(mutants))
    (python_page.server.files_dir / "fuzz.json").write_text(json.dumps(offsets))

    outcomes = json.loads(python_page.run(PAGE_FUZZ))

    assert len(outcomes) == BROWSER_INPUTS
    assert [o for o in outcomes if o[0] == "defect"] == []
    for data, (outcome, message) in zip(mutants, outcomes):
        native = parse(data)
        assert (native == "PteError") == (outcome == "PteError"), message
        if native == "PteError":
            assert _what_and_where(message) == _what_and_where(_native_reader_message(data))
    kinds = {outcome for outcome, _ in outcomes}
    assert "PteError" in kinds and "built" in kinds
    assert kinds <= {"built", "PteError", "OpError", "GPUError"}
