"""Lower a loaded Llama model to a Vulkan-delegated ExecuTorch `.pte`, plus its manifest.

The pipeline is ExecuTorch 1.5.1's own Llama export, i.e. what
`python -m executorch.examples.models.llama.export_llama --model llama3 -kv
--use_sdpa_with_kv_cache -V -d fp32 -qmode 4w -G 32 -E 4,32` runs, called step by step
(the Vulkan branch of `export_llama_lib._export_llama`) so that the tool can show
progress, keep the eager module it lowered, and write the file itself (ExecuTorch's
`save_pte_program` logs write errors instead of raising them).
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import tempfile
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Union

import torch
from tqdm import tqdm

from pywebgpu.llm import manifest as manifest_format

from .errors import ExportError, ExportWarning
from .exact_modules import install_exact_weights
from .params import LlamaParams
from .sources import LoadedModel, ModelSource, TokenizerInfo

QMODES = ("4w", "8da4w", "fp32")
# What a re-quantizing export uses for the options the caller leaves out.
REQUANTIZE_DEFAULTS: dict[str, Any] = {"qmode": "4w", "group_size": 32, "embedding_4bit": True, "hqq_scales": True}
# ExecuTorch traces with a 3-token prompt and bounds the dynamic length at max_seq_len - 1.
MIN_MAX_SEQ_LEN = 4


@dataclass(frozen=True)
class ExportOptions:
    max_seq_len: int
    max_context_len: int
    qmode: str = "4w"
    group_size: int = 32
    embedding_4bit: bool = True
    # HQQ-optimized 4-bit scales, ExecuTorch's default (QuantizationConfig.use_hqq): more
    # accurate than plain min/max (False) but slow on CPU.
    hqq_scales: bool = True
    # The Vulkan partitioner's force_fp16: every float tensor of the program float16 (its
    # constants rounded to it; ExecuTorch's runtime computes in f16, pywebgpu in f32).
    force_fp16: bool = False
    # A GGUF's quantized weights kept exactly (exact_modules) instead of re-quantized: the
    # model is built unquantized (qmode fp32, fp32 embedding), then its modules swapped.
    exact_gguf: bool = False

    @classmethod
    def resolve(
        cls, source: ModelSource, max_seq_len: int, max_context_len: int, requantize: bool, force_fp16: bool, **given: Any
    ) -> "ExportOptions":
        """The options of an export of `source`: a GGUF's is exact unless `requantize`
        or a re-quantizing option (qmode, group_size, embedding_4bit, hqq_scales) is given."""
        from .sources import GGUFSource

        given = {name: value for name, value in given.items() if value is not None}
        if isinstance(source, GGUFSource) and not requantize and not given:
            return cls(max_seq_len, max_context_len, "fp32", embedding_4bit=False, hqq_scales=False,
                       force_fp16=force_fp16, exact_gguf=True)  # fmt: skip
        return cls(max_seq_len, max_context_len, **{**REQUANTIZE_DEFAULTS, **given}, force_fp16=force_fp16)

    def __post_init__(self) -> None:
        """Reject what needs no model geometry, before any (slow) weight loading."""
        if self.qmode not in QMODES:
            raise ExportError(f"unknown qmode '{self.qmode}' (choose from {', '.join(QMODES)})")
        if not isinstance(self.max_seq_len, int) or self.max_seq_len < MIN_MAX_SEQ_LEN:
            raise ExportError(f"max_seq_len must be an integer >= {MIN_MAX_SEQ_LEN}, got {self.max_seq_len!r}")
        if not isinstance(self.max_context_len, int) or self.max_context_len < self.max_seq_len:
            raise ExportError(
                f"max_context_len ({self.max_context_len}) must be an integer >= max_seq_len ({self.max_seq_len})"
            )
        if not isinstance(self.group_size, int) or self.group_size <= 0:
            raise ExportError(f"group_size must be a positive integer, got {self.group_size!r}")

    def check(self, params: LlamaParams) -> None:
        """Raise ExportError if the quantization groups do not tile the model's widths."""
        if self.qmode != "fp32":
            for what, width in params.linear_in_features().items():
                if width % self.group_size:
                    raise ExportError(f"{what} = {width} is not a multiple of group size {self.group_size}")
        if self.embedding_4bit and params.dim % self.group_size:
            raise ExportError(
                f"dim = {params.dim} is not a multiple of group size {self.group_size} (4-bit embedding)"
            )

    def embedding_quantize(self) -> Optional[str]:
        """ExecuTorch's `-E bits,group_size` value."""
        return f"4,{self.group_size}" if self.embedding_4bit else None

    def manifest_dict(self) -> dict[str, Any]:
        quantized = self.qmode != "fp32" or self.embedding_4bit
        return {
            "mode": self.qmode,
            "group_size": None if self.qmode == "fp32" else self.group_size,
            "embedding": {"bits": 4, "group_size": self.group_size} if self.embedding_4bit else None,
            # torchao's names for how the symmetric 4-bit scales were chosen.
            "scale_algorithm": ("hqq_scale_only" if self.hqq_scales else "affine") if quantized else None,
            "float_dtype": "float16" if self.force_fp16 else "float32",
        }


