"""WeNet-style end-to-end speech recognition.

``wenet.load_model(model_dir)`` gives a :class:`wenet.inference.recognizer.Recognizer`::

    import wenet
    asr = wenet.load_model("exp/synth_train_zipformer")
    for r in asr.transcribe(["a.wav", "b.flac"], nbest=3, timestamps=True):
        print(r.key, r.text, r.words)

It is imported on first use, so ``import wenet`` stays light (no torch).
"""
from typing import Any, Optional

__all__ = ["load_model"]


def load_model(model_dir: str, device: str = "cpu", checkpoint: Optional[str] = None,
               **recognizer_options: Any) -> Any:
    """A ``Recognizer`` for ``model_dir`` (an exported dir with ``final.zip``, or an
    experiment dir with ``train.yaml`` + a checkpoint; see ``wenet.inference.loader``).
    ``recognizer_options``: ``options`` (``DecodeOptions``: the searches and the encoder's
    chunking), ``batch_size``, ``context_score`` (hotwords given per call),
    ``max_segment_s`` (longer audio is cut at pauses; 0: never), ``refine`` (word times: a
    ``wenet.alignment.pauses.RefineConf``, the default; None: the alignment frames' times),
    ``min_word_s`` (0.05) and ``allow_pipes`` (False: a ``cmd |`` input, which would run a
    shell command, is refused)."""
    from wenet.inference.loader import load_model_dir
    from wenet.inference.recognizer import Recognizer
    return Recognizer(load_model_dir(model_dir, device, checkpoint), **recognizer_options)
