"""Rewrites of a graph's op list that cut dispatches, made before memory planning and
build. A rewrite keeps every op index: ops folded into another become no-ops that name
no values (so their intermediate tensors get no memory), and the fused op takes the
place of the last op of its pattern, where all its inputs exist.

- silu · mul: torch exports the Llama MLP's `F.silu(gate) * up` as s = sigmoid(x),
  t = mul(x, s), out = mul(t, y). Where s and t are read by nothing else, the three
  become one `SiluMul` (ops/unary.py): two dispatches fewer per layer and token.
- linear_q4gsw + add: each Llama block ends its attention and its MLP with a residual
  add of a linear's output, h = x + linear(...) (through a view: the exporter reshapes
  around 2-d linears). Where the linear's output is read by that add alone, with no
  broadcasting and alpha 1, the add moves into the linear's store
  (`LinearQ4gswResidual`, ops/linear.py, writing the add's output in the element order
  the views keep): one dispatch fewer, twice per layer.
- the MLP: gate and up projections of one x, read (through views) only by a SiluMul,
  become one linear (`LinearQ4gswConcat`), and the SiluMul's dispatch goes: three
  dispatches become two. Where the kernels for GPUs run (and only the down projection
  reads the SiluMul's output), the linear writes gate and up side by side into a new
  tensor, which the down projection reads as silu(gate) * up (X_SILU_MUL in
  ops/linear.py): a workgroup computes silu(gate) * up once for all its outputs. The
  kernels for CPU adapters would compute it in every thread for its few outputs
  (SwiftShader: the down projection 1.45x slower than a plain one with the SiluMul's own
  dispatch), so there the fused linear writes silu(gate) * up, the SiluMul's output,
  itself (`silu_mul_out`: each thread computes the gate's and the up's rows of its
  outputs; SwiftShader, SmolLM2: decode 1.03-1.06x, a 128-token prefill 1.06-1.07x).
- linears that read one x (attention's q, k and v projections): one dispatch writing
  each output to its own tensor (`LinearQ4gswConcat`, up to 3 outputs), placed at the
  first of them (their readers may come before the last): two dispatches fewer.
- rms_norm · linear: an RMSNorm whose output only a linear reads as x (a plain one, or
  one of one x above; not one that adds a residual or reads silu(gate) * up): one op
  (`RmsNormLinear`, ops/linear.py), one dispatch where the linear runs a GEMV (decode;
  on CPU adapters up to GEMV_NORM_MAX_N outputs), which applies the norm as it reads x. In a Llama block,
  both norms; and the final norm before the LM head, which f16 exports reach through a
  clone: a plain linear reading the norm's output through views that keep its rows is
  given the norm's output itself.
- RoPE tables at the position: Llama slices its cos and sin tables at rows
  [input_pos, input_pos + S) (slice_copy, then a clone) for apply_rotary_emb. Where the
  slices are read only by apply_rotary_emb ops (through views), those read the whole
  tables from the position on the GPU (`RotaryEmbAtPosition`, ops/rope.py), so that a
  decode step resizes none of them; the op takes the slices' row count as a SymInt
  (checked against its sequence length): where the slices end at start + a SymInt, as
  Llama's at input_pos + seq_len, that one, and the sum, which nothing else reads, goes
  with the slices; else the cos slice becomes the host's end - start. The sin slice and
  the clones go: two dispatches and two parameter writes fewer per token, and a decode
  step resizes only the ops reading the position (select_as_symint), no arithmetic.
- SymInt arithmetic whose result nothing reads any more is dropped (not resized).
- RoPE · attention: a RoPE op at the position whose outputs only an sdpa_with_kv_cache
  reads as q and k, with constant tables and a head dim that is a multiple of 4,
  becomes part of that op (`RopeSdpaWithKvCache`, ops/attention.py), which in decode
  steps rotates q and k as it reads them: one dispatch fewer per layer and token (on
  CPU adapters also two cache copies fewer).
"""

