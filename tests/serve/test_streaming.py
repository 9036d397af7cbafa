"""Streaming recognition equals its whole-utterance references: incremental fbank vs
compute_fbank, carried CTC prefix beam vs ctc_prefix_beam_search, and the final text vs
recognize.py --simulate_streaming (checkpoint and final.zip), for every served kind of
model (U2++, causal Zipformer: attention_rescoring, with hotwords or an n-gram LM;
transducer: rnnt_beam_search with hotwords, rnnt_greedy_search)."""
import numpy as np
import pytest
import soundfile as sf
import torch

from tests.serve.conftest import CHUNK, SERVED, kind_of, synth_audio, write_model_dir
from wenet.bin.recognize import main as recognize_main
from wenet.dataset.fbank import FeatureConf, compute_fbank
from wenet.decode.options import DecodeOptions
from wenet.decode.context_graph import ContextGraph
from wenet.decode.ctc import ctc_prefix_beam_search
from wenet.decode.ctc_lm import LMFusion
from wenet.decode.stream_state import CtcPrefixBeamState
from wenet.inference.features import IncrementalFbank
from wenet.inference.loader import load_model_dir
from wenet.inference.streaming import StreamingRecognizer, is_streaming_model
from wenet.lm.ngram import train_kneser_ney
from wenet.serve.loading import NotServableError, load_streaming_model

# recognize.py's mode that a stream of each kind equals
MODE = {"u2pp": "attention_rescoring", "zipformer": "attention_rescoring",
        "transducer": "rnnt_beam_search"}


def _pieces(n: int, rng: np.random.Generator, largest: int):
    """Split range(n) at random points (pieces of 1 .. largest)."""
    cuts, pos = [], 0
    while pos < n:
        step = int(rng.integers(1, largest + 1))
        cuts.append((pos, min(n, pos + step)))
        pos += step
    return cuts


@pytest.mark.parametrize("conf", [FeatureConf(num_mel_bins=20),
                                  FeatureConf(num_mel_bins=80, frame_length=32.0,
                                              frame_shift=12.5)])
def test_incremental_fbank_equals_whole(conf):
    """Same frames as compute_fbank of the whole waveform, for any split of the samples.

    Every step of compute_fbank is per frame except the mel projection, one float32
    matrix product over all frames of the call, and BLAS rounds a row differently
    depending on where it falls in its blocking of the rows. So: (1) each frame is
    bit for bit compute_fbank of exactly its own samples (framing, DC removal,
    preemphasis, window, FFT, mel, log: the frame computed in a call of one frame),
    and (2) against the whole-waveform call the only difference is that product's
    rounding: a relative error of at most K * 2**-24 (K = 257 FFT bins, ~1.5e-5) in
    the energies, i.e. that much absolutely in their log.
    """
    wav = torch.from_numpy(synth_audio(1.3, 7).astype(np.float32) / 32768.0)
    kwargs = conf.fbank_kwargs(dither=0.0)
    whole = compute_fbank(wav.unsqueeze(0), 16000, **kwargs)
    rng = np.random.default_rng(0)
    for largest in (1, 97, 400, 5000):
        inc = IncrementalFbank(conf)
        got = torch.cat([inc.accept(wav[a:b]) for a, b in _pieces(wav.numel(), rng, largest)])
        assert got.shape == whole.shape
        assert (got - whole).abs().max() <= 257 * 2.0 ** -24, largest
        assert inc.pending_samples < inc.window  # nothing kept beyond the next frame
        if largest == 1:  # one frame per call: bit for bit the frame of its own samples
            for i in range(whole.size(0)):
                own = wav[i * inc.shift:i * inc.shift + inc.window].unsqueeze(0)
                assert torch.equal(got[i:i + 1], compute_fbank(own, 16000, **kwargs)), i


@pytest.mark.parametrize("skip,hotwords", [(0.999, False), (None, False), (0.999, True)])
def test_carried_prefix_beam_equals_whole(skip, hotwords):
    torch.manual_seed(3)
    logits = torch.randn(1, 57, 7) * 3
    logits[:, ::3, 0] += 8  # confident blanks, so that blank skipping happens
    logprobs = logits.log_softmax(-1)
    graph = ContextGraph([[2, 3], [5, 1, 5]], 2.0) if hotwords else None
    ref = ctc_prefix_beam_search(logprobs, torch.tensor([57]), 4, blank_skip_threshold=skip,
                                 context_graph=graph)[0]
    state = CtcPrefixBeamState(4, blank_skip_threshold=skip, context_graph=graph)
    for a, b in [(0, 5), (5, 6), (6, 30), (30, 57)]:
        state.advance(logprobs[0, a:b])
    assert state.nbest() == ref


