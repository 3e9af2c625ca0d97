#!/usr/bin/env bash
# Wheels for a machine that has PyTorch but not the pipeline's tools and cannot reach PyPI (a lent GPU
# machine): everything MLflow, DVC, Optuna and pydantic need, for that machine's Python, minus the
# packages its image already holds (benchmarks/gpu_image_packages.txt, or the file given), into .whl/
# (git ignores it). Carry .whl/ with the checkout; benchmarks/gpu_check.sh installs it there.
#
#   bash benchmarks/gpu_wheels.sh [--python 3.12] [--have FILE] [--dest .whl]
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PYV=3.12; HAVE=$ROOT/benchmarks/gpu_image_packages.txt; DEST=$ROOT/.whl
while [ $# -gt 0 ]; do
  case $1 in
    --python) PYV=$2; shift 2 ;;
    --have) HAVE=$2; shift 2 ;;
    --dest) DEST=$2; shift 2 ;;
    -h|--help) sed -n '2,8p' "$0"; exit 0 ;;
    *) echo "gpu_wheels: unknown option $1 (see --help)"; exit 2 ;;
  esac
done
PIP=${PIP:-$ROOT/.venv/bin/pip}
[ -x "$PIP" ] || PIP="python3 -m pip"
req() { grep -oE "\"($1)[=<>!][^\"]*\"" "$ROOT/pyproject.toml" | head -1 | tr -d '"'; }
ALL=$(mktemp -d); trap 'rm -rf "$ALL"' EXIT
PLAT=""; for n in 17 24 26 27 28 31 34; do PLAT="$PLAT --platform manylinux_2_${n}_x86_64"; done
# antlr4-python3-runtime (hydra-core's, for DVC) is published as a source archive only: build its wheel here
$PIP wheel -q --no-deps -w "$ALL" antlr4-python3-runtime==4.9.3
$PIP download -q --find-links "$ALL" --only-binary=:all: --python-version "$PYV" --implementation cp \
  --platform manylinux2014_x86_64 --platform manylinux1_x86_64 $PLAT -d "$ALL" \
  "$(req mlflow)" "$(req dvc)" "$(req optuna)" "$(req pydantic)"
mkdir -p "$DEST"; rm -f "$DEST"/*.whl
norm() { tr 'A-Z_.' 'a-z--'; }
grep -v '^#' "$HAVE" | norm | sort -u > "$ALL/have.txt"
kept=0
for f in "$ALL"/*.whl; do
  name=$(basename "$f" | cut -d- -f1 | norm)
  grep -qx "$name" "$ALL/have.txt" || { cp "$f" "$DEST/"; kept=$((kept + 1)); }
done
echo "gpu_wheels: $kept wheels for Python $PYV in $DEST ($(du -sh "$DEST" | cut -f1)); carry it with the checkout"
