#!/usr/bin/env bash
# bench/fsdp_bench.sh's (c) transformer (LibTorch's encoder blocks, hidden 256) at each shard level, at
# vocabularies 8000 and 16000, and at 2, 6 and 12 blocks (none): rank 0's measured peak of live
# tensors against the plan's, and the difference in MiB (what grows with the blocks, not the
# vocabulary, is the count of a block). Run after building, from the repository root:
#   bench/capture.sh encoder-memory -- bash bench/encoder_memory.sh
set -euo pipefail
for spec in "6 8000 none" "6 8000 optimizer" "6 8000 gradients" "6 8000 full" "6 16000 none" "6 16000 full" "2 8000 none" "12 8000 none"; do
  set -- $spec
  build/parallax run scenarios/mlp-fashion-mnist-ddp2.yaml \
    --set "model={preset: transformer, layers: $1, hidden: 256, heads: 4, ffn: 1024, seq_len: 64, vocab: $2}" \
    --set data.source=synthetic --set data.batch_size=8 --set 'optimizer={kind: adamw, lr: 0.001}' \
    --set parallel.shard=$3 --set data.steps=6 --json 2>/dev/null |
    python3 -c 'import json,sys; m = json.load(sys.stdin)["memory"][0]; print("    layers %2s vocab %5s shard %-9s measured %7.2f MiB, plan %7.2f MiB: %+5.1f%% (%+.2f MiB)" % (sys.argv[1], sys.argv[2], sys.argv[3], m["measured_mb"], m["predicted_mb"], 100 * (m["predicted_mb"] / m["measured_mb"] - 1), m["predicted_mb"] - m["measured_mb"]))' "$1" "$2" "$3"
done
