"""Setting up a process: one torch thread, quiet library logs.

Called by the stages, the workers and the commands, never at import time.
"""

from __future__ import annotations

import logging
import os
import warnings


def init_worker_threads() -> None:
    """One torch (and BLAS) thread in this process."""
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import torch

    torch.set_num_threads(1)


def quiet_libraries() -> None:
    """Keep stage output to progress bars and our own lines."""
    for name in ("lightning", "lightning.pytorch", "lightning.fabric", "mlflow", "alembic", "urllib3"):
        logging.getLogger(name).setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", module="lightning")
    warnings.filterwarnings("ignore", module="mlflow")
    warnings.filterwarnings("ignore", category=UserWarning, message=".*does not have many workers.*")
    warnings.filterwarnings("ignore", category=FutureWarning)


def setup_process() -> None:
    init_worker_threads()
    quiet_libraries()
