"""The BPE model of a tokenizer.json: vocabulary, merge ranks and the merging of words."""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from typing import Any, Optional

from .checks import TokenizerError


class BPEModel:
    """Byte-level BPE over pre-tokens, merging exactly as HF `tokenizers` does."""

    # Words (pre-tokens) whose merges are remembered; the cache is emptied when full.
    CACHE_LIMIT = 100_000

    def __init__(self, model: Mapping[str, Any]):
        """`model` is tokenizer.json's "model" entry."""
        if model.get("type", "BPE") != "BPE":
            raise TokenizerError(f"unsupported tokenizer model {model.get('type')!r} (only BPE)")
        for option in ("dropout", "continuing_subword_prefix", "end_of_word_suffix", "byte_fallback"):
            if model.get(option):
                raise TokenizerError(f"BPE option {option}={model[option]!r} is not supported")
        self.vocab: dict[str, int] = dict(model["vocab"])  # without added tokens
        self._merge_ranks: dict[tuple[str, str], int] = {
            (tuple(merge.split(" ", 1)) if isinstance(merge, str) else tuple(merge)): rank
            for rank, merge in enumerate(model["merges"])
        }
        self._unk_token: Optional[str] = model.get("unk_token")
        self._fuse_unk: bool = model.get("fuse_unk", False)
        # Llama 3: a word that is a token as a whole is that token, merges or not.
        self._ignore_merges: bool = model.get("ignore_merges", False)
        self._word_cache: dict[str, list[int]] = {}

    def encode_words(self, words: list[str], ids: list[int]) -> None:
        """Appends the ids of each pre-token of `words`, in order."""
        cache = self._word_cache
        for word in words:
            word_ids = cache.get(word)
            if word_ids is None:
                word_ids = self._merge(word)
                if len(cache) >= self.CACHE_LIMIT:
                    cache.clear()
                cache[word] = word_ids
            ids.extend(word_ids)

    def _merge(self, word: str) -> list[int]:
        """BPE of one pre-token, exactly as HF does it (tokenizers' Word::merge_all).

        The lowest-ranked adjacent pair is merged first, the leftmost one on ties; a heap
        holds candidate pairs and entries whose symbols have changed since are skipped.
        """
        vocab = self.vocab
        if self._ignore_merges and word in vocab:
            return [vocab[word]]
        symbols = self._initial_symbols(word)
        count = len(symbols)
        previous = list(range(-1, count - 1))
        following = [*range(1, count), -1]
        ranks = self._merge_ranks
        heap = []
        for position in range(count - 1):
            rank = ranks.get((symbols[position], symbols[position + 1]))
            if rank is not None:
                heap.append((rank, position, symbols[position] + symbols[position + 1]))
        heapq.heapify(heap)
        while heap:
            _, position, merged = heapq.heappop(heap)
            left = symbols[position]
            right_position = following[position]
            if left is None or right_position == -1:
                continue
            right = symbols[right_position]
            if (left, right) not in ranks or left + right != merged:
                continue  # the pair changed after this entry was pushed
            symbols[position] = merged
            symbols[right_position] = None
            after = following[right_position]
            following[position] = after
            if after != -1:
                previous[after] = position
            before = previous[position]
            if before != -1:
                rank = ranks.get((symbols[before], merged))
                if rank is not None:
                    heapq.heappush(heap, (rank, before, symbols[before] + merged))
            if after != -1:
                rank = ranks.get((merged, symbols[after]))
                if rank is not None:
                    heapq.heappush(heap, (rank, position, merged + symbols[after]))
        return [vocab[symbol] for symbol in symbols if symbol is not None]

    def _initial_symbols(self, word: str) -> list[Optional[str]]:
        """The word's characters as vocabulary tokens; characters missing from the
        vocabulary become the unknown token (runs of them one, with fuse_unk), or are
        dropped when there is none, as HF does."""
        symbols: list[Optional[str]] = []
        previous_unknown = False
        for char in word:
            if char in self.vocab:
                symbols.append(char)
                previous_unknown = False
            elif self._unk_token is not None:
                if not (self._fuse_unk and previous_unknown):
                    symbols.append(self._unk_token)
                previous_unknown = True
        return symbols
