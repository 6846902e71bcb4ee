"""A model file past 2 GiB in Pyodide, whose len() stops at 2**31 - 1 (wasm32): the reader
must take a file's size from the file, never from len(), or an 8B model's 5 GB .pte fails."""

from pte_fixtures import pte_exports  # noqa: F401 (fixture)

from pywebgpu import pte

PAGE_SOURCE = '''
from pywebgpu.runtime import RangedFile, read_graph

PIECE = 1 << 24


async def graph_read_by_pieces(data: bytes, size: int):
    """The Vulkan graph's value and op counts, read by pieces from a `size`-byte file that
    starts with the program `data` (zeros after it)."""

    async def read_piece(index):
        start = index * PIECE
        chunk = data[start : start + PIECE]
        return chunk + bytes(min(PIECE, size - start) - len(chunk))

    graph = await read_graph(RangedFile(size, read_piece, PIECE))
    return [len(graph.values), len(graph.chain)]
'''


def test_a_program_at_the_start_of_a_5_gib_file_reads_as_alone(python_page, pte_exports):
    data = pte_exports.data("llama_4w")
    graph = pte.load_program(data).vulkan_graph()
    python_page.load_module("big_file", PAGE_SOURCE)
    for size in (len(data), 5 * 2**30):
        assert python_page.call("big_file", "graph_read_by_pieces", data, size) == [len(graph.values), len(graph.chain)]
