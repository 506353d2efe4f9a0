#!/usr/bin/env bash
# One prepared run for a lent GPU machine: engine parity tests and the engine
# benchmark on CUDA (and TensorRT when its package is installed). Writes
# results under ${OUT:-out/gpu}. Needs `make setup` first (or the same venv).
set -euo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-out/gpu}"; mkdir -p "$out"
source scripts/env.bash
python -c "import torch; print('cuda', torch.cuda.is_available(), torch.version.cuda)" | tee "$out/env.txt"
python -m pip install -q "tensorrt" 2>&1 | tail -1 || echo "tensorrt not installable here" | tee -a "$out/env.txt"
python -m pytest -q test/engines -p no:cacheprovider 2>&1 | tee "$out/parity.txt"
python bench/engines.py --reps 100 --json "$out/engines.json" 2>&1 | tee "$out/engines.txt"
# Training and evaluation commands on CUDA: a few steps each, tiny models.
python -m plan_stack.cli train-drafter --tiny vl --out "$out/drafter" --steps 3 --device cuda 2>&1 | tail -2 | tee "$out/train_cuda.txt"
python -m plan_stack.cli train-action-head --synthetic 6 --out "$out/head" --steps 20 --horizon 8 --width 16 \
  --layers 1 --heads 2 --device cuda 2>&1 | tail -2 | tee -a "$out/train_cuda.txt"
