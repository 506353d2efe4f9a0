#!/usr/bin/env bash
# One prepared run for a lent GPU machine (docs/engines.md, "Commands"; figures: docs/results.md, "On a
# GPU"): the CUDA tests (test/engines/test_cuda.py), held-out plan accuracy and decode speed per decoder on CUDA in float32 and
# bfloat16 (keyframe packs written here by scripts/keyframe_pack.py: the machine has no bag reader), and the
# decode benchmark up to a Qwen3-VL-2B-sized target. Results under ${RESULTS:-out/gpu}.
#
# Runs in the project's venv where there is one (make setup), else on a python3 that has torch,
# transformers and safetensors (PYTHONPATH=src; nothing here needs ROS). Each step has its own time limit,
# so one slow step cannot take the others' time; a failing step is reported and the next one runs.
#   PACKS=DIR (default .gpu): *.pack files, one per robot (<robot>.pack or <robot>_<name>.pack)
#   EPISODES=N (default: every episode of the pack) episodes of each pack to evaluate
set -uo pipefail
cd "$(dirname "$0")/.."
out="${RESULTS:-out/gpu}"; mkdir -p "$out"
if [ -f .venv/bin/activate ]; then set +u; source scripts/env.bash; set -u; PY=python
else export PYTHONPATH="$PWD/src${PYTHONPATH:+:$PYTHONPATH}"; PY=python3
  # wheels carried in .whl/ (the pinned transformers: another version's Qwen3 forward may ignore our KV cache,
  # which the target adapter refuses by name) go first on the path
  if compgen -G ".whl/*.whl" > /dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
      && export PYTHONPATH="/tmp/site:$PYTHONPATH"
  fi
fi
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST
packs="${PACKS:-.gpu}"; limit=(); [ -n "${EPISODES:-}" ] && limit=(--episodes "$EPISODES")
step() {  # step NAME SECONDS COMMAND...: output to $out/NAME.txt and the console
  local name=$1 seconds=$2; shift 2
  echo "=== $name ($(date +%T), limit ${seconds}s)"
  timeout "$seconds" "$@" > "$out/$name.txt" 2>&1; local rc=$?
  tail -n 25 "$out/$name.txt"; echo "=== $name rc=$rc"
}
step env 60 bash -c "nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; $PY -c \
  'import torch, transformers; print(\"torch\", torch.__version__, \"cuda\", torch.cuda.is_available(), torch.version.cuda, \"transformers\", transformers.__version__)'"
step cuda_tests 150 $PY -m pytest -q -p no:cacheprovider -p no:rerunfailures test/engines/test_cuda.py
for pack in "$packs"/*.pack; do
  [ -f "$pack" ] || continue
  name=$(basename "$pack" .pack); robot=${name%%_*}
  model=(); [ -d "$packs/model_$name" ] && model=(--model "$packs/model_$name")
  for run in cuda:float32 cpu:float32 cuda:bfloat16; do  # the CPU row: same machine, same keyframes
    dev=${run%%:*} dtype=${run##*:}
    step "plans_${name}_${dev}_$dtype" 100 $PY scripts/keyframe_pack.py eval "$pack" --robot "$robot" "${model[@]}" \
      "${limit[@]}" --decoders ar,dflash,vflash --device "$dev" --dtype "$dtype" \
      --json "$out/plans_${name}_${dev}_$dtype.json"
  done
done
step decode_bench 200 $PY bench/decode.py --device cuda --dtype bfloat16 --sizes 9m,2b --reps 3 \
  --json "$out/decode_cuda_bf16.json"
