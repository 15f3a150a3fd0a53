#include "plan/framework.hpp"

namespace parallax::plan {

const char* name(Framework f) {
  switch (f) {
    case Framework::pytorch: return "pytorch";
    case Framework::megatron: return "megatron";
    case Framework::torchtitan: return "torchtitan";
    case Framework::deepspeed: return "deepspeed";
  }
  return "?";
}

const std::vector<Framework>& frameworks() {
  static const std::vector<Framework> all = {Framework::pytorch, Framework::megatron, Framework::torchtitan, Framework::deepspeed};
  return all;
}

const FrameworkSemantics& semantics(Framework f) {
  // Each trainer's defaults, not its recipes: Megatron-LM's --use-distributed-optimizer is a flag
  // (off unless given), so the framework leaves it off; set parallel.shard: optimizer for it.
  // All four order ranks tensor-innermost, data, then pipeline outermost (Megatron-LM's tp-dp-pp;
  // torchtitan's device mesh [pp, dp, cp, tp]), Parallax's default rank order. The three trainers
  // schedule 1F1B by default (Megatron-core's forward_backward_pipelining_without_interleaving,
  // torchtitan's pipeline_parallel_schedule "1F1B", DeepSpeed's TrainSchedule), and without a
  // pipeline run each micro-batch's forward and backward in turn, one in flight, which is 1F1B's
  // order at one stage (GPipe's default had held every micro-batch's activations).
  static const FrameworkSemantics pytorch{{}, {false, Loss::eager}, "torch.distributed.pipelining and DDP under torch.autocast (Parallax's defaults)"};
  static const FrameworkSemantics megatron{
      {{"parallel.p2p", "megatron"},
       {"parallel.context_attention", "megatron"},
       {"parallel.schedule", "1f1b"},
       {"parallel.master_weights", "true"},
       {"parallel.rank_order", "tp-dp-pp"},
       {"parallel.overlap_grad_reduce", "false"},
       {"parallel.ddp_buckets", "megatron"},
       {"parallel.reduce_scatter_every_microbatch", "true"}},
      {true, Loss::megatron, true},
      "Megatron-LM / Megatron-core: receives posted with their sends, 16-bit weights with fp32 masters, gradients reduced "
      "after the backward (--overlap-grad-reduce is off by default; with it, in Megatron-core's DDP buckets), sharded "
      "gradients reduce-scattered every micro-batch (Megatron-FSDP delays the reduction only for no_shard and optim), "
      "Transformer Engine's flash attention (and its ring attention under context parallelism), its vocabulary-parallel cross entropy (unfused, --cross-entropy-loss-fusion "
      "being off by default), and its column-parallel linears' backward collectives beside their own GEMMs (under "
      "sequence parallelism the input's re-gather and the input gradient's reduce-scatter, without it that gradient's "
      "all-reduce), and a MoE router's weights scaling its experts' activation (weighted SwiGLU)"};
  static const FrameworkSemantics torchtitan{
      {{"parallel.p2p", "pytorch"},
       {"parallel.schedule", "1f1b"},
       {"parallel.master_weights", "false"},
       {"parallel.rank_order", "tp-dp-pp"},
       {"parallel.reduce_scatter_every_microbatch", "true"},
       {"parallel.bucket_cap_mb", "100"}},
      {true, Loss::eager},
      "torchtitan: torch.distributed.pipelining, fp32 parameters with bf16 compute (FSDP2's mixed precision), FSDP2 "
      "reduce-scattering every micro-batch without pipelining, DDP (replicate) in 100 MB buckets, "
      "scaled_dot_product_attention's flash kernel (under context parallelism torch's context_parallel)"};
  static const FrameworkSemantics deepspeed{
      {{"parallel.p2p", "pytorch"},
       {"parallel.schedule", "1f1b"},
       {"parallel.master_weights", "true"},
       {"parallel.rank_order", "tp-dp-pp"},
       {"parallel.overlap_grad_reduce", "false"},
       {"parallel.reduce_scatter_every_microbatch", "true"}},
      {false, Loss::megatron},
      "DeepSpeed: blocking pipeline sends, a 16-bit model with fp32 master weights in its optimizer, gradients all-reduced "
      "at the accumulation boundary after the backward (its engine's allreduce_gradients), ZeRO-2 and -3 reducing them "
      "every micro-batch, Megatron-DeepSpeed's vocabulary-parallel cross entropy"};
  switch (f) {
    case Framework::megatron: return megatron;
    case Framework::torchtitan: return torchtitan;
    case Framework::deepspeed: return deepspeed;
    case Framework::pytorch: break;
  }
  return pytorch;
}

int64_t padded_vocabulary(Framework f, int64_t vocab, int tensor) {
  if (f != Framework::megatron && f != Framework::deepspeed) return vocab;
  const int64_t multiple = kMegatronVocabMultiple * tensor;
  return (vocab + multiple - 1) / multiple * multiple;
}

}  // namespace parallax::plan
