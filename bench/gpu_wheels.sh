#!/usr/bin/env bash
# Download into .whl/ (repo root) the wheels that bench/gpu_bench.py imports and the GPU machine's
# image lacks, for CPython 3.12 on manylinux x86_64, at the versions uv.lock pins; prints their sizes.
# The image already holds jax, flax, optax, numpy, pandas, pyarrow, tensorstore, fsspec, rich,
# pyyaml and torch; the bench's import path (theseus.quick, the store, the trainer) also needs these:
#   loguru, omegaconf, polars and polars-runtime-32 (polars's compiled engine).
# .whl/ is ignored by git; the device `run` carries it (see bench/README.md, "GPU figures").
set -euo pipefail
cd "$(dirname "$0")/.."
names=(loguru omegaconf polars polars-runtime-32)

pins=$(python3 - "${names[@]}" <<'EOF'
import sys, tomllib
packages = {p["name"]: p["version"] for p in tomllib.load(open("uv.lock", "rb"))["package"]}
missing = [n for n in sys.argv[1:] if n not in packages]
if missing:
    sys.exit(f"uv.lock pins no version of {missing}")
print(" ".join(f"{n}=={packages[n]}" for n in sys.argv[1:]))
EOF
)

rm -rf .whl
mkdir -p .whl
# shellcheck disable=SC2086  # $pins is a list of name==version words
python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d .whl $pins
ls -l .whl
total=$(du -cb .whl/*.whl | tail -1 | cut -f1)
echo "total: $((total / 1024 / 1024)) MiB in $(ls .whl/*.whl | wc -l) wheels (the device run carries at most 64 MiB)"
if [ "$total" -gt $((56 * 1024 * 1024)) ]; then
    echo "too large: the working tree and .whl/ together must stay under 64 MiB" >&2
    exit 1
fi
