"""Dynamic int8 copies of the exported graphs (``*.int8.onnx``): onnxruntime's
``quantize_dynamic``, weights int8 ahead of time, activations quantised per tensor
on the fly (uint8), so no calibration data is needed.

Quantised: ``MatMul`` (every Linear of the attention, feed-forward, CTC, decoder,
joint layers: nearly all the parameters; becomes ``MatMulInteger``), ``Gather`` with a
weight table (embeddings of the decoder and predictor) and ``LSTM`` (the LSTM
predictor, ``DynamicQuantizeLSTM``). Left in float32: ``Conv`` (the subsampling front
end and the depthwise convolutions: onnxruntime's ``ConvInteger`` raised the tiny U2++
encoder's relative int8 error from 0.7 % to 1.2 % and has no fast CPU kernel), and
everything that is not a weight (LayerNorm, softmax, the CMVN). The metadata of
the float32 file is kept.

Each output channel of a weight matrix has its own scale (``per_channel``): with one
scale per matrix the U2++ model's (exp/synth_train_u2++_conformer) test WER rose from 11.69
to 12.24 % in ctc_greedy_search; per channel it is 11.63 % (prefix beam 11.15 -> 11.09,
rescoring 8.02 -> 8.02), at the same file size. Weights use 7 of their 8 bits
(``reduce_range``). onnxruntime multiplies uint8
activations by int8 weights; on x86 CPUs without VNNI (AVX2 only, e.g. the AMD EPYC
machines here) that product's pairwise sums saturate int16 when both are near full
range, so full-range weights gave wrong outputs there: on such a CPU the tiny test
models' int8 CTC argmax agreed with float32's on 86 % of frames instead of >= 90 %
(tests/export/test_onnx_models.py). A file exported on one machine runs on others, so
the range that is exact everywhere is the one written.

Measured on the main job's Zipformer (exp/synth_train_zipformer, 2.9 M parameters) over
20 speechocean762 utterances (per-tensor weights, full range, Intel Xeon): encoder.onnx
10.4 MB -> 3.5 MB, CTC argmax equal to float32's on 98.9 % of frames, encoder output
within 6.6 % relative error; the TorchScript final_quant.zip of the same model: 97.6 %
and 14 %. The test-set WERs of every model are in RESULTS.md.
"""
from __future__ import annotations

import collections
import contextlib
import logging
import os
from typing import Dict, Iterator

OP_TYPES = ("MatMul", "Gather", "LSTM")


@contextlib.contextmanager
def _quantizer_quiet() -> Iterator[None]:
    """The quantiser logs every node it skips on the root logger (INFO) and advises its
    pre-processing (WARNING; the graphs are already shape-inferred and constant-folded by
    the export): only its errors are let through while it runs."""
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)
    try:
        yield
    finally:
        root.setLevel(level)


def quantize_file(src: str, dst: str) -> Dict[str, int]:
    """Write the dynamic int8 copy of ``src`` to ``dst`` (via a temporary file, so a
    failure leaves no half-written ``dst``); returns the quantised graph's count of
    each integer op (``MatMulInteger``, ``DynamicQuantizeLSTM``...) for the log."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic

    tmp = f"{dst[:-len('.onnx')]}.tmp{os.getpid()}.onnx"
    try:
        with _quantizer_quiet():
            quantize_dynamic(src, tmp, op_types_to_quantize=list(OP_TYPES),
                             weight_type=QuantType.QInt8, reduce_range=True,
                             per_channel=True)
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
                 os.path.getsize(dst),
                 ", ".join(f"{k} {v}" for k, v in sorted(integer_ops.items())))
    return integer_ops
