"""Export a trained model as TorchScript for the runtimes, and optionally a
dynamically int8-quantised copy (Linear layers) for CPU serving."""
from __future__ import annotations

import argparse
import logging
from typing import List, Optional

from wenet.export.jit import export_jit
from wenet.inference.loader import load_model_dir


def get_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--config", required=True, help="the experiment's train.yaml")
    parser.add_argument("--checkpoint", required=True, help="model state_dict (.pt)")
    parser.add_argument("--output_file", required=True, help="TorchScript zip to write")
    parser.add_argument("--output_quant_file", default=None,
                        help="also write a dynamic int8 quantised TorchScript zip here")
    return parser.parse_args(argv)


def main(argv: Optional[List[str]] = None) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    args = get_args(argv)
    model = load_model_dir("", "cpu", args.checkpoint, config=args.config,
                           need_tokenizer=False).model
    export_jit(model, args.output_file, args.output_quant_file)


if __name__ == "__main__":
    main()
