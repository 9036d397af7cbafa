"""recognize.py with the transducer modes on a tiny random model: batching changes nothing."""
import json
from unittest.mock import Mock

from tests.tiny_experiment import (TRANSDUCER, tiny_config, write_data_list, write_experiment,
                                   write_tones)
from wenet.bin.recognize import main as recognize_main
from wenet.decode import batch_context

MODES = ["rnnt_greedy_search", "rnnt_beam_search", "rnnt_beam_attn_rescoring"]


def test_transducer_modes_batch_independent(tmp_path, monkeypatch):
    keys = [f"u{i}" for i in range(4)]
    write_tones(tmp_path, keys, [0.6, 0.3, 0.45, 0.5])
    write_data_list(tmp_path / "data.list", tmp_path, keys)
    write_experiment(tmp_path, tiny_config(TRANSDUCER), joint=4.0, joint_blank=2.0)
    texts, greedy_counts = {}, {}
    beam_search = Mock(wraps=batch_context.rnnt_beam_search)
    monkeypatch.setattr(batch_context, "rnnt_beam_search", beam_search)
    for bs in (1, 3):
        beam_search.reset_mock()
        out = tmp_path / f"bs{bs}"
        recognize_main(["--config", str(tmp_path / "train.yaml"),
                        "--test_data", str(tmp_path / "data.list"), "--data_type", "raw",
                        "--checkpoint", str(tmp_path / "model.pt"),
                        "--dict", str(tmp_path / "units.txt"), "--beam_size", "3",
                        "--batch_size", str(bs), "--max_sym_per_frame", "2",
                        "--transducer_weight", "0.5", "--modes", " ".join(MODES),
                        "--result_dir", str(out)])
        # one beam search per batch feeds rnnt_beam_search and rnnt_beam_attn_rescoring
        assert beam_search.call_count == {1: 4, 3: 2}[bs]
        texts[bs] = {m: sorted((out / m / "text").read_text().splitlines()) for m in MODES}
        rec = json.loads((out / "rnnt_greedy_search" / "rtf").read_text())
        greedy_counts[bs] = (rec["joint_evals"], rec["encoder_frames"])
    assert texts[1] == texts[3]
    # the joint-call count does not depend on batching; a standard-blank model
    # evaluates the joint at least once on every encoder frame
    assert greedy_counts[1] == greedy_counts[3]
    assert greedy_counts[1][0] >= greedy_counts[1][1] > 0
    for m in MODES:
        assert len(texts[1][m]) == 4
    assert any(len(line.split()) > 1 for line in texts[1]["rnnt_greedy_search"])
