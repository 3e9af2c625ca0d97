#!/usr/bin/env bash
# Issue 23's GPU checks as one prepared run (docs/speed.md, "On a GPU"): on a machine with a CUDA
# device, from a checkout of this repository,
#   1. the machine: GPU, driver, Python, PyTorch, CPU;
#   2. the CUDA tests (tests/test_inference.py: CUDA answers as the CPU through pinned buffers);
#   3. `make bench`'s self-play benchmark on CUDA: the pipeline's batch (32) with 4 workers, and
#      8 workers at batch 256 (GPU_CHECK_WIDE_WORKERS; issue 51's yardstick), and training throughput
#      (raw loop and Lightning's fit) on CUDA; per net family (5x64, gpool:3x48 the default, mlp:3x512),
#      a network call and a training step (benchmarks/net_sizes.py) in fp32 and bf16;
#   4. a short pipeline, `dvc repro` with `runtime.device: cuda` (1 generation of Connect Four,
#      the default net, 200 games) in a scratch copy of the checkout, with its
#      stage times and results.
#
#   bash benchmarks/gpu_check.sh [OUTDIR]        # OUTDIR: where the log and results go ($OUT, else /tmp/gpu_check)
#
# Environment: GPU_CHECK_STEPS (default "machine tests bench nets train repro": any of them, in that order;
# "params" alone only prepares and validates the scratch repository, as the suite's smoke test does),
# GPU_CHECK_DEVICE (default cuda; cpu runs the same steps here, for the suite's smoke test),
# GPU_CHECK_GAMES (200), GPU_CHECK_GENERATIONS (1), GPU_CHECK_WORKERS (4). Sized to end within a few
# minutes of a 15-minute device loan, with time to run it again.
#
# A machine without MLflow, DVC or Optuna (a lent GPU machine with no network): carry a folder .whl/ of
# wheels for its Python (benchmarks/gpu_wheels.sh makes it) and this script installs them first, into
# /tmp/site. The package itself runs from src/ (PYTHONPATH), so the machine's own PyTorch is used.
set -u -o pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUTDIR=${1:-${OUT:-/tmp/gpu_check}}
STEPS=${GPU_CHECK_STEPS:-machine tests bench nets train repro}
DEVICE=${GPU_CHECK_DEVICE:-cuda}
GAMES=${GPU_CHECK_GAMES:-200}
GENS=${GPU_CHECK_GENERATIONS:-1}
WORKERS=${GPU_CHECK_WORKERS:-4}
PY=${PYTHON:-python3}
case $PY in /*) ;; */*) PY=$PWD/$PY ;; esac  # a relative path still works after the cd below
mkdir -p "$OUTDIR" && OUTDIR=$(cd "$OUTDIR" && pwd)  # results are copied there from the scratch repository
LOG="$OUTDIR/gpu_check.log"
exec > >(tee -a "$LOG") 2>&1
say() { echo "== $* ($(date -u +%T))"; }
has() { case " $STEPS " in *" $1 "*) return 0 ;; *) return 1 ;; esac; }
failed=""

