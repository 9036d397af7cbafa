"""Voice activity from the audio's energy: where the pauses are, for cutting long
recordings (:mod:`wenet.inference.long_audio`) and for ending sentences of a stream
(the ``vad_silence`` endpoint rule of :class:`wenet.inference.streaming.StreamingRecognizer`).

The measure is the one word-boundary refinement uses (``wenet/alignment/pauses.py``):
the energy of 10 ms windows with their mean removed, compared with the noise floor, a
low percentile of the window energies. A window is speech when it is more than
``margin_db`` above the floor; a pause is a run of non-speech windows of at least
``min_pause_s`` (0.2 s by default: longer than the closure of a stop consonant or the
breath between two words spoken together, shorter than the pause between sentences).
The floor is relative, so the VAD works at any recording level and noise level that
leaves speech ``margin_db`` above the noise; it is measured over the audio given
(a segment's window, or the last ``history_s`` of a stream), so memory stays bounded.

Why our own and not a neural VAD: the silero-vad 6.2.3 wheel ships its model (TorchScript
and ONNX files, loadable with torch alone), but it is one more requirement whose audio
extras pin torchaudio < 2.10 (we use 2.11); the energy VAD needs nothing beyond numpy,
and the cuts it makes only have to fall in pauses, not to tell noise from speech
(``bench/long_audio.py`` measures the result: the WER of a joined recording against the
separate files).
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Deque, List, Optional, Tuple

import numpy as np

from wenet.alignment.pauses import RefineConf, energy_db, pause_runs


@dataclass(frozen=True)
class VadConf:
    """Settings of the energy VAD (see the module docstring)."""

    hop_s: float = 0.01
    margin_db: float = 10.0
    floor_percentile: float = 10.0
    min_pause_s: float = 0.2
    min_speech_s: float = 0.03     # louder blips as short as this inside a pause are noise
    floor_window_s: Optional[float] = 3.0  # the floor follows the noise over this much audio
    skip_digital_silence: bool = True      # exact zeros (joins, padding) do not set the floor

    def pause_conf(self) -> RefineConf:
        """The same settings as ``pauses.pause_runs`` takes them."""
        return RefineConf(hop_s=self.hop_s, margin_db=self.margin_db,
                          min_pause_s=self.min_pause_s, floor_percentile=self.floor_percentile,
                          min_speech_s=self.min_speech_s, edge_margin_db=self.margin_db,
                          floor_window_s=self.floor_window_s,
                          skip_digital_silence=self.skip_digital_silence)


def pauses(samples: np.ndarray, rate: int, conf: VadConf = VadConf()) -> List[Tuple[float, float]]:
    """(start s, end s) of every pause of at least ``conf.min_pause_s`` in mono ``samples``,
    in order (a leading or trailing silence included)."""
    return pause_runs(np.asarray(samples), rate, conf.pause_conf())


def speech_segments(samples: np.ndarray, rate: int, conf: VadConf = VadConf()
                    ) -> List[Tuple[float, float]]:
    """(start s, end s) of the stretches between the pauses: the speech, in order."""
    total = (len(samples) // max(1, int(round(rate * conf.hop_s)))) * conf.hop_s
    out, at = [], 0.0
    for start, end in pauses(samples, rate, conf) + [(total, total)]:
        if start > at + 1e-9:
            out.append((at, start))
        at = max(at, end)
    return out


class StreamingVad:
    """The trailing silence of a growing stream: feed samples with :meth:`accept`, read
    :attr:`trailing_silence_s`. The floor is the ``floor_percentile`` of the window
    energies of the last ``history_s`` seconds (bounded memory); a window is silent when
    it is within ``margin_db`` of that floor."""

    def __init__(self, rate: int, conf: VadConf = VadConf(), history_s: float = 30.0) -> None:
        self.rate = rate
        self.conf = conf
        self.hop = max(1, int(round(rate * conf.hop_s)))
        self._energies: Deque[float] = deque(maxlen=max(1, int(history_s / conf.hop_s)))
        self._pending = np.zeros(0, dtype=np.float64)
        self.trailing_windows = 0
        self.windows = 0               # windows accepted in all

    @property
    def trailing_silence_s(self) -> float:
        """Seconds of silence at the end of what was accepted (whole windows)."""
        return self.trailing_windows * self.conf.hop_s

    def accept(self, samples: np.ndarray) -> None:
        """Take mono float samples; update the trailing silence."""
        buf = np.concatenate([self._pending, np.asarray(samples, dtype=np.float64).reshape(-1)])
        n = len(buf) // self.hop
        self._pending = buf[n * self.hop:]
        if n == 0:
            return
        self.windows += n
        energy = energy_db(buf[:n * self.hop], self.rate, self.conf.hop_s)
        self._energies.extend(energy.tolist())
        floor = float(np.percentile(np.fromiter(self._energies, float), self.conf.floor_percentile))
        quiet = energy <= floor + self.conf.margin_db
        loud = np.nonzero(~quiet)[0]
        if loud.size == 0:
            self.trailing_windows += n
        else:
            self.trailing_windows = n - 1 - int(loud[-1])