class EagerLlama:
    """The eager PyTorch module that was lowered: source-transformed and quantized.

    `forward` has the `.pte`'s `forward` semantics: it consumes `tokens` at positions
    `start_pos ...`, writes them into the KV cache, which persists across calls, and
    returns the logits of the last token, fp32 [1, vocab_size]. `reset()` empties the
    cache. The limits are the `.pte`'s too: 1..`max_prefill_tokens` tokens per call and
    `start_pos + len(tokens) <= max_context_len`. With `force_fp16` its float parameters
    and buffers hold what the program's float16 constants hold (computed in f32), and
    while `float16_caches` is true its KV caches round what they store to float16, as the
    program's float16 caches do.
    """

    def __init__(self, module: torch.nn.Module, params: LlamaParams, options: ExportOptions):
        self.module = module.eval()
        self.float16_caches = options.force_fp16
        if options.force_fp16:
            _round_to_float16(self.module)
            for cache in self.module.modules():
                if hasattr(cache, "k_cache") and hasattr(cache, "update"):
                    cache.update = self._rounding_update(cache.update)
        self.params = params
        self.max_prefill_tokens = options.max_seq_len - 1
        self.max_context_len = options.max_context_len

    @torch.no_grad()
    def forward(self, tokens: Sequence[int], start_pos: int) -> torch.Tensor:
        if not 1 <= len(tokens) <= self.max_prefill_tokens:
            raise ValueError(f"expected 1..{self.max_prefill_tokens} tokens, got {len(tokens)}")
        if start_pos < 0 or start_pos + len(tokens) > self.max_context_len:
            raise ValueError(
                f"positions {start_pos}..{start_pos + len(tokens) - 1} exceed the context of {self.max_context_len}"
            )
        if not all(0 <= token < self.params.vocab_size for token in tokens):
            raise ValueError(f"token ids must lie in 0..{self.params.vocab_size - 1}")
        return self.module(
            torch.tensor([list(tokens)], dtype=torch.long),
            {"input_pos": torch.tensor([start_pos], dtype=torch.long)},
        )

    __call__ = forward

    def _rounding_update(self, store):
        """A KV cache's update that stores float16-rounded keys and values while
        float16_caches is true."""

        def update(input_pos, k_val, v_val, *rest):
            if self.float16_caches:
                k_val, v_val = (x.to(torch.float16).to(x.dtype) for x in (k_val, v_val))
            return store(input_pos, k_val, v_val, *rest)

        return update

    @torch.no_grad()
    def reset(self) -> None:
        """Zero the KV caches, as a freshly loaded `.pte` has them."""
        for name, buffer in self.module.named_buffers():
            if name.endswith(("k_cache", "v_cache")):
                buffer.zero_()


@torch.no_grad()
def _round_to_float16(module: torch.nn.Module) -> None:
    """Round every float tensor of `module` as the Vulkan serializer stores an fp32
    constant under force_fp16 (clamped to float16's range, then rounded), in place,
    inside quantized tensor subclasses too (their scales)."""
    limit = torch.finfo(torch.float16).max

    def round_(tensor: torch.Tensor) -> None:
        if hasattr(tensor, "__tensor_flatten__"):
            names, _ = tensor.__tensor_flatten__()
            for name in names:
                round_(getattr(tensor, name))
        elif tensor.is_floating_point():
            tensor.copy_(tensor.clamp(-limit, limit).to(torch.float16))

    for tensor in [*module.parameters(), *module.buffers()]:
        round_(tensor)


@dataclass
class ExportResult:
    pte_path: Path
    manifest_path: Path
    manifest: dict[str, Any]
    eager: EagerLlama


def build_eager(
    source: ModelSource,
    *,
    max_seq_len: int,
    max_context_len: int,
    qmode: Optional[str] = None,
    group_size: Optional[int] = None,
    embedding_4bit: Optional[bool] = None,
    hqq_scales: Optional[bool] = None,
    requantize: bool = False,
    progress: bool = False,
    verbose: bool = False,
) -> EagerLlama:
    """The module `export_llama` would lower with these arguments, without lowering it."""
    options = ExportOptions.resolve(
        source, max_seq_len, max_context_len, requantize, False,
        qmode=qmode, group_size=group_size, embedding_4bit=embedding_4bit, hqq_scales=hqq_scales,
    )  # fmt: skip
    loaded = source.load(progress=progress)
    options.check(loaded.params)
    with _Stages(["write checkpoint", "load + quantize"], progress) as stages:
        manager, _ = _prepare(loaded, options, stages, verbose)
    return EagerLlama(manager.model, loaded.params, options)


