"""A seeded mutation fuzzer of the files LanguageModel.load reads before the .pte: the
manifest (`parse_manifest`) and tokenizer.json (`Tokenizer.from_json`).

The corpus is the bundled model's manifest and a tokenizer.json cut down from its
tokenizer (its first CUT_MERGES merges and the tokens they need, so each input parses in
milliseconds). Mutations act on the JSON tree (a field removed, a value of the wrong
type, a huge or negative number, a string cut or changed, a list entry dropped or
repeated, a merge or vocabulary entry broken) or on the text (truncated, a byte changed).

A manifest must be refused with a ModelFileError or accepted, and then hold everything
LanguageModel reads, usable (its geometry, end tokens, chat template and sibling file
names). A tokenizer.json must be refused with a TokenizerError (or, for text that is not
JSON, json's ValueError) or accepted; Hugging Face `tokenizers` is the reference: what
both accept, both must encode and decode SAMPLE_TEXTS alike (what ours alone accepts is
counted: fields it does not read, such as truncation or padding).
Each input runs in a worker under an address-space limit and a time limit.

    python -m devtools.fuzz_model_files --inputs 20000
"""

from __future__ import annotations

import argparse
import copy
import json
import multiprocessing
import random
import resource
import signal
import sys
import traceback
from pathlib import Path

from export_tools import bundled

MODEL = bundled.DEFAULT_OUT_DIR / bundled.STEM
CUT_MERGES = 300
SAMPLE_TEXTS = ("Hello, world! 123", "<|im_start|>user\nWhat is 2+2?<|im_end|>", " the  tin in ing\n\t")
TIME_LIMIT_S = 10
ADDRESS_LIMIT = 2 << 30
_ODD_VALUES = (None, True, False, 0, -1, 1, 2**31, 2**63, 10**30, 1e308, -1e308, 0.5, "", "x", "../x", "/etc/passwd", [], {}, [1], {"a": 1})


def cut_tokenizer(config: dict, merges: int = CUT_MERGES) -> dict:
    """`config` with only its first `merges` merges and the vocabulary they and single
    characters need (ids kept)."""
    model = config["model"]
    kept = model["merges"][:merges]
    needed = {token for token in model["vocab"] if len(token) == 1} | {entry["content"] for entry in config["added_tokens"]}
    for merge in kept:
        left, right = merge.split(" ", 1) if isinstance(merge, str) else merge
        needed |= {left, right, left + right}
    cut = copy.deepcopy({k: v for k, v in config.items() if k != "model"})
    cut["model"] = {**model, "merges": kept, "vocab": {t: i for t, i in model["vocab"].items() if t in needed}}
    return cut


def corpus(model: Path = MODEL) -> dict[str, dict]:
    """The seeds: the manifest and cut tokenizer.json of the bundled model at `model` (a
    path without suffix)."""
    return {
        "manifest": json.loads(model.with_suffix(".json").read_text()),
        "tokenizer": cut_tokenizer(json.loads(Path(f"{model}.tokenizer.json").read_text())),
    }


def _pick(rng: random.Random, node, path=()):
    """A random (path, node) of the tree, containers entered more often than stopped at."""
    while isinstance(node, (dict, list)) and node and (not path or rng.random() < 0.75):
        key = rng.choice(list(node)) if isinstance(node, dict) else rng.randrange(len(node))
        path, node = (*path, key), node[key]
    return path, node


def _odd_value(rng: random.Random, old):
    if isinstance(old, bool) or rng.random() < 0.4:
        return rng.choice(_ODD_VALUES)
    if isinstance(old, int):
        return rng.choice((old + 1, old - 1, -old - 1, old * 1000, old + 2**32))
    if isinstance(old, float):
        return rng.choice((float("nan"), float("inf"), -old, old * 1e300))
    if isinstance(old, str):
        cut = rng.randrange(len(old) + 1)
        return rng.choice((old[:cut], old[:cut] + "\u0000" + old[cut:], old + old, old.replace(" ", "", 1), old + " x"))
    return rng.choice(_ODD_VALUES)


def mutate(rng: random.Random, tree) -> str:
    """The JSON text of `tree` with one to three mutations."""
    tree = copy.deepcopy(tree)
    for _ in range(rng.choice((1, 1, 2, 3))):
        path, node = _pick(rng, tree)
        if not path:
            continue
        parent = tree
        for key in path[:-1]:
            parent = parent[key]
        key = path[-1]
        kind = rng.random()
        if kind < 0.25 and isinstance(parent, dict):
            del parent[key]
        elif kind < 0.35 and isinstance(parent, list):
            parent.insert(rng.randrange(len(parent) + 1), copy.deepcopy(parent[key]) if rng.random() < 0.5 else _odd_value(rng, node))
        elif kind < 0.42 and isinstance(parent, list):
            del parent[key]
        else:
            parent[key] = _odd_value(rng, node)
    text = json.dumps(tree)
    if rng.random() < 0.05:
        at = rng.randrange(len(text))
        text = text[:at] if rng.random() < 0.5 else text[:at] + rng.choice("{}[],:\"0x") + text[at + 1 :]
    return text