from __future__ import annotations

from ..values import Tensor, ValueList

# The ops are imported where used: they import runtime.values, so importing them with
# this module would be circular.


def fuse(graph) -> None:
    """Apply every rewrite to `graph.ops` (a GraphRuntime before build)."""
    _fuse_rope_tables(graph)
    _fuse_rope_attention(graph)
    _fuse_silu_mul(graph)
    _fuse_linear_residual(graph)
    _fuse_mlp(graph)
    _fuse_shared_input_linears(graph)
    _fuse_rms_norm_linear(graph)
    _fold_unread_symints(graph)


def readers(ops, values) -> dict[int, list[int]]:
    """value id → indexes of the ops whose arguments name it (directly or in a list), in
    op order."""
    found: dict[int, list[int]] = {}
    for op in ops:
        for arg in op.args:
            value = values[arg]
            for value_id in value.items if isinstance(value, ValueList) else [arg]:
                users = found.setdefault(value_id, [])
                if not users or users[-1] != op.index:
                    users.append(op.index)
    return found


def _fuse_rope_tables(graph):
    from ..ops.indexing import SliceCopy
    from ..ops.rope import ApplyRotaryEmb, RotaryEmbAtPosition
    from ..ops.symint import SymArithmetic
    from ..ops.view import ContiguousCopy
    from ..values import SymInt

    writers = {op.out.id: op for op in graph.ops if isinstance(op, (SliceCopy, ContiguousCopy))}

    def table_slice(value_id):
        """(the slice_copy whose output `value_id` is, through views; the views), or
        (None, ...) if it is no slice of rows at a start (dim 0, step 1)."""
        views, op = [], writers.get(value_id)
        while isinstance(op, ContiguousCopy):
            views.append(op)
            op = writers.get(op.src.id)
        if type(op) is not SliceCopy or op.dim != 0 or graph.values[op.args[4]] not in (None, 1):
            return None, views
        if any(graph.values[op.args[i]] is None for i in (2, 3)):
            return None, views
        return op, views

    # (cos slice, sin slice) → the RoPE ops reading them, and the views in between.
    users: dict[tuple, tuple[list, set]] = {}
    for rope in graph.ops:
        if type(rope) is not ApplyRotaryEmb:
            continue
        (cos, cos_views), (sin, sin_views) = table_slice(rope.cos.id), table_slice(rope.sin.id)
        if cos is None or sin is None or cos is sin or cos.args[2:4] != sin.args[2:4]:
            continue
        ropes, views = users.setdefault((cos, sin), ([], set()))
        ropes.append(rope)
        views.update(cos_views + sin_views)
    readers_of = readers(graph.ops, graph.values)
    outputs = {tensor.id for tensor in graph.outputs}
    sums = {op.out.id: op for op in graph.ops if type(op) is SymArithmetic and op.name == "add"}
    for (cos, sin), (ropes, views) in users.items():
        folded = {cos.index, sin.index, *(view.index for view in views)}
        fused = {rope.index for rope in ropes}
        made = [cos.out.id, sin.out.id, *(view.out.id for view in views)]
        if any(value_id in outputs or not set(readers_of.get(value_id, ())) <= folded | fused for value_id in made):
            continue  # a slice is read by something else too: left as it is
        start, end = cos.args[2:4]
        # Where the slices end at start + a SymInt (Llama: input_pos + seq_len), that one is
        # their length: no subtraction to resize at every step.
        addends = list(sums[end].args[:2]) if end in sums else []
        if start in addends:
            addends.remove(start)
        if len(addends) == 1 and type(graph.values[addends[0]]) is SymInt:
            (length_id,) = addends
            _fold(graph, cos.index, ropes[0].index)
        else:
            length_id = len(graph.values)
            graph.values.append(SymInt(length_id, 0))
            graph.ops[cos.index] = SymArithmetic(graph, cos.index, "sub", (end, start, length_id))
        for index in folded - {cos.index}:
            _fold(graph, index, ropes[0].index)
        for rope in ropes:
            args = (rope.xq.id, rope.xk.id, cos.src.id, sin.src.id, start, length_id, rope.xq_out.id, rope.xk_out.id)
            graph.ops[rope.index] = RotaryEmbAtPosition(graph, rope.index, "apply_rotary_emb at position (fused)", args)


