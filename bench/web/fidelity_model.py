"""pywebgpu's side of the fidelity check (`python -m bench.fidelity`): greedy replies and
teacher-forced top-k candidates from one LanguageModel, in Pyodide in
bench/web/fidelity.html's worker (the page receives this file's source)."""

from __future__ import annotations

import time


def _candidates(found) -> list[list]:
    """Top-k (logit, id) pairs as [id, logit], the largest logit first."""
    return [[token, logit] for logit, token in sorted(found, key=lambda pair: -pair[0])]


async def greedy_reply(model, prompt_ids: list[int], max_tokens: int, k: int) -> dict:
    """Greedy tokens after `prompt_ids` (from position 0) until an end-of-sequence token
    or `max_tokens`; each step's top-k candidates beside it."""
    ids, steps = [], []
    found = await model.next_token_candidates(prompt_ids, 0, k)
    while True:
        top = _candidates(found)
        ids.append(top[0][0])
        steps.append(top)
        if top[0][0] in model.eos_ids or len(ids) == max_tokens:
            return {"ids": ids, "top": steps}
        found = await model.next_token_candidates([top[0][0]], len(prompt_ids) + len(ids) - 1, k)


async def teacher_forced(model, ids: list[int], k: int) -> list[list]:
    """The top-k candidates for the token after each prefix ids[:i + 1], fed one token a step."""
    return [_candidates(await model.next_token_candidates([token], position, k)) for position, token in enumerate(ids[:-1])]


async def run(manifest_location: str, config: dict, log=print) -> dict:
    from pywebgpu.llm import LanguageModel

    started = time.perf_counter()
    model = await LanguageModel.load(manifest_location)
    upgrades = model.start_upgrades()
    if upgrades is not None:
        await upgrades
    result = {"load_s": time.perf_counter() - started, "adapter": model.graph.device.adapter.description, "replies": []}
    log(f"pywebgpu: loaded in {result['load_s']:.1f} s on {result['adapter']}")
    for number, prompt_ids in enumerate(config["prompts"], 1):
        result["replies"].append(await greedy_reply(model, prompt_ids, config["max_tokens"], config["top_k"]))
        log(f"pywebgpu: reply {number} of {len(config['prompts'])}: {len(result['replies'][-1]['ids'])} tokens")
    started = time.perf_counter()
    result["forced"] = await teacher_forced(model, config["forced_ids"], config["top_k"])
    result["forced_s"] = time.perf_counter() - started
    log(f"pywebgpu: teacher-forced over {len(config['forced_ids'])} tokens in {result['forced_s']:.1f} s")
    model.close()
    return result
