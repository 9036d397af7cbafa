"""Export a trained model as an ONNX model directory (docs/onnx_format.md): the
full-context encoder, the streaming encoder step (streaming models), the CTC head, the
rescoring decoder, the transducer's projections, predictor and joiner, with metadata,
units.txt and bpe.model; --int8 adds dynamically quantised copies. See
wenet/export/onnx.py. ``--target sherpa-onnx`` writes instead the files sherpa-onnx's
loaders read (wenet/export/sherpa.py, docs/deploy.md).

    python wenet/bin/export_onnx.py --model_dir exp/synth_train_conformer --output_dir DIR
    python wenet/bin/export_onnx.py --config train.yaml --checkpoint avg_2.pt --output_dir DIR
    python wenet/bin/export_onnx.py --model_dir exp/... --target sherpa-onnx --output_dir DIR
"""
from __future__ import annotations

import argparse
import logging
import os
from typing import List, Optional

from wenet.export.onnx import GRAPH_NAMES, UNITS_NAME, copy_units, export_onnx_models
from wenet.export.sherpa import MANIFEST_NAME, export_sherpa_onnx
from wenet.inference.loader import CONFIG_NAME, SCRIPT_NAME, find_checkpoint, load_model_dir
from wenet.models.paths import resolve_bpe, resolve_units


def get_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--model_dir", help="an experiment or exported dir (train.yaml and a "
                        "checkpoint: the newest avg_*.pt, else final.pt, else the newest {N}.pt)")
    source.add_argument("--config", help="a train.yaml (with --checkpoint)")
    parser.add_argument("--checkpoint", help="model state_dict (.pt); with --model_dir it "
                        "overrides the dir's own")
    parser.add_argument("--output_dir", required=True, help="where the .onnx files go")
    parser.add_argument("--target", choices=TARGETS, default="wenet",
                        help="wenet: this toolkit's ONNX model dir (docs/onnx_format.md; "
                        "wenet.runtime, the server); sherpa-onnx: the files sherpa-onnx "
                        "loads (docs/deploy.md). One target per output dir")
    parser.add_argument("--int8", action="store_true",
                        help="also write a dynamically int8-quantised *.int8.onnx of each file")
    parser.add_argument("--chunk_size", type=int, default=16,
                        help="streaming files (encoder_chunk.onnx; sherpa-onnx: "
                        "model-streaming.onnx, encoder-streaming.onnx): output frames per chunk")
    parser.add_argument("--num_decoding_left_chunks", type=int, default=4,
                        help="streaming files: left chunks kept in the fixed-size cache")
    parser.add_argument("--units", help="units.txt to copy (default: the model dir's)")
    parser.add_argument("--bpe_model", help="sentencepiece model to copy (default: the "
                        "model dir's, if any)")
    args = parser.parse_args(argv)
    if args.config is not None and args.checkpoint is None:
        parser.error("--config needs --checkpoint")
    return args


TARGETS = ("wenet", "sherpa-onnx")


def check_output_dir(output_dir: str, target: str) -> None:
    """ValueError when ``output_dir`` holds the other target's export: the two share file
    names (encoder.onnx, decoder.onnx) with other meanings, and each export removes the
    files of its format that it did not write."""
    if not os.path.isdir(output_dir):
        return
    if target == "sherpa-onnx":
        other = [f for f in (UNITS_NAME, *(f"{n}.onnx" for n in GRAPH_NAMES))
                 if f not in ("encoder.onnx", "decoder.onnx")
                 and os.path.isfile(os.path.join(output_dir, f))]
    else:
        other = [MANIFEST_NAME] if os.path.isfile(os.path.join(output_dir, MANIFEST_NAME)) else []
    if other:
        raise ValueError(f"{output_dir} holds another target's export ({', '.join(other)}): "
                         f"export --target {target} into its own directory")


def checkpoint_of(model_dir: str) -> str:
    """The checkpoint of ``model_dir``; an error naming the dir when it has only
    final.zip (TorchScript cannot be traced into ONNX) or nothing."""
    try:
        return find_checkpoint(model_dir)
    except FileNotFoundError:
        if os.path.isfile(os.path.join(model_dir, SCRIPT_NAME)):
            raise FileNotFoundError(
                f"{model_dir}: only {SCRIPT_NAME}, no checkpoint (avg_*.pt, final.pt or "
                "{N}.pt): ONNX export traces the eager model; name one with --checkpoint"
            ) from None
        raise


def main(argv: Optional[List[str]] = None) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    args = get_args(argv)
    if args.checkpoint is not None and not os.path.isfile(args.checkpoint):
        raise FileNotFoundError(f"checkpoint {args.checkpoint} does not exist")
    if args.model_dir is not None:
        checkpoint = args.checkpoint or checkpoint_of(args.model_dir)
        config = os.path.join(args.model_dir, CONFIG_NAME)
    else:
        checkpoint, config = args.checkpoint, args.config
    if checkpoint.endswith(".zip"):
        raise ValueError(f"{checkpoint}: a TorchScript model; ONNX export traces the eager "
                         "model: name its .pt checkpoint")
    try:
        loaded = load_model_dir(args.model_dir or "", "cpu", checkpoint,
                                config=args.config, need_tokenizer=False)
    except ValueError as e:  # an unknown model type or option, a mismatched checkpoint
        if str(e).startswith((f"{config}: ", f"{checkpoint} ")):  # names its file already
            raise
        raise ValueError(f"{config} (checkpoint {checkpoint}): {e}") from e
    units = args.units or resolve_units(loaded.path, loaded.configs)
    check_output_dir(args.output_dir, args.target)
    if args.target == "sherpa-onnx":
        paths = export_sherpa_onnx(loaded.model, loaded.configs, args.output_dir, units,
                                   args.chunk_size, args.num_decoding_left_chunks, args.int8)
        logging.info("wrote %s, tokens.txt and %s", ", ".join(
            os.path.basename(p) for p in paths.values()), MANIFEST_NAME)
        return
    bpe_model = args.bpe_model or resolve_bpe(loaded.path, loaded.configs, units)
    paths = export_onnx_models(loaded.model, loaded.configs, args.output_dir, args.chunk_size,
                               args.num_decoding_left_chunks, int8=args.int8)
    copy_units(args.output_dir, units, bpe_model)
    logging.info("wrote %s", ", ".join(os.path.basename(p) for p in paths.values()))


if __name__ == "__main__":
    main()
