"""The Program's execution plans: each method's signature, constant value and delegate call."""

from __future__ import annotations

from dataclasses import dataclass

from ._generated.executorch_flatbuffer.Bool import Bool as _FbBool
from ._generated.executorch_flatbuffer.DelegateCall import DelegateCall as _FbDelegateCall
from ._generated.executorch_flatbuffer.Double import Double as _FbDouble
from ._generated.executorch_flatbuffer.InstructionArguments import (
    InstructionArguments as _FbInstructionKind,
)
from ._generated.executorch_flatbuffer.Int import Int as _FbInt
from ._generated.executorch_flatbuffer.KernelTypes import KernelTypes as _FbEValueKind
from ._generated.executorch_flatbuffer.ScalarType import ScalarType as _FbScalarType
from ._generated.executorch_flatbuffer.Tensor import Tensor as _FbTensor
from ._generated.executorch_flatbuffer.TensorShapeDynamism import (
    TensorShapeDynamism as _FbShapeDynamism,
)
from .flatbuffer import Flatbuffer, enum_names
from .layout import DelegateBlobs
from .types import EValueSpec, MethodInfo

# ExecuTorch ScalarType -> torch dtype name.
_PROGRAM_DTYPES = {
    _FbScalarType.BYTE: "uint8",
    _FbScalarType.CHAR: "int8",
    _FbScalarType.SHORT: "int16",
    _FbScalarType.INT: "int32",
    _FbScalarType.LONG: "int64",
    _FbScalarType.HALF: "float16",
    _FbScalarType.FLOAT: "float32",
    _FbScalarType.DOUBLE: "float64",
    _FbScalarType.BOOL: "bool",
    _FbScalarType.QINT8: "qint8",
    _FbScalarType.QUINT8: "quint8",
    _FbScalarType.QINT32: "qint32",
    _FbScalarType.BFLOAT16: "bfloat16",
    _FbScalarType.QUINT4X2: "quint4x2",
    _FbScalarType.QUINT2X4: "quint2x4",
    _FbScalarType.BITS16: "bits16",
    _FbScalarType.FLOAT8E5M2: "float8_e5m2",
    _FbScalarType.FLOAT8E4M3FN: "float8_e4m3fn",
    _FbScalarType.FLOAT8E5M2FNUZ: "float8_e5m2fnuz",
    _FbScalarType.FLOAT8E4M3FNUZ: "float8_e4m3fnuz",
    _FbScalarType.UINT16: "uint16",
    _FbScalarType.UINT32: "uint32",
    _FbScalarType.UINT64: "uint64",
}

_SHAPE_DYNAMISM = {
    _FbShapeDynamism.STATIC: "static",
    _FbShapeDynamism.DYNAMIC_BOUND: "dynamic_bound",
    _FbShapeDynamism.DYNAMIC_UNBOUND: "dynamic_unbound",
}

_EVALUE_KINDS = {
    _FbEValueKind.Null: "null",
    _FbEValueKind.Int: "int",
    _FbEValueKind.Bool: "bool",
    _FbEValueKind.Double: "double",
    _FbEValueKind.Tensor: "tensor",
    _FbEValueKind.String: "string",
    _FbEValueKind.IntList: "int_list",
    _FbEValueKind.DoubleList: "double_list",
    _FbEValueKind.BoolList: "bool_list",
    _FbEValueKind.TensorList: "tensor_list",
    _FbEValueKind.OptionalTensorList: "optional_tensor_list",
}

_INSTRUCTION_KINDS = enum_names(_FbInstructionKind)


@dataclass(frozen=True)
class Delegate:
    """A backend delegate of a method: which backend, its blob's bytes, its options."""

    backend_id: str
    blob_offset: int  # absolute
    blob_size: int
    compile_specs: dict[str, bytes]


@dataclass(frozen=True)
class Method:
    """One execution plan, decoded as far as the reader needs it."""

    info: MethodInfo
    # The value a constant method (no inputs, no instructions, one int/double/bool
    # output) returns; None for other methods.
    constant_value: int | float | bool | None
    # The delegate of the method's only instruction when that is a delegate call, else None.
    delegate: Delegate | None
    delegate_args: tuple[int, ...]  # the delegate call's method-value ids: inputs, then outputs
    input_value_ids: tuple[int, ...]  # the method's inputs and outputs, as method-value ids
    output_value_ids: tuple[int, ...]
    instructions_summary: str  # what the instructions are, for error messages


