#!/usr/bin/env bash
# GPU check (one GPU): train llama and cem-full at the paper-86m preset for a fixed number of
# steps on the same data and print tokens/s, model-FLOPs utilisation (MFU) and loss for each.
#
#   scripts/gpu_check.sh [STEPS] [DATA]     # defaults: 200 steps, the offline demo corpus
#
# MFU assumes a peak of CEM_PEAK_TFLOPS (default 989, H100/H200 dense bf16) and counts matmul
# FLOPs as in `python -m cem_core bench` (forward + backward = 3 x forward).
set -euo pipefail
cd "$(dirname "$0")/.."
STEPS="${1:-200}"
DATA="${2:-demo}"
PY="${PYTHON:-.venv/bin/python}"
"$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'no CUDA device: this check needs a GPU')"
OUT="runs/gpu_check/$(date +%Y%m%d-%H%M%S)"
"$PY" -m cem_core lm compare --preset paper-86m --variants llama cem-full --data "$DATA" --steps "$STEPS" \
    --out "$OUT" --json "$OUT/compare.json"
"$PY" - "$OUT/compare.json" <<'PY'
import json, math, sys
records = json.load(open(sys.argv[1]))
print(f"{'variant':<10} {'params':>12} {'tokens/s':>12} {'MFU':>7} {'val loss':>9}")
for r in records:
    mfu = f"{r['mfu']:.1%}" if r.get("mfu") is not None else "n/a"
    print(f"{r['variant']:<10} {r['params']:>12,} {r['tokens_per_s']:>12,.0f} {mfu:>7} {math.log(r['val_ppl']):>9.4f}")
PY
