"""pywebgpu's side of the speed benchmark (`python -m bench`): one LanguageModel, timed.

Pure Python over pywebgpu and the standard library, so the very same code runs natively
(CPython, wgpu-native) and in the browser (Pyodide in bench/web/bench.html's worker, which
receives this file's source from bench/__main__.py).

Every figure comes from the public model API (`LanguageModel.next_token_candidates`,
greedy, top-k read back from the GPU) with instrumentation on the device: `submit` is
wrapped to note how long it took (converting commands, and in the browser the one JS call
that writes parameters, encodes, submits and requests the readback, which is timed on its
own too), how many dispatches it held, and to time them on the GPU when asked. Host time
per decode token is the whole call that submits a step (set inputs, resize, record,
submit, the readback requested), or a block of steps submitted as one (ChatSession's on
GPUs), shared out over its steps.
"""

from __future__ import annotations

import inspect
import time
from collections import deque
from statistics import median

from pywebgpu.gpu import Recorder
from pywebgpu.llm import Sampler, SamplingParams
from pywebgpu.llm.chat import RUN_AHEAD_STEPS, decode_block
from pywebgpu.ops.topk import PENALIZED_MAX
from pywebgpu.runtime import HostTensor


# Runs of each op per submit in the decode step's profile (see profile_ops).
DECODE_PROFILE_REPEATS = 8


def _now() -> float:
    return time.perf_counter()


def _timed(call, seconds: dict, label: str):
    """`call` wrapped to add the seconds of each call (an async function's until its
    result) to `seconds[label]`: HostSections' and LoadPhases' wrappers."""
    if inspect.iscoroutinefunction(call):

        async def timed_async(*args, **kwargs):
            started = _now()
            try:
                return await call(*args, **kwargs)
            finally:
                seconds[label] = seconds.get(label, 0.0) + _now() - started

        return timed_async

    def timed(*args, **kwargs):
        started = _now()
        try:
            return call(*args, **kwargs)
        finally:
            seconds[label] = seconds.get(label, 0.0) + _now() - started

    return timed


def _dispatches(*recorders) -> int:
    return sum(1 for recorder in recorders for command in recorder.commands if command[0] == Recorder.DISPATCH)


class _SubmitClock:
    """Wraps `device.submit` and the end of a batch of submits (Device.batched_submits):
    the seconds spent in them since the last `take()`, and the dispatches the last submit
    handed over; while `timer` is set, submits are timed on the GPU with it. In the
    browser, also the seconds of the JS calls that encode and submit (one per submission),
    timed from Python, and the last one's own run (timed in JS: performance.now() ticks in
    5 µs steps there). The rest of the host time is Python's; a call less its run, the
    crossing from Python to JS and back."""

    def __init__(self, device):
        self.seconds = 0.0
        self.js_seconds = None
        self.timer = None
        self._recorders = ()
        self._timed_in_js = None
        submit, submit_batch = device.submit, device._submit_batch
        encode_and_submit = getattr(device, "_encode_and_submit", None)  # the browser's
        if encode_and_submit is not None:
            from pyodide.code import run_js

            self.js_seconds = 0.0
            self._timed_in_js = timed_in_js = run_js(
                "(f) => { const g = (...args) => { const t = performance.now(); try { return f(...args); }"
                " finally { g.ms = performance.now() - t; } }; g.ms = 0; return g; }"
            )(encode_and_submit)

            def timed_encode_and_submit(*args):
                started = _now()
                try:
                    return timed_in_js(*args)
                finally:
                    self.js_seconds += _now() - started

            device._encode_and_submit = timed_encode_and_submit

        def timed_submit(*recorders, timer=None, read=None):
            started = _now()
            # `read` only when given: the benchmark also runs wheels from before it existed.
            result = submit(*recorders, timer=timer or self.timer, **({} if read is None else {"read": read}))
            self.seconds += _now() - started
            self._recorders = recorders
            return result

        def timed_submit_batch(batch):
            started = _now()
            try:
                submit_batch(batch)
            finally:
                self.seconds += _now() - started

        device.submit = timed_submit
        device._submit_batch = timed_submit_batch

    def take(self) -> tuple:
        """(seconds in submits, seconds in JS calls or None) since the last take()."""
        taken = (self.seconds, self.js_seconds)
        self.seconds = 0.0
        if self.js_seconds is not None:
            self.js_seconds = 0.0
        return taken

    @property
    def js_body_seconds(self) -> float | None:
        """The last JS call's own run (see the class), read when asked: not in a host time."""
        return None if self._timed_in_js is None else self._timed_in_js.ms / 1000

    @property
    def dispatches(self) -> int:
        """Dispatches of the last submit, counted when asked: counting in timed_submit
        would add the walk over a step's ~100-300 commands to the host time measured."""
        return _dispatches(*self._recorders)


