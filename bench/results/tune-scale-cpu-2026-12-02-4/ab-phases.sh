#!/usr/bin/env bash
# Old (a30bc25) and new builds in turn, on this VM.
set -u
old_t=/work/scratch/tune_bench_old; new_t=/work/main/build/parallax_tune_bench
old_s=/work/scratch/sim_bench_old;  new_s=/work/main/build/parallax_sim_bench
echo "# $(date -u +%FT%TZ) old=a30bc25 new=$(git -C /work/main rev-parse --short HEAD); $(grep -m1 'model name' /proc/cpuinfo)"
for round in 1 2; do
  for side in old new; do
    t=old_t; [[ $side == new ]] && t=new_t
    echo "== round $round $side: --phases 1,024-rank job"; ${!t} --phases /work/scratch/big1024.yaml 2>&1 | grep -E "plan |simulate"
    echo "== round $round $side: --phases 405B job"; ${!t} --phases 2>&1 | grep -E "plan |simulate"
  done
done
for round in 1 2; do
  for side in old new; do
    t=old_t; [[ $side == new ]] && t=new_t
    echo "== round $round $side: --big"; ${!t} --big 2>&1 | grep -E "pruned|exhaustive"
  done
done
for round in 1 2 3; do
  for side in old new; do
    s=old_s; [[ $side == new ]] && s=new_s
    echo "== round $round $side: 16,384-rank step"; ${!s} --step --replicas 2048 --repeat 5 2>&1 | grep -E "simulate|events|predicted"
  done
done
echo "# end $(date -u +%FT%TZ)"