def _fold_unread_symints(graph):
    """Host arithmetic whose SymInt nothing reads any more (the RoPE slices' end, once
    fused) becomes a no-op: else it would be resized whenever its arguments change (at
    every decode step)."""
    from ..ops.symint import SelectAsSymInt, SymArithmetic, SymSize

    readers_of = readers(graph.ops, graph.values)
    for op in reversed(graph.ops):  # readers come after writers: one pass from the end
        if isinstance(op, (SymSize, SymArithmetic, SelectAsSymInt)) and readers_of.get(op.out.id) == [op.index]:
            for arg in op.args:
                users = readers_of.get(arg)
                if users is not None and op.index in users:
                    users.remove(op.index)
            _make_no_op(graph, op.index, "unread")


def constant_aliases(ops) -> dict[int, int]:
    """tensor id → the constant whose buffer it shares (prepack's outputs)."""
    aliases = {}
    for op in ops:
        aliases.update(op.aliases())
    return aliases


def _fuse_rope_attention(graph):
    from ..ops.attention import RopeSdpaWithKvCache, SdpaWithKvCache
    from ..ops.rope import RotaryEmbAtPosition

    only_reader = _only_reader(graph)
    aliases = constant_aliases(graph.ops)
    for rope in list(graph.ops):
        if type(rope) is not RotaryEmbAtPosition:
            continue
        index = only_reader(rope.xq_out.id, rope.index)
        sdpa = graph.ops[index] if index is not None else None
        if type(sdpa) is not SdpaWithKvCache or only_reader(rope.xk_out.id, rope.index) != index:
            continue
        if sdpa.q is not rope.xq_out or sdpa.k is not rope.xk_out or sdpa.head_dim % 4:
            continue
        if any(graph.values[aliases.get(t.id, t.id)].constant is None for t in (rope.cos, rope.sin)):
            continue
        graph.ops[index] = RopeSdpaWithKvCache(graph, index, "rope + sdpa_with_kv_cache (fused)", rope, sdpa)
        _fold(graph, rope.index, index)


def _is_mul(op) -> bool:
    return op.name == "aten.mul.Tensor" and len(op.args) == 3


def _fold(graph, index: int, into: int):
    _make_no_op(graph, index, f"fused into #{into}")


def _make_no_op(graph, index: int, why: str):
    from ..ops.registry import OpHandler

    op = graph.ops[index]
    graph.ops[index] = OpHandler(graph, index, f"{op.name} ({why})", ())


def _only_reader(graph):
    """only_reader(value_id, index): the op that alone reads `value_id` (besides op
    `index`, which writes it), None if several or none do or it is a graph output."""
    readers_of = readers(graph.ops, graph.values)
    outputs = {tensor.id for tensor in graph.outputs}

    def only_reader(value_id, index):
        users = [i for i in readers_of.get(value_id, []) if i != index]
        return users[0] if len(users) == 1 and value_id not in outputs else None

    return only_reader