class HostSections:
    """The seconds spent in the big sections of a model's calls since the last take(),
    each section's function wrapped (which adds a little to the host time measured):
    setting inputs, resizing, recording, preparing the top-k, `submit` and ending a
    batch of submits (which holds the JS call, timed on its own by _SubmitClock). The
    benchmark's --host-sections."""

    def __init__(self, model):
        self.seconds: dict[str, float] = {}
        graph = model.graph
        for owner, name, label in (
            (graph, "set_inputs", "set inputs"),
            (graph, "propagate_resize", "resize"),
            (graph, "record", "record"),
            (model.top_k.reducer, "prepare", "top-k prepare"),
            (graph.device, "submit", "submit"),
            (graph.device, "_submit_batch", "batch end (its JS call included)"),
        ):
            self._wrap(owner, name, label)

    def _wrap(self, owner, name, label):
        setattr(owner, name, _timed(getattr(owner, name), self.seconds, label))

    def take(self) -> dict:
        taken = dict(self.seconds)
        self.seconds.clear()
        return taken


class LoadPhases:
    """The seconds of LanguageModel.load's phases, while the context is open (each phase's
    function wrapped, then put back): the .pte's download (in the browser with its chunk
    sha256s' check where the manifest has them), its sha256 (where not), the tokenizer's
    parsing, the .pte's reading (the program and its VkGraph), the graph's setup (its ops
    made and fused), the device's request, the graph's build (its pipelines compiled, its
    buffers made and constants uploaded) and the top-k's; `take(total)` adds what is left
    of `total` (the manifest, the tokenizer's fetch) as "other". None of them calls
    another."""

    PHASES = (
        ("pywebgpu.llm.model", "_read_model_bytes", "download"),
        ("pywebgpu.llm.model", "_sha256_hex", "sha256"),
        ("pywebgpu.llm.tokenizer", "Tokenizer.from_json", "tokenizer"),
        ("pywebgpu.pte", "load_program", "pte read"),
        ("pywebgpu.pte", "Program.vulkan_graph", "pte read"),
        ("pywebgpu.runtime.graph", "GraphRuntime.__init__", "graph setup"),
        ("pywebgpu.llm.model", "request_device", "device request"),
        ("pywebgpu.runtime.graph", "GraphRuntime.build", "graph build"),
        ("pywebgpu.llm.logits_top_k", "LogitsTopK.build", "top-k build"),
    )

    def __enter__(self):
        import importlib

        self.seconds: dict[str, float] = {}
        self._originals = []
        for module_name, path, label in self.PHASES:
            owner = importlib.import_module(module_name)
            *owners, name = path.split(".")
            for part in owners:
                owner = getattr(owner, part)
            # Put back as found (a classmethod as its descriptor); wrap what a call gives.
            self._originals.append((owner, name, vars(owner)[name]))
            setattr(owner, name, _timed(getattr(owner, name), self.seconds, label))
        return self

    def __exit__(self, *exc):
        for owner, name, original in reversed(self._originals):
            setattr(owner, name, original)

    def take(self, total: float) -> dict:
        return {**self.seconds, "other": total - sum(self.seconds.values())}


def python_loop_ms() -> float:
    """The fastest of five runs of a fixed piece of pure Python (dict, list and attribute
    work, as a decode step's), in ms: how fast this interpreter runs where it runs, to set
    host times measured on different machines or in different places side by side."""

    class Part:
        def __init__(self, value):
            self.value = value

    times = []
    for _ in range(5):
        started = _now()
        table, parts = {}, [Part(i) for i in range(64)]
        for i in range(20_000):
            part = parts[i & 63]
            table[i & 255] = table.get(i & 255, 0) + part.value
            part.value = (part.value + i) & 0xFFFF
        times.append(1000 * (_now() - started))
    return min(times)


