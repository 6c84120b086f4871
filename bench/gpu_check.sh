#!/usr/bin/env bash
# The GPU check, in one script and about 8 minutes on one GPU (the step limits add up to 480 s), with
# the machine's own torch (it installs nothing): the GPU tests, the transformer at its large preset,
# a short sweep, the multi-process strategies checked against single on CPU ranks, the training
# knobs, `pytest --benchmark` on one model and the report, everything written into OUT_DIR. The
# steps run most valuable first, each under its own limit, so a slow machine loses the last ones.
# Without a GPU it runs the same steps on the CPU, sized down, and says so: every record is then
# marked emulated.
#
#   bash bench/gpu_check.sh OUT_DIR
#
# OUT_DIR/steps.tsv gets one line per step as it ends (name, limit, seconds taken, exit code), so
# the limits can be set from what the steps took.
set -uo pipefail
out=${1:?usage: bash bench/gpu_check.sh OUT_DIR}
cd "$(dirname "$0")/.."
mkdir -p "$out"
export PYTHONUNBUFFERED=1

if python -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)'; then
  preset=large
  scale=1
else
  # Emulated ranks share a few cores: each step gets 3 times its GPU limit (on 2 shared cores the
  # sweep took 323 s against its 140, verify 60 s against its 25).
  echo "no CUDA device: CPU fallback with the tiny preset (emulated devices), limits x3"
  preset=tiny
  scale=3
fi

failed=0
printf 'step\tlimit_s\ttook_s\texit\n' > "$out/steps.tsv"
# step NAME LIMIT_S COMMAND...: runs COMMAND under a time limit (LIMIT_S on a GPU), keeps its output in
# OUT_DIR/NAME.log.
step() {
  local name=$1 limit=$(($2 * scale))
  shift 2
  echo "== $name (limit ${limit}s): $*"
  local start=$SECONDS
  timeout --kill-after=10 "$limit" "$@" 2>&1 | tee "$out/$name.log"
  local rc=${PIPESTATUS[0]}
  printf '%s\t%s\t%s\t%s\n' "$name" "$limit" "$((SECONDS - start))" "$rc" >> "$out/steps.tsv"
  if [ "$rc" -ne 0 ]; then
    echo "== $name FAILED (exit $rc$([ "$rc" -eq 124 ] && echo ': time limit'))"
    failed=1
  fi
}

step list 10 python -m bench list
step gpu-tests 60 python -m pytest -q -p no:cacheprovider -m gpu tests
# The transformer at its large preset once on its own, so that it is seen before the sweep runs it
# again. Its own batch fits (counted, not measured): 737M parameters and 16 x 1024 tokens are under
# 50 GB in fp32 (models/transformer.py) and 6 x 737M x 16384 = 7e13 FLOPs a step, under a second
# in bf16 (the GPU default) at 20% of an H200's peak.
step transformer 50 python -m bench run --strategy single --model transformer --preset "$preset" --steps 5 \
  --warmup 2 --out "$out/transformer.jsonl"
# With one GPU the strategies that need a device per rank (zero1, fsdp, tp, mp, pp, hybrid) are
# skipped rows here: the verify-cpu step below checks them.
step sweep 110 python -m bench sweep --models cnn,mlp,transformer --preset "$preset" --microbatches 4 --repeats 2 \
  --out "$out/sweep.jsonl" --run-timeout-s 90 --calibration none
# Predicted before measured on this GPU: a calibration of the large mlp (blocks, update, step overhead;
# one GPU has no collectives to measure), then single and ddp on 1 GPU in fp32 (the calibration's
# precision), each record carrying its prediction and prediction_error.
predict_runs() {
  python -m bench calibrate --model mlp --preset "$preset" --devices 1 --microbatches 1 --repeats 3 \
    --out "$out/calibration-mlp.json" &&
  python -m bench sweep --strategies single,ddp --models mlp --devices 1 --preset "$preset" --precision fp32 \
    --repeats 2 --steps 5 --warmup 2 --calibration "$out/calibration-mlp.json" --out "$out/predicted.jsonl" \
    --run-timeout-s 40
}
export out preset
export -f predict_runs
step predict 60 bash -c predict_runs
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
step knobs 60 bash -c knob_runs  # timeout runs programs, not shell functions
# The sharded strategies, which one GPU cannot host (a device per rank), on the transformer against
# single on 2 gloo ranks of the CPU: an empty CUDA_VISIBLE_DEVICES hides the GPU, so `auto` is the CPU.
step verify-cpu 50 env CUDA_VISIBLE_DEVICES= python -m bench verify --models transformer \
  --strategies ddp,zero1,fsdp,tp --devices 2 --out "$out/verify-cpu.jsonl"
step benchmark 40 python -m pytest -q -p no:cacheprovider tests/benchmarks --benchmark --bench-models cnn \
  --bench-preset "$preset" --bench-steps 5 --bench-warmup 2 --benchmark-json="$out/benchmark.json"
step verify 20 python -m bench verify --models mlp --out "$out/verify.jsonl"
# Left out: transformer.jsonl (its single run would join the sweep's round-0 baseline of the speed-ups)
# and verify-cpu.jsonl (CPU verdicts, not about this machine's GPU runs).
inputs=()
for f in "$out/sweep.jsonl" "$out/predicted.jsonl" "$out/knobs.jsonl" "$out/verify.jsonl" "$out/benchmark.json"; do [ -s "$f" ] && inputs+=("$f"); done
step report 20 python -m bench report "${inputs[@]}" --out "$out/report"
exit $failed
