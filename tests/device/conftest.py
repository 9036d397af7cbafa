"""Fixtures of the device-guard tests."""
import pytest

from tests.train import testlib as T


@pytest.fixture(scope="session")
def corpus(tmp_path_factory):
    """8 training and 3 CV utterances in shards, and their units (tests/train/testlib.py)."""
    return T.make_corpus(str(tmp_path_factory.mktemp("corpus")), num_utts=8, num_shards=1,
                         cv_utts=3)