async def _step(model, tokens, position):
    """Feed `tokens` at `position`; (greedy next token, wall seconds)."""
    token, wall, _ = await _timed_step(model, tokens, position)
    return token, wall


async def _timed_step(model, tokens, position):
    """Feed `tokens` at `position`; (greedy next token, wall seconds, seconds until the
    host had submitted the work: its Python and JS, before it waits for the GPU)."""
    started = _now()
    pending = model.start_next_token_candidates(tokens, position, k=1)
    submitted = _now()
    candidates = await pending
    return candidates[0][1], _now() - started, submitted - started


def chat_sampling(temperature: float, penalty: float = 1.0) -> SamplingParams:
    """The chat demo's sampling (web/chat-worker.mjs) at `temperature`, seeded, with a
    repetition `penalty`."""
    return SamplingParams(temperature=temperature, top_k=40, top_p=0.95, repetition_penalty=penalty, seed=0)


async def _decode(
    model, first_token, position, count, clock, run_ahead=RUN_AHEAD_STEPS, temperature=0.0, penalty=1.0, window=(), block=None, sections=None
):
    """`count` decode steps from `position`, as ChatSession decodes: the steps run
    `run_ahead` (or a block) ahead of the host, submitted `block` at a time as one (None:
    as ChatSession, chat.decode_block's choice from the tokens so far; each takes its
    token on the GPU from the step before: the top 1, or with a `temperature` the token
    drawn from the top k there, chat_sampling's; a repetition `penalty` starts from the
    tokens of `window`, which ends with `first_token`). Returns (tokens, wall s for all,
    host s per submitted step, of which per step (s in submits, s in JS calls and s of the
    JS functions' own runs, or None and None), dispatches of the last step); a block's
    figures are shared out evenly over its steps. `sections` (a HostSections) is taken
    after the first call: it then holds the steps' alone."""
    sampling = chat_sampling(temperature, penalty)
    draw = Sampler(sampling).draw if temperature > 0 else lambda: None
    k = sampling.candidates_needed
    tokens, hosts, submits = [], [], []
    started = _now()
    steps = deque([model.start_next_token_candidates([first_token], position, k, penalty, window, draw())])
    if sections is not None:
        sections.take()
    submitted = 1
    first_arrival = None
    while steps or submitted < count:
        size = block or (decode_block(model, len(tokens), _now() - first_arrival) if tokens else 1)
        ahead = max(run_ahead, size) if size > 1 else run_ahead  # ChatSession keeps a block ahead
        while submitted < count and len(steps) <= ahead:  # ahead 0: each step after the last's readback
            n = min(size, count - submitted)
            draws = [draw() for _ in range(n)]
            clock.take()
            submitting = _now()
            steps.extend(model.start_next_steps(position + submitted, k, draws, penalty))
            host = _now() - submitting
            seconds, js_seconds = clock.take()
            body = clock.js_body_seconds
            hosts += [host / n] * n
            submits += [(seconds / n, None if js_seconds is None else js_seconds / n, None if body is None else body / n)] * n
            submitted += n
        tokens.append((await steps.popleft())[0][1])
        if first_arrival is None:
            first_arrival = _now()
    return tokens, _now() - started, hosts, submits, clock.dispatches


async def _gpu_ms_per_token(model, first_token, position, count, clock) -> float | None:
    """Median GPU time of `count` decode steps from `position`, from timestamp queries
    (each step then waits for its own reading: untimed otherwise); None without them."""
    if "timestamp-query" not in model.graph.device.features:
        return None
    clock.timer = model.graph.device.timer()
    try:
        token, seconds = first_token, []
        for offset in range(count):
            token, _ = await _step(model, [token], position + offset)
            seconds.append(await clock.timer.read_seconds())
    finally:
        clock.timer = None
    return 1000 * median(seconds)


