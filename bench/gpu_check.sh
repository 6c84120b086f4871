#!/usr/bin/env bash
# The GPU check, in one script and at most 8 minutes on one GPU, with the machine's own torch (it
# installs nothing): the GPU tests with bench verify on the GPU and the sharded strategies on CPU ranks
# beside them, the transformer at its large preset, the training knobs, a calibrated sweep (predictions
# against measurements), `pytest --benchmark` and the report, everything written into OUT_DIR. Without a
# GPU it runs the same steps on the CPU, sized down, and says so: every record is then marked emulated.
#
#   bash bench/gpu_check.sh OUT_DIR
#   GPU_CHECK_ONLY=knobs,report bash bench/gpu_check.sh OUT_DIR   # these steps alone (a rerun of the
#                                                                # ones a first run lost)
#
# Losing least to a time limit:
#   - the steps run most valuable first (what the CPU suite cannot see, then measurements), each under
#     its own limit; the limits add up to BUDGET_S (480 s), and a step starts with no more than what is
#     left of it, less the report's limit, held back so that the report of whatever finished is written;
#   - with a GPU, the correctness checks that time nothing (bench verify on the GPU and on 2 CPU ranks) run
#     beside the GPU tests, on the other cores, instead of after them; every timed step runs alone;
#   - every row lands as it ends: OUT_DIR/steps.tsv gets one line per step (name, limit, seconds taken,
#     exit code; exit "-" for a step no time was left for), `bench run` and `bench sweep` append each
#     record as their run ends, and verify appends each row as it ends (and runs once per strategy);
#   - a step whose part fails runs its other parts anyway (`;`, not `&&`), and fails at the end.
# The machine's environment (git, nvidia-smi topo -m, ...) is captured once, into OUT_DIR/environment.json;
# the sweep asks only for strategies this machine can host, so it writes no skipped rows (each of which
# captures the environment again).
#
# The limits come from the first two runs on one H200 (reports/gpu-h200-1x-2026-12-04/): each process
# took 10-24 s from start to record there, whatever its steps (a cold `import torch` took 7.6 s, torch
# with CUDA's first kernel 5.4 s, torchvision with ResNet-50's build 12.4 s), so a step's limit is its
# processes times about 20 s.
set -uo pipefail
out=${1:?usage: bash bench/gpu_check.sh OUT_DIR}
ONLY=${GPU_CHECK_ONLY:-}
if [ -n "$ONLY" ]; then
  names=$(grep -oE '^(step|step_beside) [a-z-]+' "${BASH_SOURCE[0]}" | cut -d' ' -f2 | tr '\n' ' ')
  for name in ${ONLY//,/ }; do
    if [[ " $names" != *" $name "* ]]; then
      echo "gpu_check: GPU_CHECK_ONLY names no step '$name'; choose from: $names" >&2
      exit 2
    fi
  done
fi
out=$(realpath -m "$out")  # before the cd: OUT_DIR is where the caller meant it
cd "$(dirname "${BASH_SOURCE[0]}")/.."
mkdir -p "$out"
export PYTHONUNBUFFERED=1
BUDGET_S=${GPU_CHECK_BUDGET_S:-480}  # the overrides: for tests/test_gpu_check.py
if ! command -v python >/dev/null && command -v python3 >/dev/null; then
  # Some GPU images name their interpreter python3 only.
  shim=$(mktemp -d) && ln -s "$(command -v python3)" "$shim/python" && PATH=$shim:$PATH
fi

gpus=$(python -c 'import torch; print(torch.cuda.device_count() if torch.cuda.is_available() else 0)' 2>/dev/null)
gpus=${gpus:-0}
if [ "$gpus" -gt 0 ]; then
  preset=large
  percent=${GPU_CHECK_LIMIT_PERCENT:-100}
else
  # Emulated ranks share a few cores: each step gets 3 times its GPU limit (on 2 shared cores the
  # sweep took 323 s against its 140, verify 60 s against its 25).
  echo "no CUDA device: CPU fallback with the tiny preset (emulated devices), limits x3"
  preset=tiny
  percent=${GPU_CHECK_LIMIT_PERCENT:-300}
fi
# One GPU hosts single and ddp on one rank; the sharded strategies need a device per rank.
# With 2, the calibration also times pp's micro-batches (4 of them) and the collectives on 2 GPUs.
strategies=single,ddp verify_strategies=ddp verify_devices=1 sweep_devices=1 calibrated_microbatches=1
[ "$gpus" -ge 2 ] && strategies=single,ddp,fsdp,tp,pp verify_strategies="ddp fsdp tp" verify_devices=2 \
  sweep_devices=1,2 calibrated_microbatches=1,4
budget=$((BUDGET_S * percent / 100))
REPORT_S=20
reserve=$((REPORT_S * percent / 100))  # held back for the report until it runs
# Whole seconds since the budget started, counted from its own start: two readings of bash's SECONDS (whole seconds
# of the shell's life) differ by 1 once a second boundary falls between them, however little time passed, and a
# 1-second budget then read as spent before its first step (CI: tests/test_gpu_check.py). EPOCHREALTIME: bash 5.
start_all=${EPOCHREALTIME//[.,]/}
elapsed_s() { echo $(((${EPOCHREALTIME//[.,]/} - start_all) / 1000000)); }

failed=0
beside=()
printf 'step\tlimit_s\ttook_s\texit\n' > "$out/steps.tsv"
# step NAME LIMIT_S COMMAND...: runs COMMAND under LIMIT_S (scaled by percent, and cut to what is left of
# the budget beyond the report's reserve), keeps its output in OUT_DIR/NAME.log, writes its steps.tsv row
# as it ends, and returns 1 if the command failed or could not start.
step() {
  local name=$1 limit=$(($2 * percent / 100))
  shift 2
  if [ -n "$ONLY" ] && [[ ",$ONLY," != *",$name,"* ]]; then
    return 0  # not asked for: no row
  fi
  [ "$limit" -lt 1 ] && limit=1
  local left=$((budget - reserve - $(elapsed_s)))
  if [ "$left" -lt 1 ]; then
    echo "== $name: no time left of the ${budget}s budget"
    printf '%s\t%s\t0\t-\n' "$name" "$limit" >> "$out/steps.tsv"
    failed=1
    return 1
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  echo "== $name (limit ${limit}s): $*"
  local start=$SECONDS
  timeout --kill-after=5 "$limit" "$@" > "$out/$name.log" 2>&1
  local rc=$?
  printf '%s\t%s\t%s\t%s\n' "$name" "$limit" "$((SECONDS - start))" "$rc" >> "$out/steps.tsv"
  if [ "$rc" -ne 0 ]; then
    echo "== $name FAILED (exit $rc$([ "$rc" -eq 124 ] && echo ': time limit')); the end of $name.log:"
    tail -n 20 "$out/$name.log"
    failed=1
    return 1
  fi
  tail -n 3 "$out/$name.log"
}
# step_beside NAME LIMIT_S COMMAND...: a step that times nothing, started in the background beside the next
# foreground step where a GPU leaves the cores free, in the foreground on a CPU (whose cores the emulated
# devices need); wait_beside collects its exit code.
step_beside() {
  if [ "$gpus" -gt 0 ]; then
    step "$@" &
    beside+=($!)
  else
    step "$@"
  fi
}
wait_beside() {
  local pid
  for pid in "${beside[@]}"; do wait "$pid" || failed=1; done
  beside=()
}

export out preset
step environment 10 python -c 'import json, sys; from bench.harness.environment import environment
json.dump(environment(), open(sys.argv[1], "w"), indent=1)' "$out/environment.json"
# Equivalence with single on this GPU, one strategy per process so that each one's rows land as it ends.
verify_runs() {
  local rc=0 s
  for s in $verify_strategies; do
    python -m bench verify --models mlp --strategies "$s" --devices "$verify_devices" --out "$out/verify.jsonl" || rc=1
  done
  return $rc
}
# The sharded strategies on 2 gloo ranks, two per process (each process checks single first); the GPU is
# hidden by an empty CUDA_VISIBLE_DEVICES, so `auto` is the CPU.
verify_cpu_runs() {
  local rc=0 s
  for s in ddp,zero1 fsdp,tp; do
    CUDA_VISIBLE_DEVICES= python -m bench verify --models transformer --strategies "$s" --devices 2 \
      --out "$out/verify-cpu.jsonl" || rc=1
  done
  return $rc
}
export verify_strategies verify_devices
export -f verify_runs verify_cpu_runs
# What the CPU suite cannot see first: its CUDA bodies (tests/test_gpu.py: placement, the knobs, compile,
# the refusals; with 2 GPUs ddp, pp, dp, tp, fsdp, zero1, mp and SyncBatchNorm), with the two verify steps
# beside them (none of the three times anything).
step_beside verify 40 bash -c verify_runs  # timeout runs programs, not shell functions
step_beside verify-cpu 75 bash -c verify_cpu_runs
step gpu-tests 100 python -m pytest -q -p no:cacheprovider -m gpu tests
wait_beside
# The transformer at its large preset once on its own: 737M parameters and 16 x 1024 tokens are under
# 50 GB in fp32 (models/transformer.py); on one H200 in bf16 a step took 150 ms.
step transformer 40 python -m bench run --strategy single --model transformer --preset "$preset" --steps 5 \
  --warmup 2 --out "$out/transformer.jsonl"
# The training knobs side by side on one model: each precision (tf32 exists on CUDA only) and activation
# checkpointing at the default one.
precisions="fp32 bf16 fp16"
[ "$preset" = large ] && precisions="fp32 tf32 bf16 fp16"
knob() { python -m bench run --model cnn --preset "$preset" --steps 5 --warmup 3 --out "$out/knobs.jsonl" "$@"; }
knob_runs() {
  local rc=0 p
  for p in $precisions; do knob --precision "$p" || rc=1; done
  knob --activation-checkpointing || rc=1
  return $rc
}
export precisions
export -f knob knob_runs
step knobs 110 bash -c knob_runs
# The sweep, predicted before measured: a calibration of the large mlp (blocks, update, step overhead, and
# with 2 GPUs their collectives; one GPU has none to measure), then every strategy this machine hosts at
# 1 device (and 2, with 2 GPUs) in fp32 (the calibration's precision), 2 repeats a configuration, each
# record carrying its prediction and prediction_error.
export strategies sweep_devices calibrated_microbatches
step sweep 135 bash -c 'python -m bench calibrate --model mlp --preset "$preset" --devices "$sweep_devices" \
  --microbatches "$calibrated_microbatches" --repeats 3 --out "$out/calibration-mlp.json" &&
  python -m bench sweep --strategies "$strategies" --models mlp --devices "$sweep_devices" --preset "$preset" \
  --precision fp32 --microbatches 4 --repeats 2 --steps 5 --warmup 2 --calibration "$out/calibration-mlp.json" \
  --out "$out/sweep.jsonl" --run-timeout-s 40'
step benchmark 65 python -m pytest -q -p no:cacheprovider tests/benchmarks --benchmark --bench-models cnn \
  --bench-preset "$preset" --bench-steps 5 --bench-warmup 2 --benchmark-json="$out/benchmark.json"
# Left out: `--compile`'s speed. Its correctness on the GPU is among the GPU tests; cold, the large
# transformer's blocks took over 36 s to compile on the H200 and ResNet-50's over 45 s, more than this
# budget can spare: time it with `bench run --compile` beside a plain run.
# The report of whatever finished, with the time held back for it. Left out: verify-cpu.jsonl (CPU
# verdicts, not about this machine's GPU runs).
reserve=0
inputs=()
for f in "$out/sweep.jsonl" "$out/transformer.jsonl" "$out/knobs.jsonl" "$out/verify.jsonl" \
  "$out/benchmark.json"; do
  [ -s "$f" ] && inputs+=("$f")
done
step report "$REPORT_S" python -m bench report "${inputs[@]}" --out "$out/report"
exit $failed
