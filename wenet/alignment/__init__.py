"""Forced alignment and word timing: CTC forced alignment, pause-aware word boundaries,
the batch aligner of data lists, and the CTM / SRT / TextGrid writers."""
