"""Pack an exported model small enough to send to a benchmark machine: every constant of
its Vulkan graph (weights, scales, embedding) is overwritten with one repeated byte and
the .pte is gzip'd, so a Llama-3.2-1B-geometry program (810 MB) travels as a few MB.

Kernel speed does not depend on the weight values (no kernel branches on data), so the
weightless program times the same as the real one; its tokens are meaningless.

    .venv/bin/python -m bench.weightless llama1b/model.pte OUT_DIR

writes OUT_DIR/<name>.pte.gz, OUT_DIR/<name>.json (the manifest, with the size and
sha256s of the unpacked file) and the tokenizer file the manifest names. A manifest that names no tokenizer (random-weight
exports) gets the bundled SmolLM2 tokenizer (copied beside it), special tokens and chat
template: the benchmark only needs
prompt token ids, and SmolLM2's are valid ids of any Llama-3 vocabulary.
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import shutil
from pathlib import Path

from pywebgpu.llm.manifest import pte_entry
from pywebgpu.pte import TensorValue, load_program

from .options import MANIFEST

# 0x3C3C3C3C is 0.0115 as f32 (a finite, ordinary scale), and nibble 12 as 4-bit weights.
FILL_BYTE = 0x3C
# For f16 programs (force_fp16): 0x3C3C is 1.06 as float16, which lets activations outgrow
# float16 caches; 0x1C1C is 0.0039, and nibbles 12 and 1 as weights.
FILL_BYTE_F16 = 0x1C


def constant_ranges(graph) -> list[tuple[int, int]]:
    """(offset, size) of every constant that the program's Vulkan graph reads."""
    ranges = {(value.constant.offset, value.constant.size) for value in graph.values if isinstance(value, TensorValue) and value.constant}
    return sorted(ranges)


def weightless(data: bytes) -> bytes:
    graph = load_program(data).vulkan_graph()
    fill = bytes([FILL_BYTE_F16 if graph.compile_specs.get("force_fp16") == b"\x01" else FILL_BYTE])
    filled = bytearray(data)
    for offset, size in constant_ranges(graph):
        filled[offset : offset + size] = fill * size
    return bytes(filled)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.weightless", description=__doc__.split("\n\n")[0])
    parser.add_argument("pte", type=Path, help="the exported .pte (its manifest <stem>.json beside it)")
    parser.add_argument("out_dir", type=Path)
    args = parser.parse_args(argv)

    packed = weightless(args.pte.read_bytes())
    manifest = json.loads(args.pte.with_suffix(".json").read_text())
    manifest["pte"] = pte_entry(args.pte.name, io.BytesIO(packed))
    args.out_dir.mkdir(parents=True, exist_ok=True)
    tokenizer_from = args.pte.parent
    if not manifest.get("tokenizer"):
        bundled = json.loads(MANIFEST.read_text())
        for key in ("tokenizer", "special_tokens", "chat_template"):
            manifest[key] = bundled[key]
        tokenizer_from = MANIFEST.parent
    shutil.copy(tokenizer_from / manifest["tokenizer"]["file"], args.out_dir / manifest["tokenizer"]["file"])
    (args.out_dir / args.pte.with_suffix(".json").name).write_text(json.dumps(manifest, indent=1) + "\n")
    with gzip.open(args.out_dir / f"{args.pte.name}.gz", "wb", compresslevel=6) as out:
        out.write(packed)
    print(f"wrote {args.out_dir / (args.pte.name + '.gz')} ({(args.out_dir / (args.pte.name + '.gz')).stat().st_size:,} bytes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
