"""Run .pte graphs with pywebgpu; the same code runs natively (imported) and in the page
(source sent over). Inputs/outputs travel as [shape, dtype, bytes]. Stdlib + pywebgpu only."""

import array

from pywebgpu.gpu import request_device
from pywebgpu.llm.logits_top_k import LogitsTopK
from pywebgpu.runtime import HostTensor, load

_TYPECODES = {"float32": "f", "int32": "i", "int64": "q"}
_device = None


async def _get_device():
    global _device
    if _device is None:
        _device = await request_device()
    return _device


async def use_device(limits="adapter"):
    """Run the graphs from now on on a new device with `limits` (request_device's); returns
    the device's limits."""
    global _device
    _device = await request_device(limits=limits)
    return _device.limits


def host_tensor(shape, dtype, data):
    values = array.array(_TYPECODES[dtype])
    values.frombytes(data)
    return HostTensor(tuple(shape), values, dtype)


async def run_graph(data, runs, kernel_set=None, hidden_features=(), batched=False, upgrade_before_run=None):
    """Load `data` (.pte bytes or JS ArrayBuffer) once, execute each run's inputs in turn
    (with `kernel_set`'s kernels, None for the device's own; and the device's
    `hidden_features` hidden); `batched`: the runs
    submitted as one (Device.batched_submits), each one's outputs read back by a submit
    after it in the batch; the graph's upgrades built before run `upgrade_before_run`.
    Returns {"results": per
    run [[shape, bytes], ...], "ops": the names of the ops the runtime ran (after
    fusion), "resized": per run the names of the ops it resized, "kernels": per run the
    kernels its ops ran (their `kernel` attributes), "kernel_set": the set that ran,
    "features": the device's features it ran with, "float16": the ids of the tensors held
    as float16}."""
    device = await _get_device()
    features = device.features
    device.features = features - set(hidden_features)
    try:
        graph = await load(device, data, kernel_set=kernel_set)
        results, resized, kernels = [], [], []
        for op in graph.ops:
            op.resize = _noting_resizes(op, resized)
        if batched:
            reads = []
            with device.batched_submits():
                for inputs in runs:
                    resized.append([])
                    graph.submit(*[host_tensor(*x) for x in inputs])
                    reads.append([(t.sizes, t.nbytes, device.submit(read=(t.buffer, 0, (t.nbytes + 3) & ~3))) for t in graph.outputs])
            for outputs in reads:
                results.append([[list(sizes), bytes((await pending)[:nbytes])] for sizes, nbytes, pending in outputs])
        else:
            for run, inputs in enumerate(runs):
                if run == upgrade_before_run:
                    await graph.build_upgrades()
                resized.append([])
                outputs = await graph.execute(*[host_tensor(*x) for x in inputs])
                results.append([[list(o.shape), o.values.tobytes()] for o in outputs])
                kernels.append(_kernels_run(graph))
        ran = graph.kernel_set
        ran_with = sorted(device.features)
    finally:
        device.features = features
    return {
        "results": results,
        "ops": sorted({op.name for op in graph.ops}),
        "resized": resized,
        "kernels": kernels,
        "kernel_set": ran,
        "features": ran_with,
        "float16": [value.id for value in graph.values if getattr(value, "dtype", None) == "float16"],
    }


def _kernels_run(graph) -> list:
    """The kernels the graph's ops and their parts ran last (their `kernel` attributes)."""
    parts = (part for index in range(len(graph.ops)) for part, _ in graph.shape_states.op_parts(index))
    return sorted({part.kernel for part in parts if isinstance(getattr(part, "kernel", None), str)})


async def run_graph_drawing(data, prefill, draws, k, penalty=1.0, kernel_set=None, run_ahead=2, block=1):
    """Load `data`, then decode as ChatSession does ahead of the host: the prefill (a
    run's inputs, whose tokens a repetition `penalty` starts its window with) and one
    decode step per further call, every call's token its top 1 or drawn from its top k on
    the GPU (`draws`: [temperature, top_p, u] or None per call), each step taking the last
    call's token there, submitted `block` at a time as one (Device.batched_submits),
    `run_ahead` steps submitted before the host awaits the oldest. Returns the [value,
    id] of each call's token."""
    from pywebgpu.ops.topk import Draw

    def drawing(draw):
        return None if draw is None else Draw(*draw)

    device = await _get_device()
    graph = await load(device, data, kernel_set=kernel_set)
    top_k = LogitsTopK(graph)
    await top_k.build()
    tokens, position = (host_tensor(*x) for x in prefill)
    window = list(tokens.values)
    pending = [top_k.submit(tokens, position, k=k, penalty=penalty, penalized_ids=window, draw=drawing(draws[0]))]
    drawn, at = [], tokens.shape[1]
    steps = draws[1:]
    for start in range(0, len(steps), block):
        while len(pending) > run_ahead:
            drawn.append(await pending.pop(0))
        with device.batched_submits():
            for draw in steps[start : start + block]:
                placeholder, step_position = HostTensor((1, 1), [0], "int64"), HostTensor((1,), [at], "int64")
                step = top_k.submit(placeholder, step_position, k=k, penalty=penalty, token_from_last_run=True, draw=drawing(draw))
                pending.append(step)
                at += 1
    for step in pending:
        drawn.append(await step)
    return [list(pairs[0]) for pairs in drawn]


async def draw_from_url(url, prefill, draws, k, penalty, kernel_set, block=1):
    """In the page: run_graph_drawing on the .pte at `url`."""
    import js

    response = await js.fetch(url)
    if not response.ok:
        raise RuntimeError(f"fetching {url}: HTTP {response.status}")
    return await run_graph_drawing(await response.arrayBuffer(), prefill, draws, k, penalty, kernel_set, block=block)


def _noting_resizes(op, resized):
    resize = op.resize

    def noted():
        resized[-1].append(op.name)
        resize()

    return noted


async def run_graphs_from_urls(jobs):
    """In the page: [[url, runs, kernel_set, hidden_features, batched, upgrade_before_run],
    ...] → per job run_graph's answer or {"error": "..."}. A job with a seventh item, piece
    bytes, loads the .pte from a Blob piece by piece (runtime.blob_pieces), not an ArrayBuffer."""
    import js

    from pywebgpu.runtime import blob_pieces

    answers = []
    for url, runs, kernel_set, hidden_features, batched, upgrade_before_run, *piece_bytes in jobs:
        try:
            response = await js.fetch(url)
            if not response.ok:
                raise RuntimeError(f"fetching {url}: HTTP {response.status}")
            data = blob_pieces(await response.blob(), *piece_bytes) if piece_bytes else await response.arrayBuffer()
            answers.append(await run_graph(data, runs, kernel_set, hidden_features, batched, upgrade_before_run))
        except Exception as error:  # reported per case, so one failure does not hide the rest
            answers.append({"error": f"{type(error).__name__}: {error}"})
    return answers
