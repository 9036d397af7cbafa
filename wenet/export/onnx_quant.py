"""Dynamic int8 copies of the exported graphs (``*.int8.onnx``): onnxruntime's
``quantize_dynamic``, weights int8 ahead of time, activations quantised per tensor
on the fly (uint8), so no calibration data is needed.

Quantised: ``MatMul`` (every Linear of the attention, feed-forward, CTC, decoder,
joint layers: nearly all the parameters; becomes ``MatMulInteger``), ``Gather`` with a
weight table (embeddings of the decoder and predictor) and ``LSTM`` (the LSTM
predictor, ``DynamicQuantizeLSTM``). Left in float32: ``Conv`` (the subsampling front
end and the depthwise convolutions: onnxruntime's ``ConvInteger`` roughly doubled the
int8 encoder's error on the tiny test models and has no fast CPU kernel), and
everything that is not a weight (LayerNorm, softmax, the CMVN). The metadata of
the float32 file is kept.
"""
from __future__ import annotations

import collections
import logging
import os
from typing import Dict

OP_TYPES = ("MatMul", "Gather", "LSTM")


def quantize_file(src: str, dst: str) -> Dict[str, int]:
    """Write the dynamic int8 copy of ``src`` to ``dst`` (via a temporary file, so a
    failure leaves no half-written ``dst``); returns the quantised graph's count of
    each integer op (``MatMulInteger``, ``DynamicQuantizeLSTM``...) for the log."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    tmp = f"{dst[:-len('.onnx')]}.tmp{os.getpid()}.onnx"
    try:
        quantize_dynamic(src, tmp, op_types_to_quantize=list(OP_TYPES),
                         weight_type=QuantType.QInt8)
        proto = onnx.load(tmp)
        kept = {p.key for p in proto.metadata_props}
        for prop in onnx.load(src, load_external_data=False).metadata_props:
            if prop.key not in kept:  # quantize_dynamic keeps them today; make sure
                proto.metadata_props.add(key=prop.key, value=prop.value)
        onnx.save(proto, tmp)
        os.replace(tmp, dst)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    counts = collections.Counter(n.op_type for n in proto.graph.node)
    integer_ops = {op: n for op, n in counts.items()
                   if op in ("MatMulInteger", "DynamicQuantizeLSTM", "DequantizeLinear")}
    logging.info("quantised %s -> %s (%d -> %d bytes; %s)", src, dst, os.path.getsize(src),
                 os.path.getsize(dst), ", ".join(f"{k} {v}" for k, v in sorted(integer_ops.items())))
    return integer_ops
