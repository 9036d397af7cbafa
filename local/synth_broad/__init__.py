"""A broad synthetic pretraining corpus: everyday English from Debian text packages,
spoken by every English voice of espeak-ng and flite, through simulated rooms,
noise and channels.

``text`` extracts and normalises the sentences (WordNet, fortunes), ``voices``
lists the voices and holds dev/test voices out, ``acoustics`` simulates rooms,
noise, band-limiting, telephone channels and gain, ``plan`` draws every
utterance from the seed, ``generate`` synthesises the corpus (the CLI of stage 0).
The built-in corpus (``local/synth``) is untouched; this package only imports it.
"""