def _fuse_silu_mul(graph):
    from ..ops.unary import SiluMul

    only_reader = _only_reader(graph)

    for sigmoid in list(graph.ops):
        if sigmoid.name != "aten.sigmoid.default" or len(sigmoid.args) != 2:
            continue
        x, s = sigmoid.args
        first = only_reader(s, sigmoid.index)
        if first is None or not _is_mul(graph.ops[first]) or set(graph.ops[first].args[:2]) != {x, s}:
            continue
        t = graph.ops[first].args[-1]
        second = only_reader(t, first)
        if second is None or not _is_mul(graph.ops[second]):
            continue
        a, b = graph.ops[second].args[:2]
        y, out = (b if a == t else a), graph.ops[second].args[-1]
        tensors = [graph.values[v] for v in (x, y, out)]
        if t not in (a, b) or y == t or not all(isinstance(v, Tensor) for v in tensors):
            continue
        if not tensors[0].max_sizes == tensors[1].max_sizes == tensors[2].max_sizes:
            continue  # broadcasting: left to the binary kernel
        graph.ops[second] = SiluMul(graph, second, "silu_mul (fused)", (x, y, out))
        _fold(graph, sigmoid.index, second)
        _fold(graph, first, second)


def _fuse_linear_residual(graph):
    from ..ops.linear import LinearQ4gswResidual, LinearQ4gswWeightOnly

    only_reader = _only_reader(graph)
    for linear in list(graph.ops):
        if type(linear) is not LinearQ4gswWeightOnly:
            continue
        # The output, through any views (the exporter reshapes around 2-d linears).
        t, index, views = _through_views(graph, only_reader, linear.args[-1], linear.index)
        add = graph.ops[index] if index is not None else None
        if add is None or add.name != "aten.add.Tensor" or len(add.args) != 4 or t not in add.args[:2]:
            continue
        a, b, alpha, out = add.args
        residual = b if a == t else a
        if residual == t or graph.values[alpha] not in (None, 1, 1.0):
            continue
        tensors = [graph.values[v] for v in (t, residual, out)]
        if not all(isinstance(v, Tensor) for v in tensors):
            continue
        if not tensors[0].max_sizes == tensors[1].max_sizes == tensors[2].max_sizes:
            continue  # broadcasting: left to the binary kernel
        x, weights, scales, group_size, bias = linear.args[:5]
        graph.ops[index] = LinearQ4gswResidual(
            graph, index, "linear_q4gsw + add (fused)", (x, weights, scales, group_size, bias, residual, out)
        )
        for folded in (linear.index, *views):
            _fold(graph, folded, index)


def _through_views(graph, only_reader, value_id, index):
    """Follows value `value_id`, written by op `index`, through the views that alone read
    it: (the last view's output, the op that alone reads that, the views' indexes)."""
    from ..ops.view import ContiguousCopy

    views, reader = [], only_reader(value_id, index)
    while reader is not None and isinstance(graph.ops[reader], ContiguousCopy):
        views.append(reader)
        value_id = graph.ops[reader].args[-1]
        reader = only_reader(value_id, reader)
    return value_id, reader, views


def _plain_linear(op) -> bool:
    from ..ops.linear import LinearQ4gswWeightOnly

    return type(op) is LinearQ4gswWeightOnly and not op.x_silu_mul


