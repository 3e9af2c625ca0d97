"""What every stage shares: the file layout, params loading, quiet logs and
the error handling that turns bad input into a one-line message and exit 2."""

from __future__ import annotations

import json
import logging
import os
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from zeroloop.config import Params, ParamsError, load_params
from zeroloop.storage import DamagedFileError, atomic_write_bytes

PARAMS_FILE = "params.yaml"


# Per-generation files sit one level down (models/generations/, reports/generations/)
# so the report stage can depend on those folders while writing models/champion.pt
# and reports/metrics.json: DVC forbids an output inside one of the stage's own deps.
MODELS = Path("models") / "generations"
REPORTS = Path("reports") / "generations"


def model_path(gen: int, kind: str = "best") -> Path:
    return MODELS / f"gen_{gen}" / f"{kind}.pt"


def data_dir(gen: int) -> Path:
    return Path("data") / f"gen_{gen}"


def partial_dir(gen: int, key: str) -> Path:
    """Scratch space for unfinished self-play (not a DVC output, so a killed
    stage's finished shards survive until the rerun uses them)."""
    return Path("data") / ".partial" / f"gen_{gen}-{key}"


def replay_manifest(gen: int) -> Path:
    return Path("data") / "replay" / f"gen_{gen}.json"


def report_path(gen: int, name: str) -> Path:
    return REPORTS / f"gen_{gen}" / f"{name}.json"


POSITIONS = Path("data") / "positions.json"
CHAMPION = Path("models") / "champion.pt"


def write_json(path: str | Path, data: Any) -> None:
    atomic_write_bytes(path, (json.dumps(data, indent=2, sort_keys=False) + "\n").encode())


def read_json(path: str | Path) -> Any:
    path = Path(path)
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise FileNotFoundError(f"{path}: missing (run the stage that makes it first)") from None
    except json.JSONDecodeError as exc:
        raise DamagedFileError(f"{path}: damaged JSON ({exc.msg} at line {exc.lineno})") from None


def quiet_libraries() -> None:
    """Keep stage output to progress bars and our own lines."""
    for name in ("lightning", "lightning.pytorch", "lightning.fabric", "mlflow", "alembic", "urllib3"):
        logging.getLogger(name).setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", module="lightning")
    warnings.filterwarnings("ignore", module="mlflow")
    warnings.filterwarnings("ignore", category=UserWarning, message=".*does not have many workers.*")
    warnings.filterwarnings("ignore", category=FutureWarning)


def setup_process() -> None:
    from zeroloop.workers import init_worker_threads

    init_worker_threads()
    quiet_libraries()


def say(stage: str, text: str) -> None:
    print(f"[{stage}] {text}", file=sys.stderr, flush=True)


def run_stage(name: str, body: Callable[[Params], None], params_file: str = PARAMS_FILE) -> int:
    """Load params, run the stage body, map expected failures to exit 2."""
    setup_process()
    try:
        params = load_params(params_file)
        body(params)
    except (ParamsError, DamagedFileError, FileNotFoundError, ValueError) as exc:
        if os.environ.get("ZEROLOOP_DEBUG"):
            raise
        print(f"zeroloop {name}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"zeroloop {name}: interrupted; rerun `dvc repro` to finish (finished work is kept)",
              file=sys.stderr)
        return 130
    return 0


STAGE_IDS = {"init": 1, "selfplay": 2, "train": 3, "gate": 4, "evaluate": 5, "positions": 6}


def derive_seed(seed: int, stage: str, gen: int = 0) -> int:
    """An independent 32-bit seed per (params seed, stage, generation)."""
    import numpy as np

    return int(np.random.SeedSequence([seed, STAGE_IDS[stage], gen]).generate_state(1)[0])
