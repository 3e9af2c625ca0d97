import pytest


@pytest.fixture(autouse=True, scope="session")
def _one_torch_thread():
    """One torch thread, as the workers use (set here, never at import time)."""
    import torch

    torch.set_num_threads(1)
    yield
