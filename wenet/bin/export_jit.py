"""Export a trained model as TorchScript for the runtimes (GUIDE §2), and
optionally a dynamically int8-quantised copy (Linear layers) for CPU serving."""
from __future__ import annotations

import argparse
import logging
import os

import torch

from wenet.models import load_trained_model


def get_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--config", required=True, help="the experiment's train.yaml")
    parser.add_argument("--checkpoint", required=True, help="model state_dict (.pt)")
    parser.add_argument("--output_file", required=True, help="TorchScript zip to write")
    parser.add_argument("--output_quant_file", default=None,
                        help="also write a dynamic int8 quantised TorchScript zip here")
    return parser.parse_args(argv)


def script_model(model: torch.nn.Module) -> torch.jit.ScriptModule:
    """torch.jit.script of an eval-mode model (the runtime methods are @jit.export)."""
    return torch.jit.script(model.eval())


def quantize_model(model: torch.nn.Module) -> torch.nn.Module:
    """Dynamic int8 quantisation of the Linear layers (weights int8, activations float)."""
    return torch.ao.quantization.quantize_dynamic(model, {torch.nn.Linear}, dtype=torch.qint8)


def save_scripted(script: torch.jit.ScriptModule, path: str) -> None:
    """Save through a temporary name so a failed export leaves no half-written zip."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = f"{path}.tmp"
    script.save(tmp)
    os.replace(tmp, path)


def main(argv=None) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    args = get_args(argv)
    model = load_trained_model(args.config, args.checkpoint)
    num_params = sum(p.numel() for p in model.parameters())
    save_scripted(script_model(model), args.output_file)
    logging.info("exported %s (%.2f M parameters)", args.output_file, num_params / 1e6)
    if args.output_quant_file:
        save_scripted(script_model(quantize_model(model)), args.output_quant_file)
        logging.info("exported int8 model %s", args.output_quant_file)


if __name__ == "__main__":
    main()