async def profile_ops(model, tokens, position, repeats: int = 1) -> dict:
    """Time by op name for one program call, each op recorded `repeats` times in a row and
    submitted on its own; the times are per run of the op. With timestamp queries: GPU
    time of each op's passes ("gpu_s"). Always: wall time of submit and wait ("seconds";
    the waits add a constant per submit, so only its shares mean something). A decode
    step's ops take microseconds to a few milliseconds, and a submit alone costs the GPU a
    fixed start: repeated, that cost is spread and the ops' GPU times add up to about the
    step's. Repeating an op rewrites what it wrote (a KV-cache row at the same position,
    activations), so the program's state after it is not the call's."""
    graph, device = model.graph, model.graph.device
    timer = device.timer() if "timestamp-query" in device.features else None
    graph.set_inputs([HostTensor((1, len(tokens)), tokens, "int64"), HostTensor((1,), [position], "int64")])
    graph.propagate_resize()
    await device.synchronize()
    by_name = {}
    for op in graph.ops:
        recorder = device.record()
        for _ in range(repeats):
            op.record(recorder)
        dispatches = _dispatches(recorder) // repeats
        if not dispatches:
            continue
        started = _now()
        device.submit(recorder, timer=timer)
        await device.synchronize()
        entry = by_name.setdefault(op.name, {"ops": 0, "dispatches": 0, "seconds": 0.0})
        entry["ops"] += 1
        entry["dispatches"] += dispatches
        entry["seconds"] += (_now() - started) / repeats
        if timer is not None:
            entry["gpu_s"] = entry.get("gpu_s", 0.0) + await timer.read_seconds() / repeats
    order = "gpu_s" if timer is not None else "seconds"
    return dict(sorted(by_name.items(), key=lambda item: -item[1][order]))


