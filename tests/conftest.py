"""Fixtures shared by every test folder (paths and helpers: tests/common.py)."""
import pytest
import torch


@pytest.fixture(autouse=True)
def _restore_torch_threads():
    """Tools' main() and some tests change torch's thread count; give every test the
    session's setting back so one test never slows or changes another."""
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def one_thread():
    """One intra-op thread: tiny models run 5-10x faster on busy cores without a pool
    of threads fighting over small ops (restored by _restore_torch_threads)."""
    torch.set_num_threads(1)
