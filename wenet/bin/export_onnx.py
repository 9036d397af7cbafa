"""Export a trained model as ONNX for CPU runtimes: a streaming encoder with
fixed-size caches (encoder.onnx, metadata in its metadata_props), the CTC head
(ctc.onnx) and the rescoring decoder (decoder.onnx). See wenet/export/onnx.py."""
from __future__ import annotations

import argparse
import logging
from typing import List, Optional


from wenet.export.onnx import export_onnx_models
from wenet.inference.loader import load_model_dir


def get_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--config", required=True, help="the experiment's train.yaml")
    parser.add_argument("--checkpoint", required=True, help="model state_dict (.pt)")
    parser.add_argument("--output_dir", required=True, help="where the .onnx files go")
    parser.add_argument("--chunk_size", type=int, default=16,
                        help="output frames per encoder chunk")
    parser.add_argument("--num_decoding_left_chunks", type=int, default=4,
                        help="left chunks kept in the (fixed-size) attention cache")
    return parser.parse_args(argv)


def main(argv: Optional[List[str]] = None) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    args = get_args(argv)
    loaded = load_model_dir("", "cpu", args.checkpoint, config=args.config, need_tokenizer=False)
    model, feat_dim = loaded.model, int(loaded.configs["input_dim"])
    paths = export_onnx_models(model, args.output_dir, feat_dim, args.chunk_size,
                               args.num_decoding_left_chunks)
    logging.info("wrote %s", ", ".join(paths.values()))


if __name__ == "__main__":
    main()
