#!/usr/bin/env bash
# The one-shot GPU check: builds Parallax against the machine's pip torch with CUDA, then trains,
# traces, calibrates and validates one plan on one GPU, and writes what it saw into one folder.
#
# Written for a machine with one NVIDIA H100 or H200, CUDA 13 and pip torch 2.x, no internet and
# no apt: the build dependencies it lacks come from the folder scripts/gpu_deps.sh fills (here,
# from Debian's packages; --deps DIR, default the repository's .gpu-deps). The whole check took 456 s
# on an H200 on 2026-12-04 with a binary built elsewhere (--parallax; tables 14 s, gemm-clock 70 s,
# run-llama 16 s, calibrate 62 s, calibrate-launch 29 s, the two validates 77 and 55 s); the build
# there adds about 80 s (docs/gpu.md). The titan steps, added since, should take about 150 s more
# (not yet run on a GPU): with --budget 515 the last steps (whatif, the two-rank runs) may not start.
#
#   bash bench/gpu_check.sh [--out DIR] [--deps DIR] [--parallax BIN] [--fallback BIN] [--jobs N] [--budget S] [--dry-run]
#
# --parallax BIN skips the build and checks BIN; --fallback BIN is checked only if the build fails
# (a binary built elsewhere against the same torch version, so that a build problem on a GPU
# machine lent for minutes does not cost the measurements; the summary says which ran). --budget S
# starts no step once S seconds have passed since the check began (each one left is marked
# "skipped, over the budget"), so that the summary and files are written within a machine's
# time limit rather than lost with it; the order of the steps is their priority.
#
# Steps (each is timed, logged, and marked ok or FAILED in the summary; one failing does not stop
# the others):
#   facts       the GPU, driver, torch and CUDA versions
#   build       cmake -DPARALLAX_TORCH=python -DPARALLAX_REQUIRE_CUDA=ON, target parallax only
#   tables      `parallax calibrate --tables --base SHIPPED` (GPU only): the compute tables measured on
#               this GPU (GEMMs over the shipped grid's shapes in bf16, fp16 and fp8, memory-bound kernels,
#               flash attention by length), written as a profile (tables.yaml) and set beside the
#               shipped profile's figures (tables.txt)
#   titan-M     bench/torch_llama_step.py: four of Llama 3.1 8B's blocks with its embedding and head
#               (bench/data/gpu-titan.yaml: sequence 8192, batch 2, bf16) trained in plain PyTorch as
#               torchtitan trains them, compiled and eager (M), 15 s and then profiled, then 5 s idle and
#               profiled again; titan-M-kinds and titan-M-burst-kinds: `calibrate --from-trace` of each
#               trace against the shipped profile, kernels by kind (GEMMs, flash attention, memory-bound)
#               measured over the compute model's, after the warm-up and after the idle (issue 56)
#   run-P       `parallax run` of bench/data/gpu-transformer.yaml on the GPU at precision P (fp32,
#               bf16, fp16: the loss scaler's scale and skipped steps are in its JSON), traced
#   torch-P     the same plan in plain PyTorch eager (bench/torch_eager_step.py) at precision P: its
#               losses against Parallax's and Parallax's step over torch's
#   gemm-clock  bench/gemm_clock.py: bf16 GEMMs of three shapes in short bursts (as the profiles' tables
#               were measured) and for 15 s without pause, with the SM clock and power nvidia-smi reads
#               meanwhile: the fraction of the tables' rate a busy GPU keeps (device.compute.clock_fraction)
#   run-llama   `parallax run` of bench/data/gpu-llama.yaml: two of Llama 3.1 8B's blocks at their width
#               (sequence 4096, bf16), traced; llama-kinds: `calibrate --from-trace` of that trace against
#               the GPU's shipped profile, the GEMMs' and the memory-bound kernels' measured time over
#               the compute model's at these sizes (issue 56: what a real step loses beside the tables)
#   calibrate   `parallax calibrate --base h100-nvlink-ib` on the GPU (CUDA events; each layer's kept
#               bytes from the CUDA allocator; fp16's loss scaler)
#   calibrate-launch  the same with --launch --quick in bf16 (GPU only): the device's time with the GPU
#               kept busy ahead and the host's launches apart; validate's configurations predicted
#               with it are the summary's "launch" column
#   memory      each run's peak of allocated bytes against the plan's, from the shipped profile
#               (the layers' activations counted) and from the calibrated one (measured)
#   validate    8 configurations, each run for real twice (gradient accumulation 1/2/4,
#               micro-batches 16/8/4, activation checkpointing, bf16, fp16) without CUPTI, each
#               predicted from the GPU calibration and from the shipped h100 profile (datasheet);
#               validate-bf16: the same sweeps but precision, in bf16
#   whatif      what if from a measured run: the shipped profile, and the calibrated one, each
#               fitted to validate's two runs of its first configuration (`parallax calibrate
#               --from-trace`); validate's configurations at that precision predicted from the fits
#               and set against their measured steps (bf16-whatif: the same for validate-bf16)
#   nccl-P2     two ranks on the one GPU over NCCL, pipeline 2 and then data 2, each rank its own
#               NCCL_HOSTID (NCCL refuses two ranks on one GPU otherwise): losses against one
#               rank's. Their timings mean nothing and are not reported.
# Then bench/gpu_check_report.py writes into DIR (default ./gpu-check-out): summary.md,
# figures.json, log.txt, calibrated.yaml, tables.yaml, the fp32 and bf16 traces (gzipped) and
# extras.tar.gz (validate.json, validate-bf16.json, the launch calibration and what if's fitted
# profiles): 8 files, what a GPU machine lent here gives back at most.
#
# --dry-run runs the same steps here, on CPU ranks over Gloo, with a plan shrunk to seconds
# (bench/data/gpu-transformer-dry-run.yaml) and the binary of the ordinary build (build/parallax,
# or --parallax): fp16 is fp32 with the loss scaler on (the CPU has no fp16 autocast), and the
# two-rank runs use Gloo. CI runs it, so the script itself is tested without a GPU.
#
# Exit status: 0 when every step ran and every check that can fail held (losses finite, the
# two-rank losses equal one rank's, on a GPU kernels traced); 1 otherwise; 2 for bad flags.
set -uo pipefail
caller=$(pwd)
cd "$(dirname "$0")/.."

