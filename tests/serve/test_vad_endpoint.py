"""The vad_silence endpoint rule of continuous decoding, on each served kind of model: a
sentence ends after that much silence by the energy VAD, measured on the audio up to the
chunk just encoded, so the sentences do not depend on how the audio is split into
messages."""
import numpy as np
import pytest

from tests.serve.conftest import CHUNK, kind_of, synth_audio
from wenet.bin.serve import build_server, get_parser
from wenet.decode.options import DecodeOptions
from wenet.decode.stream_state import EndpointRules
from wenet.inference.streaming import StreamingRecognizer
from wenet.serve.loading import load_streaming_model

RATE = 16000
BURST_S, GAP_S = 0.9, 0.6


def _audio():
    """Three bursts of 0.9 s, each followed by 0.6 s of digital silence; the bursts'
    (start, end) in seconds."""
    parts, bursts, at = [], [], 0.0
    for seed in range(3):
        burst = synth_audio(BURST_S, seed)
        burst[:int(0.1 * RATE)] = 0  # synth_audio starts with 0.1 s of near-silence
        parts += [burst, np.zeros(int(GAP_S * RATE), dtype=np.int16)]
        bursts.append((at + 0.1, at + BURST_S))
        at += BURST_S + GAP_S
    return np.concatenate(parts).tobytes(), bursts


def _finals(loaded, pcm, vad_silence_ms, piece):
    rules = EndpointRules(blank_prob=1.1,  # no frame is CTC silence: only the VAD ends
                          max_leading_silence_ms=1e9, trailing_silence_ms=1e9,
                          max_sentence_ms=1e9, vad_silence_ms=vad_silence_ms)
    options = DecodeOptions(chunk_size=CHUNK, beam_size=4, endpoint=rules)
    rec = StreamingRecognizer(loaded.model, loaded.tokenizer, loaded.feature_conf, options,
                              continuous=True)
    events = []
    for a in range(0, len(pcm), 2 * piece):
        events += rec.accept_pcm(pcm[a:a + 2 * piece])
    during = [e["nbest"][0] for e in events if e["type"] == "final_result"]
    at_end = [e["nbest"][0] for e in rec.finish() if e["type"] == "final_result"]
    return during, at_end


@pytest.fixture(scope="module")
def loaded(model_dir):
    return load_streaming_model(str(model_dir))


def test_a_sentence_per_burst_whatever_the_message_size(model_dir, loaded):
    pcm, bursts = _audio()
    during, at_end = _finals(loaded, pcm, 400.0, 1600)
    # the third burst's silence (0.6 s) ends it before the stream does
    assert len(during) == 3 and all(f["sentence"] for f in during)
    assert len(at_end) == 1  # the last 0.2 s of silence (a random model may emit in it)
    chunk_s = CHUNK * 0.04
    # sentence k ends within a chunk after 0.4 s of burst k's silence, and the next
    # starts there (its words lie in its own audio)
    cut_s = [end + 0.4 for _, end in bursts]
    for k, final in enumerate(during):
        times = [t for w in final["words"] for t in (w["start"], w["end"])]
        assert max(times) <= cut_s[k] + chunk_s
        if k:
            assert min(times) >= cut_s[k - 1] - chunk_s
    if kind_of(model_dir) != "u2pp":
        return  # other message sizes: on the U2++ model (the cut does not depend on the model)
    for piece in (333, len(pcm) // 2):
        assert _finals(loaded, pcm, 400.0, piece) == (during, at_end), piece


def test_rule_off_or_longer_than_the_gaps_one_sentence(model_dir, loaded):
    if kind_of(model_dir) != "u2pp":
        pytest.skip("the rule's settings, not the model: on the U2++ model")
    pcm, _ = _audio()
    for vad_ms in (0.0, 700.0):
        during, at_end = _finals(loaded, pcm, vad_ms, 1600)
        assert during == [] and at_end[0]["sentence"]


def test_serve_option_reaches_the_rules(u2pp_dir):
    args = get_parser().parse_args(["--model_dir", str(u2pp_dir), "--chunk_size", "4",
                                    "--endpoint_vad_silence_ms", "300"])
    server = build_server(args)
    try:
        assert server.options.endpoint.vad_silence_ms == 300.0
    finally:
        server.executor.shutdown()
