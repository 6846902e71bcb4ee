"""The check of a tokenizer.json's structure before its stages are built: a broken file
gets a TokenizerError naming the field and what is wrong, not a KeyError later."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# Token ids at or above this are refused: the id table is a list as long as the largest id.
MAX_TOKEN_ID = 1 << 24


class TokenizerError(ValueError):
    """A tokenizer.json that is malformed or uses what this tokenizer does not support."""


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _token_id(value, where: str) -> int:
    if not (_is_int(value) and 0 <= value < MAX_TOKEN_ID):
        raise TokenizerError(f"tokenizer.json: {where} must be a token id in [0, {MAX_TOKEN_ID}), not {value!r}")
    return value


def _merge_pair(merge, rank: int) -> tuple[str, str]:
    if isinstance(merge, str):
        parts = merge.split(" ")
    elif isinstance(merge, list):
        parts = merge
    else:
        parts = []
    if len(parts) != 2 or not all(isinstance(part, str) and part for part in parts):
        raise TokenizerError(f"tokenizer.json: model.merges[{rank}] must be two tokens, not {merge!r}")
    return parts[0], parts[1]


def check_config(config: Any) -> None:
    """Raises TokenizerError where `config` (a parsed tokenizer.json) is not one this
    tokenizer can read: the BPE model's vocab, merges (each of two tokens of the
    vocabulary whose concatenation is one too, as HF `tokenizers` requires) and the added
    tokens; the stages' own fields are checked as they are built."""
    if not isinstance(config, Mapping):
        raise TokenizerError(f"tokenizer.json must be a JSON object, not {type(config).__name__}")
    model = config.get("model")
    if not isinstance(model, Mapping):
        raise TokenizerError(f"tokenizer.json: 'model' must be an object, not {model!r}")
    vocab = model.get("vocab")
    if not isinstance(vocab, Mapping):
        raise TokenizerError(f"tokenizer.json: 'model.vocab' must be an object of token: id, not {type(vocab).__name__}")
    for token, token_id in vocab.items():
        _token_id(token_id, f"model.vocab[{token!r}]")
    merges = model.get("merges")
    if not isinstance(merges, list):
        raise TokenizerError(f"tokenizer.json: 'model.merges' must be a list, not {type(merges).__name__}")
    for rank, merge in enumerate(merges):
        for token in (*_merge_pair(merge, rank), "".join(_merge_pair(merge, rank))):
            if token not in vocab:
                raise TokenizerError(f"tokenizer.json: model.merges[{rank}] {merge!r}: {token!r} is not in the vocabulary")
    added = config.get("added_tokens") or []
    if not isinstance(added, list):
        raise TokenizerError(f"tokenizer.json: 'added_tokens' must be a list, not {type(added).__name__}")
    # HF `tokenizers` gives an added token the vocabulary's id of its content, else the
    # next id after the vocabulary's: an id in the file that differs would encode otherwise.
    next_id, new_ids = len(vocab), {}
    for index, entry in enumerate(added):
        where = f"added_tokens[{index}]"
        if not isinstance(entry, Mapping):
            raise TokenizerError(f"tokenizer.json: {where} must be an object, not {entry!r}")
        token_id = _token_id(entry.get("id"), f"{where}.id")
        content = entry.get("content")
        if not isinstance(content, str) or not content:
            raise TokenizerError(f"tokenizer.json: {where}.content must be a non-empty string, not {content!r}")
        expected = vocab.get(content, new_ids.get(content))
        if expected is None:
            expected = new_ids[content] = next_id
            next_id += 1
        if token_id != expected:
            raise TokenizerError(
                f"tokenizer.json: {where} {content!r} has id {token_id}, but its id is {expected} "
                "(the vocabulary's for its content, else the next after the vocabulary's)"
            )
        for flag in ("special", "single_word", "lstrip", "rstrip", "normalized"):
            if flag in entry and not isinstance(entry[flag], bool):
                raise TokenizerError(f"tokenizer.json: {where}.{flag} must be true or false, not {entry[flag]!r}")
    for stage in ("normalizer", "pre_tokenizer", "post_processor", "decoder"):
        if config.get(stage) is not None and not isinstance(config[stage], Mapping):
            raise TokenizerError(f"tokenizer.json: '{stage}' must be an object or null, not {config[stage]!r}")