out=./gpu-check-out
deps=""
parallax=""
fallback=""
jobs=$(nproc 2>/dev/null || echo 4)
budget=""
dry_run=0
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out="${2:?--out needs a folder}"; shift 2 ;;
    --deps) deps="${2:?--deps needs a folder}"; shift 2 ;;
    --parallax) parallax="${2:?--parallax needs a binary}"; shift 2 ;;
    --fallback) fallback="${2:?--fallback needs a binary}"; shift 2 ;;
    --jobs) jobs="${2:?--jobs needs a number}"; shift 2 ;;
    --budget) budget="${2:?--budget needs seconds}"; shift 2 ;;
    --dry-run) dry_run=1; shift ;;
    -h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu_check: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done

# Paths given are the caller's, whose folder is not the repository's.
absolute() { case "$1" in /*) echo "$1" ;; *) echo "$caller/$1" ;; esac; }
out=$(absolute "$out")
[ -z "$parallax" ] || parallax=$(absolute "$parallax")
[ -z "$fallback" ] || fallback=$(absolute "$fallback")
if [ -n "$deps" ]; then deps=$(absolute "$deps"); else deps="$(pwd)/.gpu-deps"; fi
mkdir -p "$out" || { echo "gpu_check: cannot create $out" >&2; exit 2; }
out=$(cd "$out" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/gpu-check.XXXXXX")
trap 'rm -rf "$work"' EXIT
log="$out/log.txt"
: >"$log"
status="$work/steps.tsv"  # step, ok|FAILED, seconds
: >"$status"

say() { echo "gpu_check: $*" | tee -a "$log" >&2; }

# step NAME TIMEOUT_S COMMAND...: runs it with its output in the log, records ok/FAILED and time.
# Past --budget it runs nothing and records the step as skipped.
step() {
  local name=$1 limit=$2
  shift 2
  if [ -n "$budget" ] && [ "$SECONDS" -ge "$budget" ]; then
    echo -e "$name\tskipped, over the budget of ${budget} s\t0" >>"$status"
    say "   $name skipped: ${SECONDS} s of the ${budget} s budget spent"
    return 1
  fi
  # No step runs past the budget's end: the report still has to be written.
  if [ -n "$budget" ] && [ $((budget - SECONDS)) -lt "$limit" ]; then limit=$((budget - SECONDS)); fi
  say "== $name: $*"
  local t0=$SECONDS rc=0
  timeout --kill-after=10 "$limit" "$@" >>"$log" 2>&1 || rc=$?
  local took=$((SECONDS - t0))
  if [ $rc -eq 0 ]; then
    echo -e "$name\tok\t$took" >>"$status"
    say "   $name ok (${took} s)"
  else
    echo -e "$name\tFAILED (exit $rc$([ $rc -eq 124 ] && echo ", over ${limit} s"))\t$took" >>"$status"
    say "   $name FAILED (exit $rc, ${took} s)"
  fi
  return $rc
}

# What each run's JSON goes to: stdout of `parallax ... --json`, kept apart from the log.
json_step() {
  local name=$1 limit=$2 into=$3
  shift 3
  step "$name" "$limit" bash -c '"$@" >"$0"' "$into" "$@"
}

if [ $dry_run -eq 1 ]; then
  scenario=bench/data/gpu-transformer-dry-run.yaml
  llama=bench/data/gpu-llama-dry-run.yaml
  titan=bench/data/gpu-titan-dry-run.yaml
  titan_times=(--warmup-seconds 0.3 --idle-seconds 0.1 --profile-steps 3)
  shipped=cpu-host
  base=cpu-host
  datasheet=cpu-host
  parallax=${parallax:-build/parallax}
  precisions=(fp32 bf16 fp16)
  calibrate_flags=(--quick --precision bf16)
  precision_sweep=parallel.precision=bf16
  steps=8
  repeats=1
  heads=4
  run_steps=8
  # The torch side: the pip torch of CI's second half where it is there.
  torch_python=${PYTHON:-.venv-torch/bin/python3}
  torch_device=cpu
else
  scenario=bench/data/gpu-transformer.yaml
  llama=bench/data/gpu-llama.yaml
  titan=bench/data/gpu-titan.yaml
  titan_times=(--warmup-seconds 15 --idle-seconds 5 --profile-steps 3)
  # The shipped profile of the GPU at hand (the H200's memory differs from the H100's; their tables agree).
  shipped=h100-nvlink-ib
  nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | grep -q H200 && shipped=h200-nvlink-ib
  base=h100-nvlink-ib
  datasheet=h100-nvlink-ib
  precisions=(fp32 bf16 fp16)
  calibrate_flags=(--precision bf16,fp16)
  precision_sweep=parallel.precision=bf16,fp16
  steps=15
  repeats=2
  heads=16
  run_steps=20
  torch_python=${PYTHON:-python3}
  torch_device=cuda
fi

# --- facts ---
{
  echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
  # PARALLAX_COMMIT: where the tree came without its history (a copy made for a GPU machine).
  echo "commit: ${PARALLAX_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (with uncommitted changes)')}"
  echo "host: $(hostname), $(nproc) cores"
  if command -v nvidia-smi >/dev/null; then
    echo "gpu: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -1)"
  else
    echo "gpu: none (nvidia-smi not found)"
  fi
  echo "torch: $(python3 -c 'import torch; print(torch.__version__, "cuda", torch.version.cuda, "gpus", torch.cuda.device_count())' 2>&1 | tail -1)"
  echo "dry_run: $dry_run"
} >"$work/facts.txt"
cat "$work/facts.txt" | tee -a "$log" >&2

# --- build ---
if [ -z "$parallax" ]; then
  build=build-gpu
  prefix="$deps"
  [ -d "$deps" ] || say "no $deps folder (scripts/gpu_deps.sh fills it): using the machine's own packages"
  # CMake 4 refuses config files that ask for compatibility with CMake < 3.5; Debian's ask for less.
  step configure 300 cmake -S . -B "$build" -G Ninja -DPARALLAX_TORCH=python -DPARALLAX_PYTHON="$(command -v python3)" \
    -DPARALLAX_REQUIRE_CUDA=ON -DPARALLAX_BUILD_GUI=OFF -DPARALLAX_BUILD_TESTS=OFF \
    -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_POLICY_VERSION_MINIMUM=3.5
  if step build 600 cmake --build "$build" --target parallax -j "$jobs"; then
    parallax="$build/parallax"
    echo "binary: built here ($build/parallax)" >>"$work/facts.txt"
  elif [ -n "$fallback" ]; then
    parallax="$fallback"
    say "the build failed: checking the fallback binary $fallback"
    echo "binary: the build FAILED; checked the fallback $fallback, built elsewhere" >>"$work/facts.txt"
  else
    parallax="$build/parallax"
  fi
else
  echo "binary: $parallax (given)" >>"$work/facts.txt"
fi
if [ ! -x "$parallax" ]; then
  say "no parallax binary at $parallax: nothing more to check"
  echo -e "binary\tFAILED (none at $parallax)\t0" >>"$status"
  python3 bench/gpu_check_report.py "$work" "$out" "$dry_run"
  exit 1
fi
# Runs started below find the deps' shared libraries (yaml-cpp) and torch's, also when the binary
# was built elsewhere (its RUNPATH then names folders this machine lacks).
torch_lib=""
[ $dry_run -eq 1 ] || torch_lib=$(python3 -c 'import os, torch; print(os.path.join(os.path.dirname(torch.__file__), "lib"))' 2>/dev/null || true)
export LD_LIBRARY_PATH="$deps/lib${torch_lib:+:$torch_lib}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

# --- the compute tables measured on this GPU, beside the shipped profile's (issue 56) ---
[ $dry_run -eq 1 ] || step tables 150 bash -c '"$0" calibrate --tables --base "$1" -o "$2/tables.yaml" 2>"$2/tables.txt"
  rc=$?; cat "$2/tables.txt" >&2; exit $rc' "$parallax" "$shipped" "$work"

# --- Llama blocks trained as torchtitan trains them, compiled and eager, for seconds on end and then after an
# idle: a real step's kernels by kind against the shipped profile's compute model (issue 56's kernel short) ---
if "$torch_python" -c 'import torch' 2>/dev/null; then
  "$parallax" plan "$titan" --json >"$work/plan-titan.json" 2>>"$log"
  for mode in compiled eager; do
    titan_flags=(--device "$torch_device" "${titan_times[@]}")
    kernels=eager
    [ $mode = compiled ] && titan_flags+=(--compile) && kernels=fused
    step "titan-$mode" 240 "$torch_python" bench/torch_llama_step.py "$work/plan-titan.json" "${titan_flags[@]}" \
      --trace "$work/trace-titan-$mode.json" --burst-trace "$work/trace-titan-$mode-burst.json" -o "$work/titan-$mode.json"
    for when in "" -burst; do
      [ -s "$work/trace-titan-$mode$when.json" ] && json_step "titan-$mode$when-kinds" 60 "$work/titan-$mode$when-kinds.txt" \
        "$parallax" calibrate --from-trace "$work/trace-titan-$mode$when.json" "$titan" --set hardware="$shipped" \
        --set model.kernels=$kernels -o "$work/whatif-titan-$mode$when.yaml"
    done
  done
fi

# --- one GPU: each precision, traced ---
for p in "${precisions[@]}"; do
  env_extra=()
  set_p=$p
  if [ $dry_run -eq 1 ] && [ "$p" = fp16 ]; then
    env_extra=(PARALLAX_LOSS_SCALER=65536:2000)  # the CPU has no fp16 autocast: fp32 with the scaler
    set_p=fp32
  fi
  json_step "run-$p" 120 "$work/run-$p.json" env "${env_extra[@]}" "$parallax" run "$scenario" \
    --set parallel.precision="$set_p" -o "$work/trace-$p.json" --json
done

# --- the same plan in plain PyTorch eager: the executor's own cost, like for like ---
if "$torch_python" -c 'import torch' 2>/dev/null; then
  "$parallax" plan "$scenario" --json >"$work/plan.json" 2>>"$log"
  for p in "${precisions[@]}"; do
    torch_p=$p
    [ $dry_run -eq 1 ] && [ "$p" = fp16 ] && torch_p=fp32  # as Parallax's dry fp16 run: no fp16 on the CPU
    json_step "torch-$p" 120 "$work/torch-$p.json" "$torch_python" bench/torch_eager_step.py "$work/plan.json" \
      --device "$torch_device" --precision "$torch_p" --steps "$run_steps" --heads "$heads" --seed 1 --lr 0.0001 --weight-decay 0.01
  done
else
  say "no torch in $torch_python: the PyTorch eager side is not run"
  echo "torch: no python with torch here ($torch_python); the PyTorch eager rows are not run" >>"$work/facts.txt"
fi

# --- GEMMs in bursts and without pause: the clock a busy GPU keeps under its power limit ---
if "$torch_python" -c 'import torch' 2>/dev/null; then
  if [ $dry_run -eq 1 ]; then
    gemm_flags=(--device cpu --dtype fp32 --seconds 0.4 --idle 0.1 --shapes 256x256x256,256x512x128)
  else
    gemm_flags=(--device cuda --dtype bf16 --seconds 15)
  fi
  step gemm-clock 180 "$torch_python" bench/gemm_clock.py "${gemm_flags[@]}" -o "$work/gemm-clock.json"
fi

# --- a Llama block at its width: its kernels by kind against the shipped profile's compute model ---
json_step run-llama 180 "$work/run-llama.json" "$parallax" run "$llama" -o "$work/trace-llama.json" --json
[ -s "$work/trace-llama.json" ] && json_step llama-kinds 60 "$work/llama-kinds.txt" "$parallax" calibrate \
  --from-trace "$work/trace-llama.json" "$llama" --set hardware="$shipped" -o "$work/whatif-llama.yaml"

# --- calibrate on the GPU ---
step calibrate 240 "$parallax" calibrate "$scenario" --base "$base" "${calibrate_flags[@]}" -o "$work/calibrated.yaml"
# The device's time and the host's launches apart (issue 56's launch-bound steps; GPU only, --quick
# to keep the check short). Its predictions of validate's configurations are the "launch" column.
[ $dry_run -eq 1 ] || step calibrate-launch 300 "$parallax" calibrate "$scenario" --base "$base" --launch --quick \
  --precision bf16 -o "$work/calibrated-launch.yaml"

# --- memory: the plan with the calibrated profile (the layers' kept bytes from the CUDA allocator) ---
if [ -f "$work/calibrated.yaml" ]; then
  for p in "${precisions[@]}"; do
    set_p=$p
    [ $dry_run -eq 1 ] && [ "$p" = fp16 ] && set_p=fp32
    "$parallax" plan "$scenario" --set hardware="$work/calibrated.yaml" --set parallel.precision="$set_p" --json \
      >"$work/plan-calibrated-$p.json" 2>>"$log" || echo -e "plan-calibrated-$p\tFAILED\t0" >>"$status"
  done
fi

# --- validate: the calibrated prediction against real runs; then the datasheet's and what if's ---
# (three precisions, then the same sweeps but precision in bf16, the precision models train at)
# Each validate keeps its runs' traces: what if is fitted to those of its first configuration.
validate_set() {  # NAME [--set ... | --sweep ...]: validate's runs into $work/NAME.json, traces in $work/NAME-traces
  local name=$1
  shift
  # Without CUPTI, as calibrate measured the layers: its activity records cost launch time.
  json_step "$name" 300 "$work/$name.json" env PARALLAX_CUPTI=0 "$parallax" validate "$scenario" --profile "$work/calibrated.yaml" \
    --sweep parallel.grad_accumulation=1,2,4 --sweep parallel.chunks=2,4 --sweep parallel.activation_checkpointing=true "$@" \
    --steps "$steps" --repeats "$repeats" --keep-traces "$work/$name-traces" --json
}

# predict NAME VALIDATE PROFILE [SET...]: each configuration VALIDATE ran, simulated with PROFILE
# and the SETs, into $work/NAME-I.json (I: the configuration's place in VALIDATE). A PROFILE fitted
# by what if predicts only the configurations at the precision it was fitted at: its layer figures
# are per precision, so another precision's layers would keep the datasheet's.
predict() {
  local name=$1 validate=$2 profile=$3
  shift 3
  local i=0 overrides
  while read -r overrides; do
    if [[ $name == *whatif* && $overrides == *parallel.precision=* ]]; then i=$((i + 1)); continue; fi
    local sets=()
    for o in $overrides; do sets+=(--set "$o"); done
    "$parallax" simulate "$scenario" "$@" "${sets[@]}" --set hardware="$profile" --set data.steps="$steps" --json \
      >"$work/$name-$i.json" 2>>"$log" || echo -e "$name-$i\tFAILED\t0" >>"$status"
    i=$((i + 1))
  done < <(python3 -c 'import json, sys
for c in json.load(open(sys.argv[1]))["configurations"]: print(" ".join(c["overrides"]))' "$work/$validate.json")
}

# what_if NAME VALIDATE [SET...]: the shipped profile and the calibrated one each fitted to VALIDATE's
# runs of its first configuration (`calibrate --from-trace`), then its configurations predicted.
what_if() {
  local name=$1 validate=$2
  shift 2
  local runs=("$work/$validate-traces"/0.run*.json)
  if [ ! -s "${runs[0]}" ]; then
    echo -e "$name\tFAILED (validate kept no trace of its first configuration)\t0" >>"$status"
    return 1
  fi
  local from=()
  for r in "${runs[@]}"; do from+=(--from-trace "$r"); done
  step "$name-datasheet" 60 "$parallax" calibrate "${from[@]}" "$scenario" "$@" -o "$work/$name-datasheet.yaml" &&
    predict "$name-datasheet" "$validate" "$work/$name-datasheet.yaml" "$@"
  step "$name-calibrated" 60 "$parallax" calibrate "${from[@]}" "$scenario" "$@" --set hardware="$work/calibrated.yaml" \
    -o "$work/$name-calibrated.yaml" && predict "$name-calibrated" "$validate" "$work/$name-calibrated.yaml" "$@"
}

if [ -f "$work/calibrated.yaml" ]; then
  validate_set validate --sweep "$precision_sweep"
  validate_set validate-bf16 --set parallel.precision=bf16
fi
if [ -s "$work/validate.json" ]; then
  predict datasheet validate "$datasheet"
  [ -f "$work/calibrated-launch.yaml" ] && predict launch validate "$work/calibrated-launch.yaml"
  what_if whatif validate
fi
if [ -s "$work/validate-bf16.json" ]; then
  predict bf16-datasheet validate-bf16 "$datasheet" --set parallel.precision=bf16
  [ -f "$work/calibrated-launch.yaml" ] && predict bf16-launch validate-bf16 "$work/calibrated-launch.yaml" --set parallel.precision=bf16
  what_if bf16-whatif validate-bf16 --set parallel.precision=bf16
fi

# --- two ranks on one GPU over NCCL (Gloo in the dry run): losses only ---
two_ranks() {
  local name=$1
  shift
  local port
  port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  local common=(WORLD_SIZE=2 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port PARALLAX_TIMEOUT=60
                NCCL_SOCKET_IFNAME=lo NCCL_IB_DISABLE=1)
  env "${common[@]}" RANK=1 NCCL_HOSTID=parallax-check-1 "$parallax" run "$scenario" "$@" >/dev/null 2>"$work/$name-rank1.err" &
  local other=$!
  env "${common[@]}" RANK=0 NCCL_HOSTID=parallax-check-0 "$parallax" run "$scenario" "$@" --json
  local rc=$?
  wait $other || rc=$?
  cat "$work/$name-rank1.err" >&2
  return $rc
}
export -f two_ranks
export work parallax scenario
json_step nccl-pipeline2 90 "$work/nccl-pipeline2.json" two_ranks nccl-pipeline2 --set parallel.pipeline=2
json_step nccl-data2 90 "$work/nccl-data2.json" two_ranks nccl-data2 --set parallel.data=2 --set data.batch_size=8

# --- the summary ---
python3 bench/gpu_check_report.py "$work" "$out" "$dry_run"
