"""A seeded mutation fuzzer of the `.pte` reader and of `runtime.load`.

The corpus is the test suite's real exports (tests/pte_fixtures.py, exported on first
use into .cache/pte-exports/). Each input is one corpus file with one to three
mutations (bit flips, byte, int32 and int64 overwrites, truncation, insertion,
deletion) aimed at the file header, the program flatbuffer, the Vulkan delegate blob
or a constant. The input `(seed, i)` is always the same bytes, so a defect is replayed
from its number alone.

Parse stage: every input must parse (`load_program` and `vulkan_graph("forward")`) or
raise `PteError` with a message, and end the same way read piece by piece
(`runtime.RangedFile`, the reader run again with each range it asks for). Load stage: inputs that parse go on to
`runtime.load` on the native GPU device, where only `PteError`, `OpError` and
`GPUError` may come out. Anything else, a worker that runs past the per-input time
limit, or one that dies (it runs under an address-space limit) is a defect.

    python -m devtools.fuzz_pte --inputs 100000 --loads 1000      # the long run
    python -m devtools.fuzz_pte --replay 17                        # one input, with its traceback
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import random
import resource
import struct
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Mesa's lavapipe complains on stderr without it.
os.environ.setdefault("XDG_RUNTIME_DIR", "/tmp")
# The exports the corpus is made of (tests/pte_fixtures.py's names).
CORPUS = ("llama_4w", "q4w_linear", "q8da4w_linear", "mlp", "mlp_fp16", "mlp_inline", "dynamic")
# How often a mutation aims at each region of the file.
REGION_WEIGHTS = {"header": 2, "program": 3, "delegate": 4, "constant": 1}
PARSE_TIME_LIMIT_S = 10.0
LOAD_TIME_LIMIT_S = 120.0
PARSE_ADDRESS_LIMIT = 2 << 30
LOAD_ADDRESS_LIMIT = 32 << 30
# int32 values that flatbuffer offsets, lengths and ids go wrong with.
_INT32_EDGES = (0, 1, 2, 3, 4, 7, 8, 16, 255, 0x7FFF, 0xFFFF, 0x10000, 0x7FFFFFFF, -1, -2, -4, -0x80000000)
_INT64_EDGES = (0, 1, 8, 0xFFFFFFFF, 0x7FFFFFFFFFFFFFFF, -1, 1 << 40)
_BYTE_EDGES = (0x00, 0x01, 0x7F, 0x80, 0xFE, 0xFF)


def corpus() -> list[tuple[str, bytes]]:
    """(name, bytes) of each export, exported first where missing."""
    sys.path.insert(0, str(ROOT / "tests"))
    from pte_fixtures import CACHE_ROOT, PteExports, _cache_key

    folder = CACHE_ROOT / _cache_key()
    folder.mkdir(parents=True, exist_ok=True)
    exports = PteExports(folder)
    return [(name, exports.data(name)) for name in CORPUS]


def regions(data: bytes) -> dict[str, list[tuple[int, int]]]:
    """The [start, end) byte ranges of each region of an unmutated export."""
    from pywebgpu.pte import load_program
    from pywebgpu.pte.layout import read_file_layout
    from pywebgpu.pte.source import as_source

    layout = read_file_layout(as_source(data))
    program = load_program(data)
    delegate = program._methods["forward"].delegate
    graph = program.vulkan_graph("forward")
    constants = {(v.constant.offset, v.constant.offset + v.constant.size) for v in graph.values if getattr(v, "constant", None)}
    return {
        "header": [(0, min(len(data), 40))],
        "program": [(0, layout.program_size)],
        "delegate": [(delegate.blob_offset, delegate.blob_offset + delegate.blob_size)],
        "constant": sorted(c for c in constants if c[1] > c[0]) or [(0, len(data))],
    }


def mutate(rng: random.Random, data: bytes, spans: dict) -> tuple[bytes, list[str]]:
    """`data` with one to three mutations, and what each was."""
    buf = bytearray(data)
    done = []
    for _ in range(rng.choice((1, 1, 1, 2, 3))):
        region = rng.choices(list(REGION_WEIGHTS), weights=list(REGION_WEIGHTS.values()))[0]
        start, end = rng.choice(spans[region])
        end = min(end, len(buf))
        if end - start <= 8:
            start, end = 0, len(buf)
        at = rng.randrange(start, end - 8)
        kind = rng.choice(("bit", "bit", "byte", "int32", "int32", "int32", "int64", "truncate", "insert", "delete"))
        if kind == "bit":
            for _ in range(rng.randint(1, 4)):
                spot = rng.randrange(start, end)
                buf[spot] ^= 1 << rng.randrange(8)
        elif kind == "byte":
            buf[at] = rng.choice(_BYTE_EDGES) if rng.random() < 0.5 else rng.randrange(256)
        elif kind == "int32":
            at &= ~3
            (old,) = struct.unpack_from("<i", buf, at)
            value = rng.choice((rng.choice(_INT32_EDGES), old + rng.randint(-16, 16), rng.randrange(-(1 << 31), 1 << 31), len(buf)))
            struct.pack_into("<I", buf, at, value & 0xFFFFFFFF)
        elif kind == "int64":
            at &= ~7
            struct.pack_into("<Q", buf, at, rng.choice(_INT64_EDGES) & 0xFFFFFFFFFFFFFFFF)
        elif kind == "truncate":
            del buf[at:]
        elif kind == "insert":
            buf[at:at] = bytes(rng.randrange(256) for _ in range(rng.choice((1, 4, rng.randint(1, 64)))))
        else:
            del buf[at : at + rng.choice((1, 4, rng.randint(1, 64)))]
        done.append(f"{kind}@{at} in {region}")
        if len(buf) < 16:
            break
    return bytes(buf), done


def mutant(files, spans, seed: int, index: int) -> tuple[str, bytes, list[str]]:
    """Input `index` of the run seeded `seed`: (corpus name, bytes, mutations)."""
    rng = random.Random(f"{seed}:{index}")
    which = rng.randrange(len(files))
    name, data = files[which]
    mutated, done = mutate(rng, data, spans[which])
    return name, mutated, done


# Pieces of the RangedFile each mutant is read from too: an odd size, so that reads
# straddle pieces.
PARSE_PIECE_BYTES = 4099


def _run_without_suspending(coroutine):
    """`coroutine`'s result, run to its end here: its reads never wait, and the caller may
    be inside a running event loop (Playwright's), where asyncio.run is refused."""
    try:
        coroutine.send(None)
    except StopIteration as done:
        return done.value
    coroutine.close()
    raise AssertionError("a read of pieces held in memory waited")


def _read(data) -> str:
    """The forward method's Vulkan graph of `data` (bytes or a RangedFile) read: '' or the
    PteError's message; raises anything else the reader raises."""
    from pywebgpu.pte import PteError, load_program
    from pywebgpu.runtime import RangedFile, read_graph

    try:
        if isinstance(data, RangedFile):
            _run_without_suspending(read_graph(data))
        else:
            program = load_program(data)
            program.method("forward")
            program.vulkan_graph("forward")
    except PteError as error:
        if not str(error):
            raise AssertionError("PteError without a message") from error
        return str(error)
    return ""


def parse(data: bytes) -> str:
    """'parsed', or 'PteError'; raises anything else the reader raises, or where read piece
    by piece (runtime.RangedFile) it ends otherwise than read whole."""
    from pywebgpu.runtime import RangedFile

    async def read_piece(index: int) -> bytes:
        return data[index * PARSE_PIECE_BYTES : (index + 1) * PARSE_PIECE_BYTES]

    whole = _read(data)
    by_pieces = _read(RangedFile(len(data), read_piece, PARSE_PIECE_BYTES))
    if by_pieces != whole:
        raise AssertionError(f"read piece by piece: {by_pieces or 'parsed'!r}; read whole: {whole or 'parsed'!r}")
    return "PteError" if whole else "parsed"


async def build(device, data: bytes) -> str:
    """'built', or which typed error (PteError, OpError, GPUError) load raised; raises
    anything else load raises."""
    from pywebgpu.gpu import GPUError
    from pywebgpu.ops.registry import OpError
    from pywebgpu.pte import PteError
    from pywebgpu.runtime import load

    try:
        await load(device, data)
    except (PteError, OpError, GPUError) as error:
        if not str(error):
            raise AssertionError(f"{type(error).__name__} without a message") from error
        return next(kind for kind in (PteError, OpError, GPUError) if isinstance(error, kind)).__name__
    await device.synchronize()
    return "built"


def _worker(connection, stage: str, seed: int, address_limit: int):
    """Runs inputs sent by index and answers (outcome, detail) for each."""
    import asyncio

    files = corpus()
    spans = [regions(data) for _, data in files]
    device = None
    loop = asyncio.new_event_loop()
    if stage == "load":
        from pywebgpu.gpu import request_device

        device = loop.run_until_complete(request_device())
        for _, data in files:  # compile every kernel the corpus uses before the clock runs
            loop.run_until_complete(build(device, data))
    resource.setrlimit(resource.RLIMIT_AS, (address_limit, address_limit))
    connection.send(("ready", ""))
    while True:
        index = connection.recv()
        if index is None:
            return
        name, data, _ = mutant(files, spans, seed, index)
        try:
            outcome = parse(data) if stage == "parse" else loop.run_until_complete(build(device, data))
            connection.send((outcome, ""))
        except MemoryError:
            connection.send(("defect", f"{name}: MemoryError under the {address_limit >> 20} MiB address-space limit"))
        except BaseException as error:  # the defects this fuzzer looks for
            tail = "".join(traceback.format_exception(error)[-3:])
            connection.send(("defect", f"{name}: {type(error).__name__}: {error}\n{tail}"))


@dataclass
class Report:
    stage: str
    inputs: int = 0
    outcomes: dict = field(default_factory=dict)
    defects: list = field(default_factory=list)  # (index, what)
    seconds: float = 0.0

    def note(self, index: int, outcome: str, detail: str):
        self.inputs += 1
        self.outcomes[outcome] = self.outcomes.get(outcome, 0) + 1
        if outcome in ("defect", "hang", "crash"):
            self.defects.append((index, f"{outcome}: {detail}"))


class _Runner:
    """One worker process at a time, restarted after a hang or a crash."""

    def __init__(self, stage: str, seed: int):
        self.stage, self.seed = stage, seed
        self.limit = PARSE_TIME_LIMIT_S if stage == "parse" else LOAD_TIME_LIMIT_S
        self.address_limit = PARSE_ADDRESS_LIMIT if stage == "parse" else LOAD_ADDRESS_LIMIT
        self.process = None

    def _start(self):
        context = multiprocessing.get_context("spawn")
        self.connection, child = context.Pipe()
        self.process = context.Process(target=_worker, args=(child, self.stage, self.seed, self.address_limit), daemon=True)
        self.process.start()
        child.close()  # the worker's end only: its death then reads as EOFError here
        try:
            started = self.connection.poll(600) and self.connection.recv()[0] == "ready"
        except EOFError:
            started = False
        if not started:
            raise RuntimeError(f"the {self.stage} worker did not start")

    def run(self, index: int) -> tuple[str, str]:
        if self.process is None:
            self._start()
        self.connection.send(index)
        if self.connection.poll(self.limit):
            try:
                return self.connection.recv()
            except EOFError:
                self.process.join(self.limit)
        alive = self.process.is_alive()
        self.stop()
        if alive:
            return "hang", f"no answer in {self.limit:.0f} s"
        return "crash", f"the worker died (exit code {self.process.exitcode})"

    def stop(self):
        if self.process is not None:
            self.process.kill()
            self.process.join()
            self.process = None


def fuzz(inputs: int, loads: int, seed: int = 0, progress=None) -> list[Report]:
    """The parse stage over inputs 0..inputs-1, then the load stage over the first
    `loads` of them that parsed."""
    parse_report, parsed = Report("parse"), []
    runner = _Runner("parse", seed)
    start = time.monotonic()
    try:
        for index in range(inputs):
            outcome, detail = runner.run(index)
            parse_report.note(index, outcome, detail)
            if outcome == "parsed":
                parsed.append(index)
            if progress and (index + 1) % 1000 == 0:
                progress(parse_report)
    finally:
        runner.stop()
    parse_report.seconds = time.monotonic() - start
    load_report = Report("load")
    runner = _Runner("load", seed)
    start = time.monotonic()
    try:
        for index in parsed[:loads]:
            outcome, detail = runner.run(index)
            load_report.note(index, outcome, detail)
            if progress and load_report.inputs % 100 == 0:
                progress(load_report)
    finally:
        runner.stop()
    load_report.seconds = time.monotonic() - start
    return [parse_report, load_report]


def replay(index: int, seed: int, stage: str):
    """Runs input `index` here, raising what it raises."""
    import asyncio

    files = corpus()
    name, data, done = mutant(files, [regions(d) for _, d in files], seed, index)
    print(f"input {index}: {name}, {len(data)} bytes, {'; '.join(done)}")
    print("parse:", parse(data))
    if stage == "load":
        from pywebgpu.gpu import request_device

        async def main():
            return await build(await request_device(), data)

        print("load:", asyncio.run(main()))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--inputs", type=int, default=100_000, help="mutants through the parse stage")
    parser.add_argument("--loads", type=int, default=1000, help="of those that parse, how many go through load()")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--replay", type=int, help="run one input here, with its traceback")
    parser.add_argument("--stage", choices=("parse", "load"), default="load", help="with --replay: how far to go")
    parser.add_argument("--json", type=Path, help="write the reports here")
    args = parser.parse_args()
    if args.replay is not None:
        return replay(args.replay, args.seed, args.stage)

    def progress(report):
        print(f"{report.stage}: {report.inputs} inputs {report.outcomes}", file=sys.stderr, flush=True)

    reports = fuzz(args.inputs, args.loads, args.seed, progress)
    summary = [vars(r) for r in reports]
    if args.json:
        args.json.write_text(json.dumps(summary, indent=1))
    for report in reports:
        print(f"{report.stage}: {report.inputs} inputs in {report.seconds:.0f} s: {report.outcomes}")
        for index, what in report.defects[:20]:
            print(f"  input {index}: {what}")
    sys.exit(1 if any(r.defects for r in reports) else 0)


if __name__ == "__main__":
    main()
