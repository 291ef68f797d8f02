"""Write small `.tflite` models (with the `tflite` package's flatbuffer builders) and run them
with the TFLite interpreter (`ai-edge-litert`, an optional dependency) for comparisons.

    m = ModelBuilder()
    x = m.tensor((1, 8, 8, 3), name="x")
    w = m.tensor((4, 3, 3, 3), data=weights)
    b = m.tensor((4,), data=bias)
    y = m.tensor((1, 8, 8, 4), name="y")
    m.op("CONV_2D", [x, w, b], [y], "Conv2DOptions", Padding=0, StrideW=1, StrideH=1,
         FusedActivationFunction=1)
    buffer = m.finish([x], [y])
    (out,) = run_interpreter(buffer, [x_value])

Quantized tensors take `scale` and `zero_point` (a scalar, or a vector along `axis`).
"""

from __future__ import annotations

import numpy as np

_TYPES = {"float32": 0, "float16": 1, "int32": 2, "uint8": 3, "int64": 4, "bool": 6, "int16": 7,
          "int8": 9, "float64": 10}  # fmt: skip


class ModelBuilder:
    def __init__(self):
        import tflite  # an optional dependency

        self.tfl = tflite
        self.tensors: list[dict] = []
        self.ops: list[tuple] = []
        self.codes: list[tuple[str, str]] = []  # (builtin name, custom code)

    def tensor(self, shape, dtype="float32", data=None, name=None, scale=None, zero_point=None,
               axis=0, sparsity=None) -> int:  # fmt: skip
        """Add a tensor (a constant when `data` is given); returns its index. A sparse constant
        gives its stored values as `data` and `sparsity` = (traversal_order, block_map, levels),
        each level ("dense", size) or ("csr", segments, indices)."""
        if data is not None:
            data = np.asarray(data, dtype)
            data = data if sparsity is not None else data.reshape(shape)
        index = len(self.tensors)
        self.tensors.append(dict(shape=tuple(shape), dtype=dtype, data=data,
                                 name=name or f"t{index}", scale=scale, zero_point=zero_point,
                                 axis=axis, sparsity=sparsity))  # fmt: skip
        return index

    def op(
        self,
        name: str,
        inputs,
        outputs,
        options: str | None = None,
        custom: str = "",
        custom_options: bytes = b"",
        **fields,
    ):
        """Add operator `name` (a BuiltinOperator name, or "CUSTOM" with `custom` and its raw
        `custom_options` bytes), with its options table `options` (e.g. "Conv2DOptions")
        holding `fields`."""
        key = (name, custom)
        if key not in self.codes:
            self.codes.append(key)
        self.ops.append(
            (self.codes.index(key), list(inputs), list(outputs), options, fields, custom_options)
        )

    # -- serialization ------------------------------------------------------------------------

    def _vector(self, b, values, dtype):
        return b.CreateNumpyVector(np.asarray(values, dtype))

    def _quant(self, b, t):
        tfl = self.tfl
        scale = np.atleast_1d(np.asarray(t["scale"], np.float32))
        zp = np.atleast_1d(np.asarray(0 if t["zero_point"] is None else t["zero_point"], np.int64))
        if zp.size == 1 and scale.size > 1:
            zp = np.repeat(zp, scale.size)
        sv, zv = self._vector(b, scale, np.float32), self._vector(b, zp, np.int64)
        tfl.QuantizationParametersStart(b)
        tfl.QuantizationParametersAddScale(b, sv)
        tfl.QuantizationParametersAddZeroPoint(b, zv)
        tfl.QuantizationParametersAddQuantizedDimension(b, t["axis"])
        return tfl.QuantizationParametersEnd(b)

    def _sparsity(self, b, sparsity):
        tfl = self.tfl
        order, block_map, levels = sparsity
        level_offsets = []
        for level in levels:
            vectors = []
            if level[0] == "csr":
                for values in level[1:]:
                    v = self._vector(b, values, np.int32)
                    tfl.Int32VectorStart(b)
                    tfl.Int32VectorAddValues(b, v)
                    vectors.append(tfl.Int32VectorEnd(b))
            tfl.DimensionMetadataStart(b)
            if level[0] == "dense":
                tfl.DimensionMetadataAddFormat(b, 0)
                tfl.DimensionMetadataAddDenseSize(b, level[1])
            else:
                tfl.DimensionMetadataAddFormat(b, 1)
                tfl.DimensionMetadataAddArraySegmentsType(b, 1)  # Int32Vector
                tfl.DimensionMetadataAddArraySegments(b, vectors[0])
                tfl.DimensionMetadataAddArrayIndicesType(b, 1)
                tfl.DimensionMetadataAddArrayIndices(b, vectors[1])
            level_offsets.append(tfl.DimensionMetadataEnd(b))
        ov, bv = self._vector(b, order, np.int32), self._vector(b, block_map, np.int32)
        lv = self._table_vector(b, level_offsets)
        tfl.SparsityParametersStart(b)
        tfl.SparsityParametersAddTraversalOrder(b, ov)
        tfl.SparsityParametersAddBlockMap(b, bv)
        tfl.SparsityParametersAddDimMetadata(b, lv)
        return tfl.SparsityParametersEnd(b)

    def _options(self, b, options, fields):
        tfl = self.tfl
        vectors = {}
        for k, v in fields.items():
            if isinstance(v, (list, tuple, np.ndarray)):
                vectors[k] = self._vector(b, v, np.int32)
        getattr(tfl, f"{options}Start")(b)
        for k, v in fields.items():
            getattr(tfl, f"{options}Add{k}")(b, vectors.get(k, v))
        return getattr(tfl, f"{options}End")(b)

    def finish(self, inputs, outputs, description: str = "tessera test model") -> bytes:
        import flatbuffers

        tfl = self.tfl
        b = flatbuffers.Builder(1024)
        buffers = [None]
        tensor_offsets = []
        for t in self.tensors:
            buf_index = 0
            if t["data"] is not None:
                buffers.append(np.frombuffer(t["data"].astype(t["dtype"]).tobytes(), np.uint8))
                buf_index = len(buffers) - 1
            name = b.CreateString(t["name"])
            shape = self._vector(b, t["shape"], np.int32)
            quant = self._quant(b, t) if t["scale"] is not None else None
            sparse = self._sparsity(b, t["sparsity"]) if t["sparsity"] is not None else None
            tfl.TensorStart(b)
            tfl.TensorAddShape(b, shape)
            tfl.TensorAddType(b, _TYPES[t["dtype"]])
            tfl.TensorAddBuffer(b, buf_index)
            tfl.TensorAddName(b, name)
            if quant is not None:
                tfl.TensorAddQuantization(b, quant)
            if sparse is not None:
                tfl.TensorAddSparsity(b, sparse)
            tensor_offsets.append(tfl.TensorEnd(b))
        op_offsets = []
        for code_index, ins, outs, options, fields, custom_options in self.ops:
            opts = self._options(b, options, fields) if options else None
            iv, ov = self._vector(b, ins, np.int32), self._vector(b, outs, np.int32)
            cv = self._vector(b, np.frombuffer(custom_options, np.uint8), np.uint8)
            tfl.OperatorStart(b)
            tfl.OperatorAddOpcodeIndex(b, code_index)
            tfl.OperatorAddInputs(b, iv)
            tfl.OperatorAddOutputs(b, ov)
            if opts is not None:
                tfl.OperatorAddBuiltinOptionsType(b, getattr(tfl.BuiltinOptions, options))
                tfl.OperatorAddBuiltinOptions(b, opts)
            if custom_options:
                tfl.OperatorAddCustomOptions(b, cv)
            op_offsets.append(tfl.OperatorEnd(b))
        sub_name = b.CreateString("main")
        tv, ov = self._table_vector(b, tensor_offsets), self._table_vector(b, op_offsets)
        iv, outv = self._vector(b, inputs, np.int32), self._vector(b, outputs, np.int32)
        tfl.SubGraphStart(b)
        tfl.SubGraphAddTensors(b, tv)
        tfl.SubGraphAddInputs(b, iv)
        tfl.SubGraphAddOutputs(b, outv)
        tfl.SubGraphAddOperators(b, ov)
        tfl.SubGraphAddName(b, sub_name)
        subgraph = tfl.SubGraphEnd(b)
        code_offsets = []
        for name, custom in self.codes:
            code = getattr(tfl.BuiltinOperator, name)
            custom_offset = b.CreateString(custom) if custom else None
            tfl.OperatorCodeStart(b)
            tfl.OperatorCodeAddDeprecatedBuiltinCode(b, min(code, 127))
            tfl.OperatorCodeAddBuiltinCode(b, code)
            tfl.OperatorCodeAddVersion(b, 1)
            if custom_offset is not None:
                tfl.OperatorCodeAddCustomCode(b, custom_offset)
            code_offsets.append(tfl.OperatorCodeEnd(b))
        buffer_offsets = []
        for data in buffers:
            dv = b.CreateNumpyVector(data) if data is not None else None
            tfl.BufferStart(b)
            if dv is not None:
                tfl.BufferAddData(b, dv)
            buffer_offsets.append(tfl.BufferEnd(b))
        codes_v = self._table_vector(b, code_offsets)
        subs_v = self._table_vector(b, [subgraph])
        bufs_v = self._table_vector(b, buffer_offsets)
        desc = b.CreateString(description)
        tfl.ModelStart(b)
        tfl.ModelAddVersion(b, 3)
        tfl.ModelAddOperatorCodes(b, codes_v)
        tfl.ModelAddSubgraphs(b, subs_v)
        tfl.ModelAddDescription(b, desc)
        tfl.ModelAddBuffers(b, bufs_v)
        b.Finish(tfl.ModelEnd(b), file_identifier=b"TFL3")
        return bytes(b.Output())

    @staticmethod
    def _table_vector(b, offsets):
        b.StartVector(4, len(offsets), 4)
        for o in reversed(offsets):
            b.PrependUOffsetTRelative(o)
        return b.EndVector()


