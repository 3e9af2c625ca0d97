"""What every stage shares: the repository layout, params loading, quiet logs
and the error handling that turns bad input into a one-line message and exit 2."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

from zeroloop.pipeline.data.layout import Layout
from zeroloop.pipeline.data.storage import DamagedFileError
from zeroloop.pipeline.params import Params, ParamsError, load_params
from zeroloop.pipeline.runtime.backend import WorkerLost, use_backend
from zeroloop.pipeline.runtime.process import setup_process, start_work
from zeroloop.pipeline.runtime.workers import keep_workers

PARAMS_FILE = "params.yaml"

#: The repository's layout: paths relative to the working directory, as dvc.yaml names them.
LAYOUT = Layout()


def say(stage: str, text: str) -> None:
    print(f"[{stage}] {text}", file=sys.stderr, flush=True)


#: The folders stages write into (under the repository root).
OUTPUT_ROOTS = ("models", "data", "reports")


def check_writable(roots: tuple[str, ...] = OUTPUT_ROOTS) -> None:
    """Fail before any work when an output folder cannot be written (read-only,
    a file in its place, no space for a file): one line naming it."""
    import tempfile
    from pathlib import Path

    for root in roots:
        where = root if Path(root).exists() else "."  # a missing folder is made in the working directory
        try:
            with tempfile.NamedTemporaryFile(dir=where, prefix=".write-check-"):
                pass
        except OSError as exc:
            raise ValueError(f"{root}/: cannot write here ({exc.strerror or exc}); nothing was run") from None


def run_stage(name: str, body: Callable[[Params], None], params_file: str = PARAMS_FILE,
              writes: bool = True, tracked: bool = False) -> int:
    """Load params, check the output folders can be written (``writes``) and
    the MLflow store answers (``tracked``: a bounded wait, see
    :func:`~zeroloop.pipeline.tracking.store.check_tracking`), run the stage body,
    map expected failures to exit 2."""
    setup_process()
    try:
        params = load_params(params_file, complete=True)
        use_backend(params.runtime.worker_backend())
        if writes:
            check_writable()
        if tracked:
            from zeroloop.pipeline.tracking.store import check_tracking, prefetch_client

            check_tracking()
            prefetch_client()
        start_work()  # the imports are done (python -m zeroloop.pipeline.stages turned collection off)
        with keep_workers():  # the stage's matches and measurements share one set of workers
            body(params)
    except (ParamsError, DamagedFileError, FileNotFoundError, ValueError, WorkerLost) as exc:
        if os.environ.get("ZEROLOOP_DEBUG"):
            raise
        print(f"zeroloop {name}: error: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:
        from zeroloop.pipeline.tracking.store import tracking_errors, tracking_uri

        if not isinstance(exc, tracking_errors()) or os.environ.get("ZEROLOOP_DEBUG"):
            raise
        first = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else type(exc).__name__
        print(f"zeroloop {name}: error: MLflow at {tracking_uri()} failed: {first}; the outputs written "
              "so far are kept: rerun `dvc repro` once the store answers", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"zeroloop {name}: interrupted; rerun `dvc repro` to finish (finished work is kept)",
              file=sys.stderr)
        return 130
    return 0