def _fuse_mlp(graph):
    from ..ops.linear import LinearQ4gswConcat, LinearQ4gswResidual, LinearQ4gswWeightOnly
    from ..ops.unary import SiluMul

    only_reader = _only_reader(graph)
    # The plain linears that a SiluMul alone reads (through views): what it reads → the
    # linear and the views between.
    feeding = {}
    for op in graph.ops:
        if _plain_linear(op):
            value_id, reader, views = _through_views(graph, only_reader, op.args[-1], op.index)
            if reader is not None and type(graph.ops[reader]) is SiluMul:
                feeding[value_id] = (op, views)
    for silu_mul in list(graph.ops):
        if type(silu_mul) is not SiluMul:
            continue
        gate_out, up_out, out = silu_mul.args
        if gate_out not in feeding or up_out not in feeding or gate_out == up_out:
            continue
        (gate, gate_views), (up, up_views) = feeding[gate_out], feeding[up_out]
        if gate.args[0] != up.args[0] or not LinearQ4gswConcat.can_concatenate([gate, up]):
            continue
        if not gate.out.max_sizes == up.out.max_sizes == silu_mul.x.max_sizes:
            continue  # the views reshape: silu(gate) * up would be read in another order
        first, last = sorted((gate.index, up.index))
        if silu_mul.kernel_set == "cpu":
            # The fused linear writes the SiluMul's output itself.
            name = "linear_q4gsw gate|up + silu_mul (fused)"
            graph.ops[first] = LinearQ4gswConcat(graph, first, name, (gate.args[0], out), [gate, up], silu_mul_out=True)
            for index in (last, *gate_views, *up_views, silu_mul.index):
                _fold(graph, index, first)
            continue
        down_index = only_reader(out, silu_mul.index)
        down = graph.ops[down_index] if down_index is not None else None
        if type(down) not in (LinearQ4gswWeightOnly, LinearQ4gswResidual) or down.args[0] != out or down.x_silu_mul:
            continue
        sizes = (*gate.out.max_sizes[:-1], gate.n + up.n)
        both = Tensor(len(graph.values), "float32", sizes, sizes)
        graph.values.append(both)
        graph.ops[first] = LinearQ4gswConcat(graph, first, "linear_q4gsw gate|up (fused)", (gate.args[0], both.id), [gate, up])
        _fold(graph, last, first)
        for index in (*gate_views, *up_views, silu_mul.index):
            _fold(graph, index, down.index)
        name = "silu_mul + " + ("linear_q4gsw + add (fused)" if type(down) is LinearQ4gswResidual else "linear_q4gsw (fused)")
        graph.ops[down.index] = type(down)(graph, down.index, name, (both.id, *down.args[1:]), x_silu_mul=True)


def _fuse_shared_input_linears(graph):
    from ..ops.linear import LinearQ4gswConcat

    by_input: dict[int, list] = {}
    for op in graph.ops:
        if _plain_linear(op):
            by_input.setdefault(op.args[0], []).append(op)
    for linears in by_input.values():
        for start in range(0, len(linears), LinearQ4gswConcat.MAX_OUTPUTS):
            chunk = linears[start : start + LinearQ4gswConcat.MAX_OUTPUTS]
            if len(chunk) < 2 or not LinearQ4gswConcat.can_concatenate(chunk):
                continue
            first = chunk[0].index
            args = (chunk[0].args[0], *(linear.args[-1] for linear in chunk))
            graph.ops[first] = LinearQ4gswConcat(graph, first, f"linear_q4gsw x{len(chunk)} (fused)", args, chunk)
            for linear in chunk[1:]:
                _fold(graph, linear.index, first)


def _fuse_rms_norm_linear(graph):
    from ..ops.linear import LinearQ4gswConcat, LinearQ4gswWeightOnly, RmsNormLinear
    from ..ops.norm import RmsNorm

    only_reader = _only_reader(graph)
    for norm in list(graph.ops):
        if type(norm) is not RmsNorm:
            continue
        x, index, views = _through_views(graph, only_reader, norm.out.id, norm.index)
        linear = graph.ops[index] if index is not None else None
        if type(linear) not in (LinearQ4gswWeightOnly, LinearQ4gswConcat):
            continue
        if views:
            plain = type(linear) is LinearQ4gswWeightOnly and not linear.x_silu_mul
            if not plain or linear.args[0] != x or graph.values[x].max_sizes[-1] != norm.width:
                continue
            linear = LinearQ4gswWeightOnly(graph, index, linear.name, (norm.out.id, *linear.args[1:]))
            for folded in views:
                _fold(graph, folded, index)
        if linear.x is not norm.out or linear.x_silu_mul or linear.k != norm.width:
            continue
        linear_name = "linear_q4gsw" if type(linear) is LinearQ4gswWeightOnly else linear.name.removesuffix(" (fused)")
        graph.ops[index] = RmsNormLinear(graph, index, f"rms_norm + {linear_name} (fused)", norm, linear)
        _fold(graph, norm.index, index)