def run_interpreter(buffer: bytes, inputs) -> list[np.ndarray]:
    """Run a model with the TFLite interpreter's reference kernels (no delegates)."""
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    it = Interpreter(model_content=buffer, experimental_op_resolver_type=OpResolverType.BUILTIN_REF)
    it.allocate_tensors()
    for detail, value in zip(it.get_input_details(), inputs, strict=True):
        it.set_tensor(detail["index"], np.asarray(value, detail["dtype"]))
    it.invoke()
    return [it.get_tensor(d["index"]).copy() for d in it.get_output_details()]


def check_model(buffer: bytes, inputs, atol=1e-4, rtol=1e-4, steps=None):
    """Compare tessera (graph interpreter) with the TFLite interpreter. `steps`: for integer
    outputs, the largest difference allowed in quantization steps (default: exact)."""
    from tessera.frontend.tflite import from_tflite
    from tessera.graph import run_function

    expected = run_interpreter(buffer, inputs)
    mod, params = from_tflite(buffer)
    func = mod["main"]
    got = run_function(func, list(inputs), params)
    assert len(got) == len(expected)
    for g, e in zip(got, expected, strict=True):
        assert g.dtype == e.dtype and g.shape == e.shape, (g.dtype, g.shape, e.dtype, e.shape)
        if e.dtype.kind in "iu":
            diff = np.abs(g.astype(np.int64) - e.astype(np.int64)).max(initial=0)
            assert diff <= (steps or 0), f"{diff} quantization steps apart"
        else:
            np.testing.assert_allclose(g, e, rtol=rtol, atol=atol)
    return mod, params, got


__all__ = ["ModelBuilder", "check_model", "run_interpreter"]