def export_llama(
    source: ModelSource,
    out_path: Union[str, Path],
    *,
    max_seq_len: int,
    max_context_len: int,
    qmode: Optional[str] = None,
    group_size: Optional[int] = None,
    embedding_4bit: Optional[bool] = None,
    hqq_scales: Optional[bool] = None,
    requantize: bool = False,
    force_fp16: bool = False,
    progress: bool = False,
    verbose: bool = False,
) -> ExportResult:
    """Export `source` to `out_path` (a `.pte`) and write `<stem>.json` (+ tokenizer) beside it."""
    pte_path = Path(out_path)
    if pte_path.suffix != ".pte":
        raise ExportError(f"output path must end in .pte: {pte_path}")
    options = ExportOptions.resolve(
        source, max_seq_len, max_context_len, requantize, force_fp16,
        qmode=qmode, group_size=group_size, embedding_4bit=embedding_4bit, hqq_scales=hqq_scales,
    )  # fmt: skip
    loaded = source.load(progress=progress)
    options.check(loaded.params)
    params, tokenizer, origin = loaded.params, loaded.tokenizer, loaded.origin
    pte_path.parent.mkdir(parents=True, exist_ok=True)

    with _Stages(
        ["write checkpoint", "load + quantize", "torch.export", "to edge", "Vulkan partition", "to executorch", "write .pte"],
        progress,
    ) as stages:
        manager, quantization = _prepare(loaded, options, stages, verbose)
        del loaded  # free the converted fp32 weights: the module has its own (quantized) copy
        _lower(manager, pte_path, stages, verbose, options.force_fp16)

    manifest = _write_manifest(pte_path, params, quantization, options, tokenizer, origin)
    return ExportResult(
        pte_path=pte_path,
        manifest_path=pte_path.with_suffix(".json"),
        manifest=manifest,
        eager=EagerLlama(manager.model, params, options),
    )


class _Stages:
    """One progress bar over the named pipeline stages."""

    def __init__(self, names: list[str], enabled: bool):
        self.names = iter(names)
        self.bar = tqdm(total=len(names), desc="export", disable=not enabled, bar_format="{desc}: {n}/{total} |{bar}| {elapsed}")

    def __enter__(self) -> "_Stages":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.bar.close()

    @contextlib.contextmanager
    def stage(self) -> Iterator[None]:
        self.bar.set_description_str(next(self.names))
        yield
        self.bar.update()


@contextlib.contextmanager
def _quiet(verbose: bool) -> Iterator[None]:
    """Hide ExecuTorch's and PyTorch's logs, prints and warnings unless verbose.

    `logging.disable` rather than a logger level: ExecuTorch modules reset the root
    logger's level to INFO when they are imported.
    """
    if verbose:
        yield
        return
    logging.disable(logging.WARNING)
    try:
        with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            warnings.simplefilter("default", ExportWarning)
            yield
    finally:
        logging.disable(logging.NOTSET)


def _llm_config(checkpoint: Path, params_path: Path, options: ExportOptions, tokenizer: Optional[TokenizerInfo]):
    from executorch.extension.llm.export.config.llm_config import (
        BackendConfig,
        BaseConfig,
        ExportConfig,
        LlmConfig,
        ModelConfig,
        ModelType,
        QuantizationConfig,
        VulkanConfig,
    )

    # The runner's constant methods (ExecuTorch's llama runner reads these).
    metadata = {}
    if tokenizer is not None and tokenizer.bos is not None:
        metadata["get_bos_id"] = tokenizer.bos.id
    if tokenizer is not None and tokenizer.eos:
        metadata["get_eos_ids"] = [token.id for token in tokenizer.eos]
    return LlmConfig(
        # Any ExecuTorch-defined Llama builds the same Llama2Model; "llama3" is the one
        # that takes rope_scale_factor from params (llama3_2 would force it to 32).
        base=BaseConfig(
            model_class=ModelType.llama3,
            checkpoint=str(checkpoint),
            params=str(params_path),
            metadata=json.dumps(metadata) if metadata else None,
        ),
        model=ModelConfig(use_kv_cache=True, use_sdpa_with_kv_cache=True, enable_dynamic_shape=True),
        export=ExportConfig(
            max_seq_length=options.max_seq_len,
            max_context_length=options.max_context_len,
            output_dir=str(checkpoint.parent),
        ),
        quantization=QuantizationConfig(
            qmode=None if options.qmode == "fp32" else options.qmode,
            group_size=options.group_size,
            embedding_quantize=options.embedding_quantize(),
            use_hqq=options.hqq_scales,
        ),
        backend=BackendConfig(vulkan=VulkanConfig(enabled=True)),
    )


