#!/usr/bin/env python3
"""Write EXP_DIR/RESULTS.md: the model, WER and RTF per decoding mode, the loss plot.

Reads EXP_DIR/train.yaml and {N}.yaml, and for each test set EXP_DIR/SET/<mode>/wer
(compute-wer.py's ``Overall ->`` line) and EXP_DIR/SET/<mode>/rtf (recognize.py).
Prints the WER/RTF table(s) to stdout. A requested mode without a ``wer`` file is
an error naming the file.

    python tools/summarize_results.py --exp_dir exp/synth_train_zipformer --test_set test \\
        --modes "ctc_greedy_search attention_rescoring" [--checkpoint .../avg_5.pt]
"""
from __future__ import annotations

import argparse
import logging
import math
import os
import sys
from typing import Dict, List, Optional, Sequence

from wenet.utils.file_utils import atomic_write_text
from wenet.eval.results import (collect_scores, count_parameters, format_duration,
                                 read_epoch_infos, results_table, training_wall_time)

RTF_NOTE = ("RTF of a mode = (encoder time + that mode's search time) / audio seconds: the "
            "encoder pass, shared by all modes, and any search work a mode shares with another "
            "(the CTC prefix beam of attention_rescoring) count in full for each, so each figure "
            "is what decoding that mode alone costs (recognize.py; features and data loading "
            "not counted).")


def model_section(exp_dir: str, config_name: str, checkpoint: Optional[str]) -> List[str]:
    """Markdown bullet lines describing the trained model."""
    lines = [f"- config: `{config_name}`"]
    train_yaml = os.path.join(exp_dir, "train.yaml")
    if os.path.exists(train_yaml):
        params = count_parameters(train_yaml, checkpoint)
        where = f" (checkpoint `{checkpoint}`)" if checkpoint else " (from train.yaml)"
        lines.append(f"- parameters: {params:,} ({params / 1e6:.2f} M){where}")
    else:
        logging.warning("%s missing: parameter count left out", train_yaml)
    infos = read_epoch_infos(exp_dir)
    if infos:
        cv = [(float(i["cv_loss"]), int(i["epoch"])) for i in infos
              if i.get("cv_loss") is not None and math.isfinite(float(i["cv_loss"]))]
        line = f"- epochs trained: {len(infos)} (last epoch {int(infos[-1]['epoch'])}"
        if cv:
            best = min(cv)
            line += f"; best cv_loss {best[0]:.4f} at epoch {best[1]}"
        lines.append(line + ")")
        wall = training_wall_time(infos)
        if wall is not None:
            lines.append(f"- training wall time: {format_duration(wall)} from the end of the first "
                         f"to the end of the last epoch ({len(infos) - 1} epochs, "
                         f"{format_duration(wall / (len(infos) - 1))} each; save_time stamps, "
                         "pauses between resumed runs included)")
    else:
        lines.append("- epochs trained: none found ({N}.yaml)")
    return lines


def build_report(exp_dir: str, test_sets: Sequence[str], modes: Sequence[str], config_name: str,
                 checkpoint: Optional[str], plot: str,
                 cer_sets: Sequence[str] = ()) -> Dict[str, str]:
    """{"markdown": whole RESULTS.md, "tables": the per-set tables as printed}; the sets in
    ``cer_sets`` were scored in characters and their column says CER."""
    tables = []
    for test_set in test_sets:
        rows = collect_scores(exp_dir, test_set, modes)
        metric = "CER" if test_set in cer_sets else "WER"
        tables.append(f"### {test_set}\n\n{results_table(rows, metric)}")
    md = [f"# Results: {os.path.basename(os.path.normpath(exp_dir))}", "", "## Model", ""]
    md += model_section(exp_dir, config_name, checkpoint)
    md += ["", "## Error rate and RTF per decoding mode", "", RTF_NOTE, ""]
    md += [t for t in tables]
    if plot:
        md += ["## Loss per epoch", "", f"![loss]({plot})", ""]
    return {"markdown": "\n".join(md), "tables": "\n".join(tables)}


def main(argv: Optional[List[str]] = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--exp_dir", required=True)
    p.add_argument("--test_set", required=True, help="test set name(s), space-separated")
    p.add_argument("--modes", required=True, help="decoding modes, space-separated")
    p.add_argument("--cer_sets", default="",
                   help="test sets scored in characters (compute-wer.py --char=1), space-separated")
    p.add_argument("--out", default=None, help="markdown to write (default EXP_DIR/RESULTS.md)")
    p.add_argument("--config_name", default=None, help="config shown (default EXP_DIR's name)")
    p.add_argument("--checkpoint", default=None, help="the decoded checkpoint (parameter count)")
    p.add_argument("--plot", default="loss.png",
                   help="loss plot, relative to the markdown file ('' to leave it out)")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    out = args.out or os.path.join(args.exp_dir, "RESULTS.md")
    plot = args.plot
    if plot and not os.path.exists(os.path.join(os.path.dirname(os.path.abspath(out)), plot)):
        logging.warning("%s not found next to %s: run tools/plot_losses.py first", plot, out)
    try:
        report = build_report(args.exp_dir, args.test_set.split(), args.modes.split(),
                              args.config_name or os.path.basename(os.path.normpath(args.exp_dir)),
                              args.checkpoint, plot, args.cer_sets.split())
    except (FileNotFoundError, ValueError) as e:
        sys.exit(f"{os.path.basename(sys.argv[0])}: {e}")
    atomic_write_text(out, report["markdown"])
    print(report["tables"], end="")
    logging.info("wrote %s", out)


if __name__ == "__main__":
    main()
