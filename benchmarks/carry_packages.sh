#!/bin/sh
# The packages gpu_speed.py may use, for a GPU machine that lacks them (and has no network):
# DeepSpeed and the packages it imports, copied from a local site-packages into .gpu/site
# (git-ignored), with pydantic-core (the one compiled dependency) downloaded for the target
# machine's Python. When ../shared/data is beside the checkout, its real web recipes go to
# .gpu/recipes.jsonl for the training and batching rows (gpu_next.sh uses them).
#
#   sh benchmarks/carry_packages.sh .venv/lib/python3.11/site-packages 3.12
#   # on the GPU machine, from the repo root:
#   PYTHONPATH=$PWD/.gpu/site python benchmarks/gpu_speed.py --out gpu_speed.jsonl
#
# numpy, packaging, torch, tqdm and typing_extensions are expected there already (torch and
# transformers need them). msgpack's C build is dropped: it falls back to its pure-Python code.
set -e
SITE=${1:?usage: carry_packages.sh SITE_PACKAGES PYTHON_VERSION}
TARGET=${2:?usage: carry_packages.sh SITE_PACKAGES PYTHON_VERSION}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT="$ROOT/.gpu/site"
PYTHON=$(dirname "$SITE")/../../bin/python
[ -x "$PYTHON" ] || PYTHON=python3
rm -rf "$OUT" && mkdir -p "$OUT"
for name in deepspeed hjson cpuinfo pydantic annotated_types typing_inspection msgpack einops psutil ninja \
            deepspeed-*.dist-info hjson-*.dist-info py_cpuinfo-*.dist-info pydantic-*.dist-info \
            annotated_types-*.dist-info typing_inspection-*.dist-info msgpack-*.dist-info einops-*.dist-info \
            psutil-*.dist-info ninja-*.dist-info; do
  for path in "$SITE"/$name; do
    [ -e "$path" ] && cp -r "$path" "$OUT/"
  done
done
rm -f "$OUT"/msgpack/*.so
CORE=$("$PYTHON" -c "import pydantic_core; print(pydantic_core.__version__)")
WHEELS=$(mktemp -d)
"$PYTHON" -m pip download "pydantic-core==$CORE" --only-binary=:all: --python-version "$TARGET" \
    --platform manylinux2014_x86_64 --no-deps -d "$WHEELS" -q
"$PYTHON" -m zipfile -e "$WHEELS"/pydantic_core-*.whl "$OUT/"
rm -rf "$WHEELS"
find "$OUT" -name __pycache__ -type d -prune -exec rm -rf {} +
REAL="$ROOT/../shared/data/web_recipes/recipes.jsonl"
if [ -f "$REAL" ]; then
  cp "$REAL" "$ROOT/.gpu/recipes.jsonl"
fi
du -sh "$ROOT/.gpu"
