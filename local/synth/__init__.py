"""The built-in speech corpus: English sentences spoken by Debian TTS engines.

``sentences`` writes the texts, ``voices`` lists the engine voices and splits
them into train/dev/test, ``augment`` makes the audio less clean, ``generate``
plans and synthesises the corpus, ``summary`` reports the sizes of data dirs.
``corpus`` is the engine every synthetic corpus builds with (speaking, parallel
synthesis, WAV checks, Kaldi lists, manifest and markers); ``local.synth_broad``
uses it too.
"""