class Measurement:
    """One model's benchmark, taken a round at a time: a round times each prefill length
    and decodes after each context once. bench/web/bench.mjs runs pywebgpu's rounds and the
    peer's in turn (a round each, then the next), so that both sides meet the same drift
    of a shared machine's speed; natively `load_and_measure` runs them back to back.

    Prefill of each `prefill_lengths` prefix of `prompt_tokens` (tok/s, time to first
    token); `decode_tokens` steps after a prompt of each `decode_contexts` length (tok/s,
    host ms per token), greedy or with a `temperature` sampled as the chat demo samples,
    with a repetition `penalty`, decoding `run_ahead` steps ahead of the host and
    `decode_block` steps a submission (None: as ChatSession). `finish` adds the GPU time
    per decode token (where the adapter has timestamp queries), the op profiles and the
    medians over the rounds."""

    def __init__(
        self, model, prompt_tokens, prefill_lengths, decode_contexts, decode_tokens, log=print, run_ahead=None, temperature=0.0, penalty=1.0,
        prompt_shapes="new", decode_block=None, host_sections=False,
    ):  # fmt: skip
        if decode_tokens < 2:
            raise ValueError("decoding needs at least 2 tokens per measurement (the first has no step before it)")
        needed = max(max(prefill_lengths), max(decode_contexts))
        if len(prompt_tokens) < needed:
            raise ValueError(f"the prompt has {len(prompt_tokens)} tokens, the benchmark needs {needed}")
        self.model = model
        self.prompt_tokens = prompt_tokens
        self.prefill_lengths = prefill_lengths
        self.decode_contexts = decode_contexts
        self.decode_tokens = decode_tokens
        self.log = log
        self.run_ahead = RUN_AHEAD_STEPS if run_ahead is None else run_ahead
        self.decode_block = decode_block  # None: as ChatSession
        self.temperature = temperature
        self.penalty = penalty
        if prompt_shapes not in ("new", "kept"):
            raise ValueError(f"prompt_shapes is 'new' or 'kept', not {prompt_shapes!r}")
        self.prompt_shapes = prompt_shapes
        self.clock = _SubmitClock(model.graph.device)
        # After the clock: its wrappers are then inside these, as in the host time.
        self.sections = HostSections(model) if host_sections else None
        self._sections = {context: [] for context in decode_contexts}  # per round {label: ms per token}
        self._prefill_walls = {length: [] for length in prefill_lengths}
        self._prefill_hosts = {length: [] for length in prefill_lengths}
        # Per round: tok/s, host ms, submit ms, its JS call's ms and its JS run's ms (None natively).
        self._decodes = {context: [] for context in decode_contexts}
        self._continuations = {}  # context -> the first round's [first token, decoded...]
        self._dispatches = {}
        self.result = {}

    async def start(self):
        """Warm-up (first-run costs: lazily built top-k reducer, driver caches) and the
        dispatch count of a prefill call, untimed."""
        device = self.model.graph.device
        first, _ = await _step(self.model, self.prompt_tokens[:8], 0)
        prefill_dispatches = self.clock.dispatches
        await _step(self.model, [first], 8)
        self.result = {
            "adapter": device.adapter.description,
            "backend": device.adapter.backend,
            "is_fallback_adapter": device.adapter.is_fallback,
            "features": sorted(device.features),
            "gpu_memory_bytes": device.allocated_bytes,
            "dispatches_per_prefill_call": prefill_dispatches,
            "decode_run_ahead_steps": self.run_ahead,
            # None: as ChatSession, in blocks of the model's once tokens come fast (chat.decode_block).
            "decode_block_steps": self.decode_block,
            "model_decode_block_steps": self.model.decode_block_steps,
            "decode_temperature": self.temperature,
            "decode_repetition_penalty": self.penalty,
            "prompt_shapes": self.prompt_shapes,
            "python_loop_ms": python_loop_ms(),
        }

    async def round(self, number: int):
        """One repetition of every measurement (`number` counts from 1, for the log)."""
        for length in self.prefill_lengths:
            if self.prompt_shapes == "new":
                # A prompt of a new length, as most of a chat's are: its calls' shape states go, decoding's stays.
                for start in range(0, length, self.model.max_prefill):
                    if (chunk := min(self.model.max_prefill, length - start)) > 1:
                        self.model.graph.shape_states.pop(((1, chunk), (1,)), None)
            _, wall, host = await _timed_step(self.model, self.prompt_tokens[:length], 0)
            self._prefill_walls[length].append(wall)
            self._prefill_hosts[length].append(host)
            self.log(f"pywebgpu prefill {length}: {wall:.2f} s (round {number})")
        for context in self.decode_contexts:
            # Every round decodes from the same cache state (greedy: the same tokens): the
            # prompt fed from position 0, untimed, in the same chunks each time.
            first, _ = await _step(self.model, self.prompt_tokens[:context], 0)
            window = self.prompt_tokens[:context][-PENALIZED_MAX:] + [first]  # TopK keeps the last PENALIZED_MAX
            generated, seconds, hosts, submits, dispatches = await _decode(
                self.model, first, context, self.decode_tokens, self.clock, self.run_ahead, self.temperature, self.penalty, window,
                self.decode_block, self.sections,
            )
            if self.sections is not None:
                steps = self.decode_tokens - 1
                self._sections[context].append({label: 1000 * total / steps for label, total in self.sections.take().items()})
                parts = ", ".join(f"{label} {ms:.3f}" for label, ms in self._sections[context][-1].items())
                self.log(f"pywebgpu decode @{context}: host sections, ms per token: {parts} (round {number})")
            continuation = [first] + generated
            if self._continuations.setdefault(context, continuation) != continuation and self.temperature == 0:
                raise RuntimeError(f"greedy decoding after {context} tokens gave other tokens in round {number} than in the first")
            self._dispatches[context] = dispatches  # the last step's: attention's depend on the keys
            speed = len(generated) / seconds
            js_calls = [js for _, js, _ in submits if js is not None]
            js_bodies = [body for _, _, body in submits if body is not None]
            self._decodes[context].append(
                (
                    speed,
                    1000 * median(hosts),
                    1000 * median(submit for submit, _, _ in submits),
                    1000 * median(js_calls) if js_calls else None,
                    1000 * median(js_bodies) if js_bodies else None,
                )
            )
            self.log(f"pywebgpu decode @{context}: {speed:.2f} tok/s, host {1000 * median(hosts):.2f} ms/token (round {number})")

    async def finish(self) -> dict:
        """The result: medians over the rounds, each round's figures, the GPU time per
        decode token and the op profiles."""
        model, clock, result = self.model, self.clock, self.result
        result["prefill"] = {
            str(length): {
                "tokens": length,
                "tokens_per_s": length / median(walls),
                "time_to_first_token_s": median(walls),
                "runs_s": walls,
                "runs_tokens_per_s": [length / wall for wall in walls],
                "host_s": median(self._prefill_hosts[length]),
                "host_runs_s": self._prefill_hosts[length],
            }
            for length, walls in self._prefill_walls.items()
        }
        longest = min(max(self.prefill_lengths), model.max_prefill)  # one program call
        result["prefill_profile"] = {"tokens": longest, "ops": await profile_ops(model, self.prompt_tokens[:longest], 0)}
        result["decode"] = {}
        for context, runs in self._decodes.items():
            # Timed steps from the context on: a step's GPU time does not depend on what
            # the cache holds, so the prompt is not fed again for them.
            first = self._continuations[context][0]
            gpu_ms = await _gpu_ms_per_token(model, first, context, self.decode_tokens, clock)
            if gpu_ms is not None:
                self.log(f"pywebgpu decode @{context}: GPU {gpu_ms:.2f} ms/token (timestamp queries)")
            result["decode"][str(context)] = {
                "context": context,
                "tokens": self.decode_tokens,
                "tokens_per_s": median(run[0] for run in runs),
                "host_ms_per_token": median(run[1] for run in runs),
                "submit_ms_per_token": median(run[2] for run in runs),
                "js_call_ms_per_token": median(run[3] for run in runs) if all(run[3] is not None for run in runs) else None,
                "js_body_ms_per_token": median(run[4] for run in runs) if all(run[4] is not None for run in runs) else None,
                "gpu_ms_per_token": gpu_ms,
                "dispatches_per_token": self._dispatches[context],
                # With host_sections: per section, the median over the rounds of its ms per
                # decode step (its calls' total over the steps after the first call).
                "host_sections_ms_per_token": (
                    {label: median(run.get(label, 0.0) for run in self._sections[context]) for label in self._sections[context][0]}
                    if self._sections[context] else None
                ),
                "runs_tokens_per_s": [run[0] for run in runs],
                "greedy_continuation": self._continuations[context],
            }
        result["gpu_memory_bytes"] = model.graph.device.allocated_bytes
        last = max(self.decode_contexts)
        result["decode_profile"] = await profile_ops(model, self._continuations[last][:1], last, repeats=DECODE_PROFILE_REPEATS)
        return result


