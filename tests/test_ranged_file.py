"""Programs loaded piece by piece (runtime.RangedFile) on wgpu-native: the same logits as
eager PyTorch from pieces of an odd size, and a damaged piece refused by
LanguageModel.load with the bytes it spans. (The 1B slice read by pieces, the host
holding pieces and not the file: test_default_limits.py.)"""

import asyncio
import json
import shutil
from pathlib import Path

import pytest

import graph_programs
from gguf_exact_traces import check_exact_run, exact_gguf_trace
from llama_fixtures import check_run, tiny_llama_trace
from pywebgpu.llm import LanguageModel, ModelFileError
from pywebgpu.runtime import RangedFile

pytestmark = pytest.mark.native

# Pieces of an odd size: writes then straddle pieces at every byte offset mod 4.
ODD_PIECE_BYTES = 4099


def ranged(data: bytes, piece_bytes: int) -> RangedFile:
    """`data` as a RangedFile."""

    async def read_piece(index: int) -> bytes:
        return data[index * piece_bytes : (index + 1) * piece_bytes]

    return RangedFile(len(data), read_piece, piece_bytes)


@pytest.mark.parametrize("kernel_set", ["cpu", "gpu"])
@pytest.mark.parametrize("float_dtype", ["float32", "float16"])
def test_tiny_llama_piece_by_piece(tmp_path_factory, kernel_set, float_dtype):
    trace = tiny_llama_trace(str(tmp_path_factory.getbasetemp()), float_dtype == "float16", kernel_set)
    answer = asyncio.run(graph_programs.run_graph(ranged(trace.pte, ODD_PIECE_BYTES), trace.runs, kernel_set))
    check_run(trace, kernel_set, answer)


@pytest.mark.parametrize("kernel_set", ["cpu", "gpu"])
def test_exact_gguf_piece_by_piece(tmp_path_factory, kernel_set):
    """Its Q4_1 linears' offsets are read on the host (kept ranges)."""
    trace = exact_gguf_trace(str(tmp_path_factory.getbasetemp()), "classic")
    answer = asyncio.run(graph_programs.run_graph(ranged(trace.pte, ODD_PIECE_BYTES), trace.runs, kernel_set))
    check_exact_run(trace, answer["results"])


def test_damaged_piece_refused_with_its_bytes(tiny_chat_manifest, tmp_path):
    """LanguageModel.load reads a .pte natively by its manifest's chunks, each checked."""
    manifest_path = tmp_path / "model.json"
    manifest = json.loads(open(tiny_chat_manifest).read())
    folder = Path(tiny_chat_manifest).parent
    for name in (manifest["pte"]["file"], manifest["tokenizer"]["file"]):
        shutil.copy(folder / name, tmp_path / name)
    pte = tmp_path / manifest["pte"]["file"]
    data = bytearray(pte.read_bytes())
    data[-5] ^= 0x40  # in the last chunk: every earlier chunk checks out
    pte.write_bytes(bytes(data))
    chunk = manifest["pte"]["chunk_bytes"]
    first = (len(data) - 5) // chunk * chunk
    manifest_path.write_text(json.dumps(manifest))
    with pytest.raises(ModelFileError, match=f"sha256 of bytes {first:,}-{len(data) - 1:,} does not match"):
        asyncio.run(LanguageModel.load(str(manifest_path)))