def _prepare(loaded: LoadedModel, options: ExportOptions, stages: _Stages, verbose: bool):
    """ExecuTorch's model loading and source transforms (quantization, custom SDPA/KV cache),
    then, for an exact GGUF export, its exact modules: (the export manager, the manifest's
    `quantization` entry).

    ExecuTorch's model loads weights from a checkpoint file, so the converted weights go
    through a temporary one. It is memory-mapped; deleting it while the module still maps
    it is fine on POSIX (the data stays until the mapping goes).
    """
    with tempfile.TemporaryDirectory(prefix="export_tools-") as workdir:
        checkpoint = Path(workdir) / "consolidated.00.pth"
        params_path = Path(workdir) / "params.json"
        with stages.stage():
            torch.save(loaded.state_dict, checkpoint)
            params_path.write_text(json.dumps(loaded.params.executorch_params()))
        with stages.stage(), _quiet(verbose):
            from executorch.examples.models.llama import export_llama_lib

            config = _llm_config(checkpoint, params_path, options, loaded.tokenizer)
            export_llama_lib._validate_args(config)
            manager = export_llama_lib._prepare_for_llama_export(config)
            if not options.exact_gguf:
                return manager, options.manifest_dict()
            quantization = install_exact_weights(manager.model, loaded.gguf_tensors, loaded.state_dict)
            return manager, {**quantization, "float_dtype": options.manifest_dict()["float_dtype"]}


def _lower(manager, pte_path: Path, stages: _Stages, verbose: bool, force_fp16: bool) -> None:
    """torch.export -> edge dialect -> VulkanPartitioner -> ExecuTorch program -> file."""
    with _quiet(verbose):
        from executorch.extension.llm.export.partitioner_lib import get_vulkan_partitioner

        with stages.stage():
            manager.export()
            manager.run_canonical_optimizations()
        with stages.stage():
            manager.export_to_edge()
        with stages.stage():
            manager.to_backend([get_vulkan_partitioner("fp32", enable_dynamic_shape=True, force_fp16=force_fp16)])
        with stages.stage():
            manager.to_executorch(passes=[])
    with stages.stage():
        partial_path = pte_path.with_name(pte_path.name + ".partial")
        with open(partial_path, "wb") as file:
            manager.export_program.write_to_file(file)
        partial_path.replace(pte_path)


def _write_manifest(
    pte_path: Path,
    params: LlamaParams,
    quantization: dict[str, Any],
    options: ExportOptions,
    tokenizer: Optional[TokenizerInfo],
    origin: dict[str, Any],
) -> dict[str, Any]:
    import executorch.version

    tokenizer_entry = None
    if tokenizer is not None and tokenizer.tokenizer_json is not None:
        tokenizer_path = pte_path.with_name(pte_path.stem + ".tokenizer.json")
        tokenizer_path.write_text(tokenizer.tokenizer_json, encoding="utf-8")
        tokenizer_entry = {"file": tokenizer_path.name, "add_bos": _adds_bos(tokenizer)}
    manifest = {
        "format": manifest_format.FORMAT,
        "format_version": manifest_format.VERSION,
        "pte": manifest_format.pte_entry_of_file(pte_path),
        "model": {
            **params.manifest_dict(),
            "max_seq_len": options.max_seq_len,
            "max_prefill_tokens": options.max_seq_len - 1,
            "max_context_len": options.max_context_len,
        },
        "quantization": quantization,
        "tokenizer": tokenizer_entry,
        "special_tokens": {
            "bos": tokenizer.bos.manifest_dict() if tokenizer and tokenizer.bos else None,
            "eos": [token.manifest_dict() for token in tokenizer.eos] if tokenizer else [],
        },
        "chat_template": tokenizer.chat_template if tokenizer else None,
        "source": origin,
        "exported_with": {"torch": torch.__version__, "executorch": executorch.version.__version__},
    }
    manifest_path = pte_path.with_suffix(".json")
    manifest_path.write_text(json.dumps(manifest, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return manifest


def _adds_bos(tokenizer: TokenizerInfo) -> bool:
    """Whether encoding with special tokens already puts BOS first (HF post-processor)."""
    from tokenizers import Tokenizer

    if tokenizer.bos is None:
        return False
    return Tokenizer.from_str(tokenizer.tokenizer_json).encode("a").ids[:1] == [tokenizer.bos.id]