cd "$ROOT"
PYTAG=$($PY -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")' 2>/dev/null)
# compiled wheels for another Python (a checkout that still holds the device's .whl/, run here): skip them
if ls .whl/*-cp[0-9]*-cp[0-9]*-*.whl >/dev/null 2>&1 && ! ls .whl/*-"$PYTAG"-"$PYTAG"-*.whl >/dev/null 2>&1; then
  say "the carried wheels in .whl/ are not for this Python ($PYTAG): not installed"
elif [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
  say "installing $(ls .whl/*.whl | wc -l) carried wheels into /tmp/site"
  $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    || { echo "gpu_check: the carried wheels in .whl/ did not install"; exit 1; }
  export PYTHONPATH=/tmp/site:$ROOT/src${PYTHONPATH:+:$PYTHONPATH}
  export PATH=/tmp/site/bin:$PATH
elif ! $PY -c "import zeroloop" 2>/dev/null; then
  export PYTHONPATH=$ROOT/src${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONUNBUFFERED=1

if has machine; then
  say "machine"
  command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  $PY - <<'PY'
import platform, torch
from zeroloop.engine.nn.machine import describe, summary_line
print("python", platform.python_version(), "| torch", torch.__version__, "| cuda available:", torch.cuda.is_available(),
      "| devices:", [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())])
device = "cuda" if torch.cuda.is_available() else "cpu"
print("machine: " + summary_line(describe(device, "auto"), "auto"))
PY
  [ $? = 0 ] || failed="$failed machine"
fi

if has tests; then
  say "CUDA tests (tests/test_inference.py)"
  $PY -m pytest -q -p no:cacheprovider tests/test_inference.py || failed="$failed tests"
fi

if has bench; then
  # the pipeline's batch (the GPU-sized batch of 512 with 4 workers starved the GPU on every loan since
  # 2026-11-24, 0.20 simulations a network row: dropped on 2026-11-30 to keep the check inside a loan)
  args="--eval-batch 32 --in-flight 128 --games 64"
  say "self-play benchmark on $DEVICE: $args"
  $PY benchmarks/selfplay_throughput.py --device "$DEVICE" --precision auto --workers "$WORKERS" $args \
    || failed="$failed bench"
  # issue 51's GPU yardstick, the H100's best row of 2026-11-24 (8 workers at batch 256, 512 in flight,
  # 256 games each: 257,805 simulations/s in bf16), here in the pipeline's precision on CUDA (auto: fp32)
  args="--eval-batch 256 --in-flight 512 --games 256 --workers ${GPU_CHECK_WIDE_WORKERS:-8}"
  say "self-play benchmark on $DEVICE: $args"
  $PY benchmarks/selfplay_throughput.py --device "$DEVICE" --precision auto $args || failed="$failed bench"
fi

if has nets; then
  # issue 51 part 2 on CUDA: what a call and a training step cost per net family, at the pipeline's
  # batch and at 256, fp32 (what auto picks on CUDA) and bf16
  for args in "--batch 32 --precision fp32" "--batch 256 --precision fp32" "--batch 256 --precision bf16"; do
    say "net sizes on $DEVICE: $args"
    $PY benchmarks/net_sizes.py --device "$DEVICE" --nets 5x64,gpool:3x48,mlp:3x512 --seconds 1 $args \
      || failed="$failed nets"
  done
fi

if has train; then
  say "training throughput on $DEVICE"
  $PY benchmarks/train_throughput.py --device "$DEVICE" || failed="$failed train"
fi

if has repro || has params; then
  RUN=$(mktemp -d -p "${TMPDIR:-/tmp}" gpu_check_run.XXXX)
  say "a scratch repository for dvc repro with runtime.device $DEVICE: $GENS generations x $GAMES games, in $RUN"
  git ls-files -z | tar --null -T - -cf - | tar -xf - -C "$RUN"
  cd "$RUN"
  $PY - "$DEVICE" "$GAMES" "$GENS" "$WORKERS" <<'PY' || exit 1
import sys, yaml
from zeroloop.pipeline.params.loading import ParamsError, load_params
device, games, gens, workers = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
p = yaml.safe_load(open("params.yaml"))
p["runtime"].update(device=device, workers=workers)
p["selfplay"]["games"] = games
p["generations"] = {str(g): {"prev": g - 1} for g in range(1, gens + 1)}
yaml.safe_dump(p, open("params.yaml", "w"), sort_keys=False)
try:
    load_params("params.yaml")  # the edited file is valid, or this names the key
except ParamsError as e:
    sys.exit(f"gpu_check: {e}")
print("params.yaml: runtime", p["runtime"], "| games", games, "| generations", gens)
PY
  git init -q && git add -A && git -c user.name=gpu-check -c user.email=gpu-check@localhost commit -qm "gpu check" \
    || { echo "gpu_check: git could not make the scratch repository"; exit 1; }
fi

if has repro; then
  # DVC's stages run `python -m zeroloop...`: make that this interpreter (a wrapper, not a link, so a
  # virtual environment stays itself), on the scratch repository's own source
  mkdir -p "$RUN/.bin" && printf '#!/bin/bash\nexec %q "$@"\n' "$(command -v "$PY")" > "$RUN/.bin/python" \
    && chmod +x "$RUN/.bin/python" && export PATH=$RUN/.bin:$PATH PYTHONPATH=$RUN/src${PYTHONPATH:+:$PYTHONPATH}
  start=$(date +%s)
  dvc repro || failed="$failed repro"
  say "dvc repro took $(( $(date +%s) - start )) s"
  say "reports/metrics.json"; cat reports/metrics.json; echo
  cp reports/metrics.json "$OUTDIR/metrics.json" 2>/dev/null
  cp dvc.lock "$OUTDIR/dvc.lock" 2>/dev/null
  cd "$ROOT"
fi

if [ -n "$failed" ]; then say "FAILED:$failed"; exit 1; fi
say "all passed"
