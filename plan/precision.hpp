#pragma once
// Precision of a plan's compute, as in torch.autocast (mixed precision): parameters, gradients and
// DDP buckets stay fp32; activations and the tensors sent between stages use the compute type.
#include <optional>
#include <string>

namespace parallax::plan {

enum class Precision { fp32, bf16, fp16 };

inline const char* name(Precision p) {
  switch (p) {
    case Precision::fp32: return "fp32";
    case Precision::bf16: return "bf16";
    case Precision::fp16: return "fp16";
  }
  return "?";
}

inline std::optional<Precision> precision_from_name(const std::string& s) {
  if (s == "fp32") return Precision::fp32;
  if (s == "bf16") return Precision::bf16;
  if (s == "fp16") return Precision::fp16;
  return std::nullopt;
}

/// Bytes of one activation element in this precision.
inline int activation_bytes(Precision p) { return p == Precision::fp32 ? 4 : 2; }
/// Bytes of one parameter or gradient element (fp32 master weights under autocast).
constexpr int kParamBytes = 4;

}  // namespace parallax::plan
