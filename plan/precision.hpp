#pragma once
// Precision of a plan's compute, as in torch.autocast (mixed precision): parameters, gradients and
// DDP buckets stay fp32; activations and the tensors sent between stages use the compute type.
// fp8 is Transformer Engine's as Megatron-core runs it: the linear layers' GEMMs in fp8 with
// per-tensor scaling, everything else (attention, norms, activations kept) in bf16. Predict-only.
#include <optional>
#include <string>

namespace parallax::plan {

enum class Precision { fp32, bf16, fp16, fp8 };

inline const char* name(Precision p) {
  switch (p) {
    case Precision::fp32: return "fp32";
    case Precision::bf16: return "bf16";
    case Precision::fp16: return "fp16";
    case Precision::fp8: return "fp8";
  }
  return "?";
}

inline std::optional<Precision> precision_from_name(const std::string& s) {
  if (s == "fp32") return Precision::fp32;
  if (s == "bf16") return Precision::bf16;
  if (s == "fp16") return Precision::fp16;
  if (s == "fp8") return Precision::fp8;
  return std::nullopt;
}

/// Bytes of one activation element in this precision (fp8 keeps its activations in bf16).
inline int activation_bytes(Precision p) { return p == Precision::fp32 ? 4 : 2; }
/// The precision of what fp8 leaves out (attention, norms, the embedding and output layers): bf16
/// under fp8, else the precision itself.
inline Precision outside_fp8(Precision p) { return p == Precision::fp8 ? Precision::bf16 : p; }
/// Bytes of one parameter or gradient element (fp32 master weights under autocast).
constexpr int kParamBytes = 4;

}  // namespace parallax::plan