def check_manifest(text: str) -> str:
    """'accepted' or 'ModelFileError'; raises where the manifest is accepted but not usable."""
    from pywebgpu.llm.chat_template import ChatTemplate
    from pywebgpu.llm.manifest import ModelFileError, parse_manifest

    try:
        manifest = parse_manifest(text, "fuzz.json")
    except ModelFileError as error:
        if "fuzz.json" not in str(error):
            raise AssertionError(f"the error does not name the manifest: {error}") from error
        return "ModelFileError"
    geometry = manifest["model"]
    for name in ("vocab_size", "max_prefill_tokens", "max_context_len"):
        assert isinstance(geometry[name], int) and geometry[name] > 0, name
    assert all(0 <= token["id"] < geometry["vocab_size"] for token in manifest["special_tokens"]["eos"])
    ChatTemplate.from_template_string(manifest["chat_template"])
    for name in (manifest["pte"]["file"], manifest["tokenizer"]["file"]):
        assert "/" not in name and "\\" not in name and name not in (".", ".."), f"file name {name!r} outside the manifest's folder"
    return "accepted"


def check_tokenizer(text: str) -> str:
    """'accepted', 'TokenizerError' or 'not JSON'; raises where ours and HF's disagree."""
    import tokenizers

    from pywebgpu.llm.tokenizer import Tokenizer, TokenizerError

    try:
        json.loads(text)
    except ValueError:
        return "not JSON"
    try:
        ours = Tokenizer.from_json(text)
    except TokenizerError as error:
        if not str(error):
            raise AssertionError("TokenizerError without a message") from error
        return "TokenizerError"
    try:
        reference = tokenizers.Tokenizer.from_str(text)
    except Exception:  # a field ours does not read (truncation, padding, a decoder option)
        for sample in SAMPLE_TEXTS:
            ours.decode(ours.encode(sample))
        return "accepted, tokenizers refuses"
    for sample in SAMPLE_TEXTS:
        ids = reference.encode(sample).ids
        assert ours.encode(sample) == ids, f"encode({sample!r}): {ours.encode(sample)} != tokenizers' {ids}"
        assert ours.decode(ids) == reference.decode(ids, skip_special_tokens=False), f"decode({ids})"
    return "accepted"


def _alarm(signum, frame):
    raise TimeoutError(f"no answer in {TIME_LIMIT_S} s")


def _worker(connection, kind: str, seed: int, start: int, count: int, model: Path):
    tree = corpus(model)[kind]
    check = check_manifest if kind == "manifest" else check_tokenizer
    check(json.dumps(tree))  # imports and compiles before the limits apply
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_LIMIT, ADDRESS_LIMIT))
    signal.signal(signal.SIGALRM, _alarm)
    outcomes, defects = {}, []
    for index in range(start, start + count):
        text = mutate(random.Random(f"{kind}:{seed}:{index}"), tree)
        signal.alarm(TIME_LIMIT_S)
        try:
            outcome = check(text)
        except BaseException as error:  # the defects this fuzzer looks for
            outcome = "defect"
            defects.append((index, "".join(traceback.format_exception(error)[-2:]).strip()))
        finally:
            signal.alarm(0)
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
    connection.send((outcomes, defects))


def fuzz(kind: str, inputs: int, seed: int = 0, model: Path = MODEL) -> tuple[dict, list]:
    """Outcome counts and defects [(index, traceback tail)] of `inputs` mutants of `kind`,
    seeded from the bundled model at `model`."""
    for path in (model.with_suffix(".json"), Path(f"{model}.tokenizer.json")):
        if not path.is_file():
            raise FileNotFoundError(f"{path} is missing: export the bundled model first (python -m export_tools.bundled)")
    context = multiprocessing.get_context("spawn")
    receiver, sender = context.Pipe(duplex=False)
    process = context.Process(target=_worker, args=(sender, kind, seed, 0, inputs, model), daemon=True)
    process.start()
    sender.close()  # the worker's end only: its death then reads as EOFError here
    try:
        if not receiver.poll(60 + inputs * TIME_LIMIT_S):
            raise RuntimeError("the worker did not answer")
        return receiver.recv()
    except EOFError:
        process.join(10)
        return {"crash": 1}, [(-1, f"the worker died (exit code {process.exitcode})")]
    finally:
        process.kill()
        process.join()


def replay(kind: str, index: int, seed: int):
    text = mutate(random.Random(f"{kind}:{seed}:{index}"), corpus()[kind])
    print(text[:2000])
    print((check_manifest if kind == "manifest" else check_tokenizer)(text))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--inputs", type=int, default=20_000, help="mutants of each file")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--replay", nargs=2, metavar=("KIND", "INDEX"), help="run one input (manifest|tokenizer INDEX) here")
    args = parser.parse_args()
    bundled.ensure_bundled_model(progress=True)
    if args.replay:
        return replay(args.replay[0], int(args.replay[1]), args.seed)
    failed = False
    for kind in ("manifest", "tokenizer"):
        outcomes, defects = fuzz(kind, args.inputs, args.seed)
        print(f"{kind}: {args.inputs} inputs: {outcomes}")
        for index, what in defects[:20]:
            print(f"  input {index}: {what}")
        failed |= bool(defects)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
