"""Compatibility names (kept until tests/transducer imports ``wenet.decode.transducer``)."""
from wenet.decode.transducer import GreedyResult, rnnt_beam_search, rnnt_greedy_search

__all__ = ["GreedyResult", "rnnt_beam_search", "rnnt_greedy_search"]