def read_method(fb: Flatbuffer, program, plan_index: int, blobs: DelegateBlobs) -> Method:
    """Execution plan `plan_index` of the program, with its values and delegates checked."""
    where = f"execution plan {plan_index}"
    with fb.reading(where):
        plan = fb.table(program.ExecutionPlan(plan_index), where)
        name = fb.required_string(plan.Name, f"{where} name")
    where = f"method {name!r}"
    value_count = fb.vector(plan.ValuesLength, plan.Values, f"{where} values")
    specs = []
    scalars = []
    for value_id in range(value_count):
        spec, scalar = _read_evalue(fb, plan, value_id, f"{where} value {value_id}")
        specs.append(spec)
        scalars.append(scalar)

    input_ids = fb.value_ids(plan.InputsLength, plan.Inputs, f"{where} inputs", value_count)
    output_ids = fb.value_ids(plan.OutputsLength, plan.Outputs, f"{where} outputs", value_count)
    info = MethodInfo(
        name=name,
        inputs=tuple(specs[i] for i in input_ids),
        outputs=tuple(specs[i] for i in output_ids),
    )

    delegate_count = fb.vector(plan.DelegatesLength, plan.Delegates, f"{where} delegates")
    delegates = [
        _read_delegate(fb, plan, index, blobs, f"{where} delegate {index}")
        for index in range(delegate_count)
    ]

    instructions = _read_instructions(fb, plan, where)
    constant_value = None
    if not input_ids and not instructions and len(output_ids) == 1:
        constant_value = scalars[output_ids[0]]

    delegate, arg_ids = None, ()
    if len(instructions) == 1 and instructions[0].kind == "DelegateCall":
        (instruction,) = instructions
        what = instruction.what
        with fb.reading(what):
            call = fb.union_table("DelegateCall", instruction.arguments, _FbDelegateCall, what)
            delegate_index = call.DelegateIndex()
        if not 0 <= delegate_index < delegate_count:
            raise fb.error(
                what, f"delegate index {delegate_index} is out of range ({delegate_count} delegates)"
            )
        delegate = delegates[delegate_index]
        arg_ids = fb.value_ids(call.ArgsLength, call.Args, f"{what} args", value_count)
    kinds = ", ".join(instruction.kind for instruction in instructions)
    summary = f"{len(instructions)} instructions ({kinds})" if instructions else "no instructions"
    return Method(info, constant_value, delegate, tuple(arg_ids), tuple(input_ids), tuple(output_ids), summary)


@dataclass(frozen=True)
class _Instruction:
    kind: str  # an InstructionArguments name: "KernelCall", "DelegateCall", ...
    arguments: object  # the flatbuffers Table of the union member
    what: str  # where it is, for error messages


def _read_instructions(fb: Flatbuffer, plan, where: str) -> list[_Instruction]:
    instructions = []
    chain_count = fb.vector(plan.ChainsLength, plan.Chains, f"{where} chains")
    for chain_index in range(chain_count):
        what = f"{where} chain {chain_index}"
        with fb.reading(what):
            chain = fb.table(plan.Chains(chain_index), what)
        count = fb.vector(chain.InstructionsLength, chain.Instructions, f"{what} instructions")
        for index in range(count):
            what = f"{where} chain {chain_index} instruction {index}"
            with fb.reading(what):
                instruction = fb.table(chain.Instructions(index), what)
                kind, arguments = instruction.InstrArgsType(), instruction.InstrArgs()
            if kind not in _INSTRUCTION_KINDS or kind == _FbInstructionKind.NONE:
                raise fb.error(what, f"unknown instruction kind {kind}")
            instructions.append(_Instruction(_INSTRUCTION_KINDS[kind], arguments, what))
    return instructions


# Program value kinds holding a scalar: kind -> (generated table class, accessor).
_PROGRAM_SCALARS = {
    _FbEValueKind.Int: (_FbInt, _FbInt.IntVal),
    _FbEValueKind.Double: (_FbDouble, _FbDouble.DoubleVal),
    _FbEValueKind.Bool: (_FbBool, _FbBool.BoolVal),
}


def _read_evalue(fb: Flatbuffer, plan, value_id: int, what: str):
    """(EValueSpec, scalar) of a program value; scalar is the int/double/bool it holds."""
    with fb.reading(what):
        evalue = fb.table(plan.Values(value_id), what)
        kind = evalue.ValType()
        if kind not in _EVALUE_KINDS:
            raise fb.error(what, f"unknown value kind {kind}")
        kind_name = _EVALUE_KINDS[kind]
        if kind == _FbEValueKind.Tensor:
            tensor = fb.union_table(kind_name, evalue.Val(), _FbTensor, what)
            scalar_type = tensor.ScalarType()
            if scalar_type not in _PROGRAM_DTYPES:
                raise fb.error(what, f"unknown tensor scalar type {scalar_type}")
            dynamism = tensor.ShapeDynamism()
            if dynamism not in _SHAPE_DYNAMISM:
                raise fb.error(what, f"unknown shape dynamism {dynamism}")
            sizes = fb.tensor_dims(tensor.SizesLength, tensor.Sizes, f"{what} sizes", what)
            if any(size < 0 for size in sizes):
                raise fb.error(what, f"negative tensor size in {list(sizes)}")
            spec = EValueSpec(kind_name, _PROGRAM_DTYPES[scalar_type], sizes, _SHAPE_DYNAMISM[dynamism])
            return spec, None
        if kind not in _PROGRAM_SCALARS:
            return EValueSpec(kind_name), None
        table_class, read_scalar = _PROGRAM_SCALARS[kind]
        return EValueSpec(kind_name), read_scalar(fb.union_table(kind_name, evalue.Val(), table_class, what))


def _read_delegate(fb: Flatbuffer, plan, index: int, blobs: DelegateBlobs, what: str) -> Delegate:
    with fb.reading(what):
        delegate = fb.table(plan.Delegates(index), what)
        backend_id = fb.required_string(delegate.Id, f"{what} id")
        reference = delegate.Processed()
    if reference is None:
        raise fb.error(what, "missing processed data reference")
    blob_offset, blob_size = blobs.span(reference, f"{what} ({backend_id}) processed")
    compile_specs = {}
    count = fb.vector(delegate.CompileSpecsLength, delegate.CompileSpecs, f"{what} compile_specs")
    for spec_index in range(count):
        spec_what = f"{what} compile_spec {spec_index}"
        with fb.reading(spec_what):
            spec = fb.table(delegate.CompileSpecs(spec_index), spec_what)
            key = fb.required_string(spec.Key, f"{spec_what} key")
            value = bytes(fb.ints(spec.ValueLength, spec.Value, f"{spec_what} value"))
        compile_specs[key] = value
    return Delegate(backend_id, blob_offset, blob_size, compile_specs)
