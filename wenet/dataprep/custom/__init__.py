"""Stage 0 for a corpus of one's own (``./run.sh --corpus custom --data_root DIR``).

Readers turn what DIR holds into :class:`~wenet.dataprep.custom.records.Entry` lists, one
module per format family (``kaldi_dirs``, ``manifests``, ``librispeech``,
``lhotse_manifests``); ``detect`` picks the reader of each set; ``prepare`` checks the
entries against their audio headers, normalises the text, holds out dev speakers and
writes the Kaldi data dirs with a report of everything it skipped.
"""
