"""The runtime's face stays transcribe.py's: its search flags and defaults are
DecodeOptions' and transcribe.py's, every registered mode is either run or refused with
a reason; inputs are listed as transcribe.py lists them; the model's metadata is checked."""
import io
import os

import pytest

from wenet.bin.transcribe import get_parser as transcribe_parser
from wenet.decode import MODES as TORCH_MODES
from wenet.decode import DecodeOptions
from wenet.runtime.__main__ import get_parser
from wenet.runtime.audio import audio_inputs
from wenet.runtime.recognizer import MODES, UNSUPPORTED, SearchOptions
from wenet.runtime.session import ModelInfo


def test_search_defaults_are_decode_options():
    ours, ref = SearchOptions(), DecodeOptions()
    for field in ("beam_size", "ctc_weight", "transducer_weight", "reverse_weight",
                  "blank_skip_threshold", "max_sym_per_frame", "context_graph",
                  "rnnt_length_norm", "lm_fusion"):
        assert getattr(ours, field) == getattr(ref, field), field


def test_flags_and_defaults_are_transcribes():
    ours = vars(get_parser().parse_args(["--onnx_dir", "d", "a.wav"]))
    ref = vars(transcribe_parser().parse_args(["--model_dir", "d", "a.wav"]))
    shared = {"beam_size", "ctc_weight", "reverse_weight", "transducer_weight",
              "blank_skip_threshold", "max_sym_per_frame", "context_list_path",
              "context_score", "lm_path", "lm_weight", "word_bonus", "lm_open_vocab",
              "batch_size", "output", "keep_going", "audio", "max_segment_s"}
    assert {k: ours[k] for k in shared} == {k: ref[k] for k in shared}


def test_every_mode_is_run_or_refused_with_a_reason():
    assert set(MODES) | set(UNSUPPORTED) == set(TORCH_MODES)
    assert not set(MODES) & set(UNSUPPORTED)


def test_inputs_are_listed_as_wav_scp_dirs_and_files(tmp_path):
    for name in ("b.wav", "a.flac", "notes.txt"):
        (tmp_path / "dir" / name).parent.mkdir(exist_ok=True)
        (tmp_path / "dir" / name).write_bytes(b"")
    scp = tmp_path / "wav.scp"
    (tmp_path / "c.wav").write_bytes(b"")
    scp.write_text(f"k1 {tmp_path}/x.wav\nk2 cat {tmp_path}/y.wav |\n\n{tmp_path}/c.wav\n")
    args = [str(tmp_path / "dir"), str(scp), "-"]
    stdin = f"k3 {tmp_path}/z.wav\n"
    ours = audio_inputs(args, io.StringIO(stdin))
    assert ours == [("a", f"{tmp_path}/dir/a.flac"), ("b", f"{tmp_path}/dir/b.wav"),
                    ("k1", f"{tmp_path}/x.wav"), ("k2", f"cat {tmp_path}/y.wav |"),
                    ("c", f"{tmp_path}/c.wav"), ("k3", f"{tmp_path}/z.wav")]
    with pytest.raises(ValueError, match="two inputs have the key 'b'"):
        audio_inputs([str(tmp_path / "dir" / "b.wav"), str(tmp_path / "dir" / "b.wav")])
    with pytest.raises(FileNotFoundError, match="no such file or directory"):
        audio_inputs([os.path.join(str(tmp_path), "missing.scp")])


META = {"wenet_onnx_version": "1", "model_type": "ctc_attention", "vocab_size": "8",
        "blank_id": "0", "sos_symbol": "7", "eos_symbol": "7", "subsampling_rate": "4",
        "right_context": "6", "has_ctc": "1", "has_decoder": "1",
        "is_bidirectional_decoder": "0", "sample_rate": "8000", "num_mel_bins": "40",
        "frame_length": "25", "frame_shift": "10"}


def test_metadata_is_read_and_checked():
    info = ModelInfo.from_metadata(META, "enc.onnx")
    assert (info.features.sample_rate, info.features.num_mel_bins) == (8000, 40)
    assert info.min_input_frames == 7  # right_context + 1 without the key
    assert ModelInfo.from_metadata({**META, "min_input_frames": "9"}, "e").min_input_frames == 9
    with pytest.raises(ValueError, match="enc.onnx: wenet_onnx_version '2'"):
        ModelInfo.from_metadata({**META, "wenet_onnx_version": "2"}, "enc.onnx")
    with pytest.raises(ValueError, match="enc.onnx: metadata key 'num_mel_bins' missing"):
        ModelInfo.from_metadata({k: v for k, v in META.items() if k != "num_mel_bins"},
                                "enc.onnx")
    rnnt = ModelInfo.from_metadata({**META, "model_type": "transducer",
                                    "predictor_state_dtypes": "int64",
                                    "predictor_state_shapes": "N,1",
                                    "big_blank_ids": "8,9", "big_blank_durations": "2,4"}, "e")
    assert rnnt.predictor_states == (("int64", ("N", "1")),)
    assert (rnnt.big_blank_ids, rnnt.big_blank_durations) == ((8, 9), (2, 4))


def test_hotwords_and_an_lm_together_are_refused_as_by_decode_options():
    from wenet.decode.context_graph import ContextGraph
    from wenet.decode.ctc_lm import LMFusion
    from wenet.lm.ngram import train_kneser_ney
    fusion = LMFusion(train_kneser_ney([["a"]], 1), ["<blank>", "\u2581a"])
    with pytest.raises(ValueError, match="hotword biasing and an n-gram LM together"):
        SearchOptions(context_graph=ContextGraph([[1]], 1.0), lm_fusion=fusion)