async def load(manifest_location, config: dict, pte_data=None, log=print) -> Measurement:
    """Load the model (timed; "load_s" in the result), build its upgrades where it builds
    them in the background (LanguageModel.start_upgrades, as a chat does after its first
    reply; "upgrades_s": the seconds they took) and start a Measurement with `config`'s
    settings: what is measured is the model as it runs from then on."""
    from pywebgpu.llm import LanguageModel

    with LoadPhases() as phases:
        started = _now()
        model = await LanguageModel.load(manifest_location, pte_data=pte_data, kernel_set=config.get("kernel_set"), by_pieces=config.get("pte_by_pieces"))
        load_s = _now() - started
    load_phases = phases.take(load_s)
    upgrades, upgrades_s = model.start_upgrades(), None
    if upgrades is not None:
        started = _now()
        await upgrades
        upgrades_s = _now() - started
    log(
        f"pywebgpu: model loaded in {load_s:.1f} s on {model.graph.device.adapter.description} ("
        + ", ".join(f"{label} {seconds:.2f}" for label, seconds in load_phases.items())
        + " s)"
        + (f"; its upgrades built {upgrades_s:.1f} s after" if upgrades_s is not None else "")
    )
    measurement = Measurement(
        model,
        config["prompt_tokens"],
        config["prefill_lengths"],
        config["decode_contexts"],
        config["decode_tokens"],
        log,
        config.get("run_ahead"),
        config.get("temperature", 0.0),
        config.get("repetition_penalty", 1.0),
        config.get("prompt_shapes", "new"),
        config.get("decode_block"),
        config.get("host_sections", False),
    )
    await measurement.start()
    measurement.result["load_s"] = load_s
    measurement.result["load_phases_s"] = load_phases
    measurement.result["upgrades_s"] = upgrades_s
    return measurement


async def load_and_measure(manifest_location, config: dict, pte_data=None, log=print) -> dict:
    """Load the model (timed), then measure it with `config`'s settings, its rounds back
    to back."""
    measurement = await load(manifest_location, config, pte_data, log)
    for number in range(1, config["reps"] + 1):
        await measurement.round(number)
    return await measurement.finish()
