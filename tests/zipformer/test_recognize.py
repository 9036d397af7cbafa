"""recognize.py with a causal Zipformer: --simulate_streaming (chunk by chunk with caches)
writes the hypotheses of the chunk-masked full forward, in every decode mode."""
from tests.tiny_experiment import tiny_config, write_data_list, write_experiment, write_tones
from tests.zipformer.test_encoder import TINY
from wenet.bin.recognize import main as recognize_main

MODES = ["ctc_greedy_search", "ctc_prefix_beam_search", "attention", "attention_rescoring"]


def _setup(d):
    keys = [f"u{i}" for i in range(5)]
    write_tones(d, keys, [0.6, 0.3, 0.45, 0.7, 0.35])
    write_data_list(d / "data.list", d, keys)
    config = tiny_config({"encoder": "zipformer", "decoder": "transformer",
                          "decoder_conf": {"linear_units": 32, "r_num_blocks": None,
                                           "dropout_rate": None},
                          "model_conf": {"reverse_weight": None},
                          "dataset_conf": {"fbank_conf": {"dither": 0.0}, "resample_conf": None,
                                           "batch_conf": {"batch_size": 1}}})
    config["encoder_conf"] = {**TINY, "causal": True}
    write_experiment(d, config, ctc=30.0)  # a sharper random CTC head: hypotheses not empty


def test_simulate_streaming_equals_chunk_masked_decoding(tmp_path, one_thread):
    _setup(tmp_path)
    texts = {}
    for name, extra in (("masked", []), ("streamed", ["--simulate_streaming"])):
        out = tmp_path / name
        recognize_main(["--config", str(tmp_path / "train.yaml"),
                        "--test_data", str(tmp_path / "data.list"), "--data_type", "raw",
                        "--checkpoint", str(tmp_path / "model.pt"),
                        "--dict", str(tmp_path / "units.txt"), "--beam_size", "3",
                        "--batch_size", "1", "--decoding_chunk_size", "2",
                        "--num_decoding_left_chunks", "2", "--modes", " ".join(MODES),
                        "--result_dir", str(out), *extra])
        texts[name] = {m: (out / m / "text").read_text().splitlines() for m in MODES}
    assert texts["streamed"] == texts["masked"]
    assert sum(len(line.split()) > 1 for line in texts["masked"]["ctc_greedy_search"]) > 0
