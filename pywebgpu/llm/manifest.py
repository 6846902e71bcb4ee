"""The model's manifest: the JSON that export_tools writes beside the .pte (its size and
sha256, the model's geometry, tokenizer, special tokens and chat template), and the check
LanguageModel.load makes of it before anything else is downloaded."""

from __future__ import annotations

import hashlib
import json
import re

from ..gpu import GPUError
from .chat_template import ChatTemplate

FORMAT = "pywebgpu.llama-export"
VERSION = 1
# The .pte's sha256 per chunk of this many bytes too (`pte.chunk_sha256`), so that a browser
# hashes each chunk in a Worker as the download brings it and the check ends with the
# download (WebCrypto hashes only whole buffers, on the calling thread).
CHUNK_BYTES = 16 << 20

_SHA256 = re.compile(r"[0-9a-f]{64}")


class ModelFileError(GPUError):
    """A model file that is missing, truncated or not what its manifest says, or a
    manifest that is not one."""


def parse_manifest(text: str, location: str) -> dict:
    """The manifest at `location` (for messages) from its JSON `text`, with every field
    LanguageModel reads checked: a wrong file gets an error naming the field, not a
    KeyError later or a download of a file that cannot be used."""
    try:
        manifest = json.loads(text)
    except ValueError as error:
        raise ModelFileError(f"the model's manifest {location} is not valid JSON ({error})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        found = manifest.get("format") if isinstance(manifest, dict) else None
        raise ModelFileError(
            f"{location} is not a model manifest of pywebgpu's export tools: its 'format' is {found!r}, not {FORMAT!r}"
        )
    version = manifest.get("format_version")
    if not _is_int(version) or version < 1:
        raise ModelFileError(f"the model's manifest {location}: 'format_version' must be a positive integer, not {version!r}")
    if version > VERSION:
        raise ModelFileError(
            f"the model's manifest {location} is format version {version}; this pywebgpu reads version {VERSION} "
            "(a newer pywebgpu reads this model)"
        )

    def field(path: str, valid, must_be: str):
        value = manifest
        for key in path.split("."):
            if not isinstance(value, dict) or key not in value:
                raise ModelFileError(f"the model's manifest {location} has no '{path}'")
            value = value[key]
        if not valid(value):
            raise ModelFileError(f"the model's manifest {location}: '{path}' must be {must_be}, not {value!r}")
        return value

    if not manifest.get("tokenizer"):
        raise ModelFileError(f"the model's manifest {location} names no tokenizer")
    field("tokenizer.file", _is_name, "a file name")
    field("pte.file", _is_name, "a file name")
    field("pte.bytes", _is_positive_int, "a positive integer")
    field("pte.sha256", _is_sha256, "64 lowercase hex digits")
    if "chunk_sha256" in manifest["pte"] or "chunk_bytes" in manifest["pte"]:
        chunk_bytes = field("pte.chunk_bytes", _is_positive_int, "a positive integer")
        chunks = -(-manifest["pte"]["bytes"] // chunk_bytes)
        field(
            "pte.chunk_sha256",
            lambda v: isinstance(v, list) and len(v) == chunks and all(map(_is_sha256, v)),
            f"a list of {chunks} sha256s (64 lowercase hex digits each), one per {chunk_bytes} bytes of the .pte",
        )
    for name in ("vocab_size", "max_prefill_tokens", "max_context_len"):
        field(f"model.{name}", _is_positive_int, "a positive integer")
    vocab_size = manifest["model"]["vocab_size"]
    eos = field("special_tokens.eos", lambda v: isinstance(v, list) and v, "a list of tokens")
    for index, token in enumerate(eos):
        token_id = token.get("id") if isinstance(token, dict) else None
        if not (_is_int(token_id) and 0 <= token_id < vocab_size):
            raise ModelFileError(
                f"the model's manifest {location}: 'special_tokens.eos[{index}].id' must be a token id "
                f"below the vocabulary's {vocab_size}, not {token_id!r}"
            )
    # LanguageModel cannot go without one: a model exported without its tokenizer's template
    # (a base model) is refused here rather than after its download.
    if manifest.get("chat_template") in (None, ""):
        raise ModelFileError(
            f"the model's manifest {location} has no 'chat_template' (the chat needs the model's template: ChatML or Llama 3)"
        )
    template = field("chat_template", lambda v: isinstance(v, str), "a Jinja template string")
    try:
        ChatTemplate.from_template_string(template)
    except ValueError as error:
        raise ModelFileError(f"the model's manifest {location}: 'chat_template': {error}") from None
    return manifest


def pte_entry_of_file(path) -> dict:
    """The manifest's `pte` entry for the .pte file at `path` (a pathlib.Path)."""
    with open(path, "rb") as file:
        return pte_entry(path.name, file)


def pte_entry(name: str, file) -> dict:
    """The manifest's `pte` entry for the .pte named `name`, read from the binary `file`."""
    whole, chunks, size = hashlib.sha256(), [], 0
    for chunk in iter(lambda: file.read(CHUNK_BYTES), b""):
        whole.update(chunk)
        chunks.append(hashlib.sha256(chunk).hexdigest())
        size += len(chunk)
    return {"file": name, "bytes": size, "sha256": whole.hexdigest(), "chunk_bytes": CHUNK_BYTES, "chunk_sha256": chunks}


def _is_sha256(value) -> bool:
    return isinstance(value, str) and _SHA256.fullmatch(value) is not None


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_positive_int(value) -> bool:
    return _is_int(value) and value > 0


def _is_name(value) -> bool:
    """A file beside the manifest: no folder, no URL scheme."""
    return isinstance(value, str) and value not in ("", ".", "..") and not any(c in value for c in "/\\:")