def _recognize(d, out, checkpoint, chunk, left, *extra, mode=None):
    recognize_main(["--config", str(d / "train.yaml"), "--test_data", str(d / "data.list"),
                    "--checkpoint", str(checkpoint), "--dict", str(d / "units.txt"),
                    "--mode", mode or MODE[kind_of(d)], "--batch_size", "1", "--beam_size",
                    "5", "--ctc_weight", "0.5", "--reverse_weight", "0.3",
                    "--simulate_streaming", "--decoding_chunk_size", str(chunk),
                    "--num_decoding_left_chunks", str(left), "--result_file", str(out),
                    *extra])
    return dict((line.split(" ", 1) + [""])[:2] for line in out.read_text().splitlines())


def stream_text(loaded, pcm: bytes, options, rng, largest=3000, continuous=False,
                context_graph=None, transducer_search="beam"):
    rec = StreamingRecognizer(loaded.model, loaded.tokenizer, loaded.feature_conf, options,
                              continuous=continuous, context_graph=context_graph,
                              transducer_search=transducer_search)
    events = []
    for a, b in _pieces(len(pcm) // 2, rng, largest):
        events += rec.accept_pcm(pcm[2 * a:2 * b])
    events += rec.finish()
    finals = [e for e in events if e["type"] == "final_result"]
    return " ".join(f["nbest"][0]["sentence"] for f in finals).strip(), events


def _check_streams(model_dir, loaded, ref, options, seed, **kwargs):
    """Each test utterance streamed in random pieces gives recognize.py's text ``ref``,
    and its words (with times inside the audio) spell it."""
    rng = np.random.default_rng(seed)
    nonempty = 0
    for key, ref_text in ref.items():
        pcm, _ = sf.read(model_dir / f"{key}.wav", dtype="int16")
        text, events = stream_text(loaded, pcm.tobytes(), options, rng, **kwargs)
        assert text == ref_text, key
        assert events[-1] == {"type": "speech_end"}
        nonempty += bool(text)
        words = events[-2]["nbest"][0]["words"]
        assert " ".join(w["word"] for w in words) == text
        assert all(0 <= w["start"] < w["end"] <= len(pcm) / 16000 + 0.1 for w in words)
    assert nonempty == len(ref)


@pytest.mark.parametrize("kind,left", [("checkpoint", -1), ("final.zip", -1),
                                       ("checkpoint", 2)])
def test_stream_equals_simulate_streaming(model_dir, tmp_path, one_thread, kind, left):
    ref = _recognize(model_dir, tmp_path / "text", model_dir / "model.pt", CHUNK, left)
    loaded = load_streaming_model(str(model_dir),
                                  str(model_dir / "model.pt") if kind == "checkpoint" else None)
    assert loaded.scripted == (kind == "final.zip")
    options = DecodeOptions(chunk_size=CHUNK, num_left_chunks=left, beam_size=5,
                            ctc_weight=0.5, reverse_weight=0.3)
    _check_streams(model_dir, loaded, ref, options, 1)


def test_transducer_greedy_stream_equals_simulate_streaming(model_dir, tmp_path, one_thread):
    if kind_of(model_dir) != "transducer":
        pytest.skip("greedy search of a transducer")
    ref = _recognize(model_dir, tmp_path / "text", model_dir / "model.pt", CHUNK, -1,
                     mode="rnnt_greedy_search")
    loaded = load_streaming_model(str(model_dir))  # final.zip
    _check_streams(model_dir, loaded, ref, DecodeOptions(chunk_size=CHUNK), 4,
                   transducer_search="greedy")


def test_stream_with_hotwords_equals_simulate_streaming(model_dir, tmp_path, one_thread):
    """With a context list, as recognize.py --context_list_path (same graph, same score);
    the phrases are pieces of the unbiased results, so the bias changes something."""
    plain = _recognize(model_dir, tmp_path / "plain", model_dir / "model.pt", CHUNK, -1)
    words = sorted({w[i:i + 2] for text in plain.values() for w in text.split()
                    for i in (0, 3) if len(w) >= i + 2 and "<" not in w[i:i + 2]})
    (tmp_path / "hot.txt").write_text("\n".join(words[:3]) + "\n")
    ref = _recognize(model_dir, tmp_path / "text", model_dir / "model.pt", CHUNK, -1,
                     "--context_list_path", str(tmp_path / "hot.txt"), "--context_score", "4")
    assert ref != plain
    loaded = load_streaming_model(str(model_dir), str(model_dir / "model.pt"))
    graph = ContextGraph.from_file(str(tmp_path / "hot.txt"), loaded.tokenizer, 4.0)
    options = DecodeOptions(chunk_size=CHUNK, beam_size=5, ctc_weight=0.5,
                            reverse_weight=0.3)
    _check_streams(model_dir, loaded, ref, options, 2, context_graph=graph)


def test_stream_with_lm_equals_simulate_streaming(model_dir, tmp_path, one_thread):
    """With a word n-gram LM (CTC models), as recognize.py --lm_path with the same weights.
    The LM knows only shortened words of the plain results (each without its last or
    first letter), and only its words can be recognised: so it changes the results."""
    if kind_of(model_dir) == "transducer":
        pytest.skip("the LM is fused into CTC searches")
    plain = _recognize(model_dir, tmp_path / "plain", model_dir / "model.pt", CHUNK, -1)
    words = [w for text in plain.values() for w in text.split()]
    vocab = sorted({v for w in words if len(w) > 1 for v in (w[:-1], w[1:])})
    sentences = [vocab[i:] + vocab[:i] for i in range(len(vocab))]
    train_kneser_ney(sentences, order=2).write_arpa(str(tmp_path / "lm.arpa"))
    # results with <unk> cannot be spelled from the LM's words: then an open vocabulary
    # (unknown words scored as <unk>), weighted to change them still
    restrict = not any("<" in w for w in words)
    weight, bonus = (0.8, 0.5) if restrict else (2.0, 2.0)
    lm_flags = ["--lm_path", str(tmp_path / "lm.arpa"), "--lm_weight", str(weight),
                "--word_bonus", str(bonus)] + ([] if restrict else ["--lm_open_vocab"])
    ref = _recognize(model_dir, tmp_path / "text", model_dir / "model.pt", CHUNK, -1,
                     *lm_flags)
    assert ref != plain
    loaded = load_streaming_model(str(model_dir))  # final.zip
    fusion = LMFusion.from_arpa(str(tmp_path / "lm.arpa"), loaded.tokenizer.symbol_table,
                                weight, bonus, restrict_vocab=restrict)
    options = DecodeOptions(chunk_size=CHUNK, beam_size=5, ctc_weight=0.5,
                            reverse_weight=0.3, lm_fusion=fusion)
    _check_streams(model_dir, loaded, ref, options, 3)


@pytest.mark.parametrize("kind", SERVED)
def test_non_streaming_model_is_refused(tmp_path, kind):
    """The model says whether it streams: final.zip's exported is_streaming() and the
    checkpoint's alike; a non-streaming one is refused."""
    d = write_model_dir(tmp_path / "full", streaming=False, kind=kind)
    for checkpoint in (None, str(d / "model.pt")):
        assert load_model_dir(str(d), checkpoint=checkpoint).model.is_streaming() is False
        with pytest.raises(NotServableError, match="not a streaming model"):
            load_streaming_model(str(d), checkpoint)
    d = write_model_dir(tmp_path / "streaming", kind=kind)
    loaded = load_model_dir(str(d))
    assert loaded.scripted and loaded.model.script.is_streaming() is True


def test_an_export_without_is_streaming_goes_by_train_yaml():
    """A final.zip exported before is_streaming() was: train.yaml's keys decide."""
    class OldExport:
        pass
    assert is_streaming_model(OldExport(), {"encoder": "zipformer",
                                            "encoder_conf": {"causal": True}})
    assert not is_streaming_model(OldExport(), {"encoder": "zipformer", "encoder_conf": {}})
    assert is_streaming_model(OldExport(), {"encoder_conf": {"static_chunk_size": 8}})
    assert is_streaming_model(OldExport(), {"encoder_conf": {"use_dynamic_chunk": True}})
    assert not is_streaming_model(OldExport(), {"encoder_conf": {"causal": True}})


def test_endpoint_rules():
    """WeNet's three rules on hand-made frames of 40 ms: p(blank) 0.9 is silence."""
    from wenet.decode.stream_state import EndpointDetector, EndpointRules
    silent = torch.log(torch.tensor([[0.9, 0.1]]))
    speech = torch.log(torch.tensor([[0.5, 0.5]]))
    rules = EndpointRules(blank_prob=0.8, max_leading_silence_ms=400, trailing_silence_ms=200,
                          max_sentence_ms=2000)
    det = EndpointDetector(rules, frame_ms=40.0)
    det.update(silent.repeat(9, 1))       # 360 ms of silence, nothing decoded
    assert det.reached(False) is None
    det.update(silent)                    # 400 ms
    assert det.reached(False) == "leading_silence"
    det.reset()
    det.update(torch.cat([speech.repeat(3, 1), silent.repeat(4, 1)]))  # 160 ms after speech
    assert det.reached(True) is None
    det.update(silent)                    # 200 ms after speech
    assert det.reached(True) == "trailing_silence"
    det.reset()
    det.update(torch.cat([speech, silent]).repeat(25, 1))  # 2 s, never 200 ms of silence
    assert det.reached(True) == "max_sentence"
