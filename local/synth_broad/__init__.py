"""A broad synthetic pretraining corpus: everyday English from Debian text packages,
spoken by every English voice of espeak-ng and flite, through simulated rooms,
noise and channels.

``text`` extracts and normalises the sentences (WordNet, fortunes), ``voices``
lists the voices and holds dev/test voices out, ``acoustics`` simulates rooms,
noise, band-limiting, telephone channels and gain, ``plan`` draws every
utterance from the seed, ``generate`` synthesises the corpus (the CLI of stage 0).
It builds on the built-in corpus's public parts: its voices (``local.synth.voices``),
noise colours and the corpus engine (``local.synth.corpus``), which runs the TTS
engines, writes the audio and the Kaldi lists and keeps the rerun bookkeeping for both.
"""
