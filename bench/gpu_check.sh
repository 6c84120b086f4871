#!/usr/bin/env bash
# The GPU check, in one script and under 10 minutes on one GPU, with the machine's own torch (it
# installs nothing): the GPU tests, `pytest --benchmark` on one model, a short sweep and its report,
# everything written into OUT_DIR. Without a GPU it runs the same steps on the CPU, sized down, and
# says so: every record is then marked emulated.
#
#   bash bench/gpu_check.sh OUT_DIR
set -uo pipefail
out=${1:?usage: bash bench/gpu_check.sh OUT_DIR}
cd "$(dirname "$0")/.."
mkdir -p "$out"
export PYTHONUNBUFFERED=1

if python -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)'; then
  preset=large
else
  echo "no CUDA device: CPU fallback with the tiny preset (emulated devices)"
  preset=tiny
fi

failed=0
# step NAME LIMIT_S COMMAND...: runs COMMAND under a time limit, keeps its output in OUT_DIR/NAME.log.
step() {
  local name=$1 limit=$2
  shift 2
  echo "== $name (limit ${limit}s): $*"
  timeout --kill-after=10 "$limit" "$@" 2>&1 | tee "$out/$name.log"
  local rc=${PIPESTATUS[0]}
  if [ "$rc" -ne 0 ]; then
    echo "== $name FAILED (exit $rc)"
    failed=1
  fi
}

step list 60 python -m bench list
step gpu-tests 120 python -m pytest -q -p no:cacheprovider -m gpu tests
step benchmark 150 python -m pytest -q -p no:cacheprovider tests/benchmarks --benchmark --bench-models cnn \
  --bench-preset "$preset" --bench-steps 10 --bench-warmup 3 --benchmark-json="$out/benchmark.json"
step sweep 180 python -m bench sweep --models cnn,mlp --preset "$preset" --microbatches 4 --repeats 2 \
  --out "$out/sweep.jsonl" --run-timeout-s 90
# The training knobs side by side on one model: each precision, then compile and activation
# checkpointing at the machine's default precision (tf32 exists on CUDA only).
precisions="fp32 bf16 fp16"
[ "$preset" = large ] && precisions="fp32 tf32 bf16 fp16"
knob_runs() {
  local common=(python -m bench run --model cnn --preset "$preset" --steps 5 --warmup 3 --out "$out/knobs.jsonl")
  for p in $precisions; do "${common[@]}" --precision "$p" || return 1; done
  "${common[@]}" --compile && "${common[@]}" --activation-checkpointing
}
export out preset precisions
export -f knob_runs
step knobs 150 bash -c knob_runs  # timeout runs programs, not shell functions
step verify 120 python -m bench verify --models mlp --out "$out/verify.jsonl"
inputs=()
for f in "$out/sweep.jsonl" "$out/knobs.jsonl" "$out/verify.jsonl" "$out/benchmark.json"; do [ -s "$f" ] && inputs+=("$f"); done
step report 60 python -m bench report "${inputs[@]}" --out "$out/report"
exit $failed
