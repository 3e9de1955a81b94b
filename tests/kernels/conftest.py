"""Fixtures of the kernel tests (opted into with ``pytest.mark.usefixtures``)."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture
def one_thread():
    """Small inputs: one intra-op thread (spinning OpenMP threads crawl on a busy machine)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
