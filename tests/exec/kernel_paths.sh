#!/usr/bin/env bash
# The executor's bf16 work again under the CPU's other kernel paths, so that a path CI's own
# processor does not take by default is still run: the counting allocator's [kernel-paths] test
# cases (raw_allocate, oneDNN matmuls, bf16 matmul) and a bf16 training run of a small transformer
# pipeline, once per setting:
#   ATEN_CPU_CAPABILITY=avx2, =avx512   ATen's vectorized CPU kernels (Debian's 1.13 takes avx2 by
#                                       default even on AVX-512 processors)
#   ONEDNN_MAX_CPU_ISA=AVX512_CORE      oneDNN as on AVX-512 processors without bf16 instructions
#                                       (Skylake and Cascade Lake Xeons): bf16 emulated
#   ONEDNN_MAX_CPU_ISA=AVX2             oneDNN as on AVX2-only processors (Zen 2 and 3): torch 2.x
#                                       only. 1.13 decides whether oneDNN runs a bf16 matmul from the
#                                       CPU's flags, not from oneDNN's limit, so on an AVX-512 CPU this
#                                       limit makes a combination no processor has (oneDNN is asked
#                                       for a bf16 kernel it was told not to use, and refuses).
# (DNNL_MAX_CPU_ISA is set beside ONEDNN_MAX_CPU_ISA: oneDNN 2.x's name for it.) Each setting is
# checked to be the path taken (ATen prints its capability, oneDNN its ISA under ONEDNN_VERBOSE).
# oneDNN's limit can only lower its path: where the CPU lacks AVX-512 the AVX512_CORE run says so
# and runs clamped. ATen's is not clamped: LibTorch 1.13 runs its avx512 kernels when told, and on a
# CPU without AVX-512 (AMD EPYC of family 25, Zen 3) dies of an illegal instruction, so that setting
# is left out there, saying so. The AVX512-BF16 and AMX paths run only on processors that have them
# (Zen 4 and 5, Sapphire Rapids and later), and nothing here can force them elsewhere.
#
#   tests/exec/kernel_paths.sh PARALLAX_TESTS PARALLAX SOURCE_DIR
set -uo pipefail
tests=$1 parallax=$2 src=$3
failed=0
has_avx512=0
# ATen's avx512 path needs AVX512F, BW, VL and DQ (cpuinfo, as ATen asks it).
flags=$(grep -m1 '^flags' /proc/cpuinfo)
if [[ $flags == *avx512f* && $flags == *avx512bw* && $flags == *avx512vl* && $flags == *avx512dq* ]]; then has_avx512=1; fi
echo "CPU: $(grep -m1 '^model name' /proc/cpuinfo | cut -d: -f2-), family $(grep -m1 '^cpu family' /proc/cpuinfo | cut -d: -f2 | tr -d ' ')," \
  "AVX-512: $has_avx512, AVX512-BF16: $([[ $flags == *avx512_bf16* ]] && echo 1 || echo 0), AMX: $([[ $flags == *amx_bf16* ]] && echo 1 || echo 0)"

fail() { echo "FAILED [$1]: $2"; failed=1; }

libtorch=$("$tests" "[kernel-paths]" 2>&1 | sed -n 's/^LibTorch \([0-9]*\).*/\1/p' | head -1)
echo "LibTorch line: ${libtorch:-?}"
settings=("ATEN_CPU_CAPABILITY=avx2" "ATEN_CPU_CAPABILITY=avx512" "ONEDNN_MAX_CPU_ISA=AVX512_CORE DNNL_MAX_CPU_ISA=AVX512_CORE")
if [[ $libtorch == 1 ]]; then
  echo "oneDNN held to AVX2: not run on LibTorch 1.x (see the top of this script)"
else
  settings+=("ONEDNN_MAX_CPU_ISA=AVX2 DNNL_MAX_CPU_ISA=AVX2")
fi

for setting in "${settings[@]}"; do
  echo "== $setting"
  if [[ $setting == ATEN_CPU_CAPABILITY=avx512 && $has_avx512 == 0 ]]; then
    echo "this CPU has no AVX-512: ATen's avx512 kernels cannot run here (not run: they would die of SIGILL)"
    continue
  fi
  # shellcheck disable=SC2086  # the setting is one or two NAME=VALUE words
  out=$(env $setting ONEDNN_VERBOSE=1 "$tests" "[kernel-paths]" 2>&1)
  rc=$?
  grep -v '^onednn_verbose,\(v1,\)\?\(exec\|create\|primitive\)' <<<"$out" | tail -n 15
  [[ $rc == 0 ]] || fail "$setting" "the [kernel-paths] test cases exited $rc"
  aten=$(sed -n 's/^ATen CPU capability: \([a-z0-9]*\).*/\1/p' <<<"$out" | head -1)
  isa=$(grep -o 'isa:.*' <<<"$out" | head -1)
  echo "ATen took: ${aten:-?}; oneDNN took: ${isa:-?}"
  case $setting in
    ATEN_CPU_CAPABILITY=avx2) [[ $aten == avx2 ]] || fail "$setting" "ATen ran '$aten', not avx2" ;;
    ATEN_CPU_CAPABILITY=avx512) [[ $aten == avx512 ]] || fail "$setting" "ATen ran '$aten', not avx512" ;;
    ONEDNN_MAX_CPU_ISA=AVX512_CORE*)
      # oneDNN names it "Intel AVX-512 with AVX512BW, AVX512VL, and AVX512DQ extensions".
      if [[ $has_avx512 == 1 ]]; then [[ $isa == *AVX-512*AVX512BW* && $isa != *bfloat16* ]] || fail "$setting" "oneDNN ran '$isa', not AVX-512 without bf16"
      else echo "this CPU has no AVX-512: oneDNN's AVX512_CORE path cannot be forced here (ran '$isa')"; fi ;;
    ONEDNN_MAX_CPU_ISA=AVX2*) [[ $isa == "isa:Intel AVX2" ]] || fail "$setting" "oneDNN ran '$isa', not Intel AVX2" ;;
  esac
  # A bf16 run of the executor: a 2-stage 1F1B pipeline of the small transformer on two CPU ranks.
  # shellcheck disable=SC2086
  run=$(env $setting "$parallax" run "$src/bench/data/gpu-transformer-dry-run.yaml" --set parallel.precision=bf16 \
    --set parallel.pipeline=2 --set parallel.chunks=2 --set parallel.schedule=1f1b --set data.steps=3 2>&1)
  rc=$?
  tail -n 4 <<<"$run"
  [[ $rc == 0 ]] || fail "$setting" "parallax run in bf16 exited $rc"
done
exit $failed
