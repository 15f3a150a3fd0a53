// The counting CPU allocator (exec/host_memory.hpp) as LibTorch's own code uses an allocator: through
// raw_allocate and raw_deallocate (oneDNN's buffers, on every CPU, and its bf16 kernels' on
// AVX512-BF16 processors) as well as through tensors, with the peak of live bytes exact.
//
// The [kernel-paths] cases run again under other CPU kernel paths (tests/exec/kernel_paths.sh):
// ATen's avx2 and avx512 kernels, and oneDNN held to older ISAs (AVX-512 without bf16 instructions,
// and AVX2). That script checks, from what these cases print, that each path asked for is the one
// taken. No setting can raise a path above the CPU's own: the AVX512-BF16 and AMX paths run only
// where the processor has them (Zen 4 and 5, Sapphire Rapids and later), so raw_allocate, which
// those paths call and which the old allocator failed, is called directly here, on every CPU.
#include <ATen/ATen.h>
#include <ATen/Config.h>
#include <ATen/Version.h>
#include <c10/core/CPUAllocator.h>
#include <torch/version.h>

#include <catch2/catch.hpp>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>

#include "exec/host_memory.hpp"

namespace exec = parallax::exec;

namespace {

// The path ATen's CPU kernels dispatch to, in ATEN_CPU_CAPABILITY's words. Read from show_config()
// ("CPU capability usage: AVX2"): at::native::get_cpu_capability is not exported by 1.13, and
// at::get_cpu_capability exists only from 2.x.
std::string aten_cpu_capability() {
  const std::string config = at::show_config(), key = "CPU capability usage: ";
  const size_t at_key = config.find(key);
  if (at_key == std::string::npos) return "unknown";
  std::string path = config.substr(at_key + key.size(), config.find('\n', at_key) - at_key - key.size());
  if (path == "NO AVX" || path == "DEFAULT") return "default";
  for (char& c : path) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return path;
}

constexpr int64_t kMiB = 1 << 20;

}  // namespace

TEST_CASE("host memory: raw_allocate and raw_deallocate through the counting allocator, counted exactly", "[exec][kernel-paths]") {
  exec::count_tensor_memory();
  c10::Allocator* cpu = c10::GetCPUAllocator();
  const int64_t before = exec::tensor_bytes();
  exec::reset_peak_tensor_bytes();

  // LibTorch asserts here that the DataPtr's context is its data pointer.
  void* p = cpu->raw_allocate(3 * kMiB);
  REQUIRE(p != nullptr);
  CHECK(reinterpret_cast<uintptr_t>(p) % 64 == 0);  // LibTorch's CPU alignment, kept behind the header
  std::memset(p, 0x5a, 3 * kMiB);                   // the whole block is ours to write
  CHECK(exec::tensor_bytes() - before == 3 * kMiB);
  cpu->raw_deallocate(p);
  CHECK(exec::tensor_bytes() == before);
  CHECK(exec::peak_tensor_bytes() - before == 3 * kMiB);

  // A zero-byte allocation holds nothing and frees cleanly.
  void* empty = cpu->raw_allocate(0);
  cpu->raw_deallocate(empty);
  CHECK(exec::tensor_bytes() == before);
}

TEST_CASE("host memory: the peak of live tensors is the sum of the tensors held at once", "[exec][kernel-paths]") {
  exec::count_tensor_memory();
  const int64_t before = exec::tensor_bytes();
  exec::reset_peak_tensor_bytes();
  {
    at::Tensor a = at::empty({kMiB / 4}, at::kFloat);  // 1 MiB
    at::Tensor b = at::empty({kMiB / 2}, at::kFloat);  // 2 MiB
    CHECK(exec::tensor_bytes() - before == 3 * kMiB);
  }
  CHECK(exec::tensor_bytes() == before);
  { at::Tensor c = at::empty({kMiB / 2}, at::kBFloat16); }  // 1 MiB, after the others are gone
  CHECK(exec::peak_tensor_bytes() - before == 3 * kMiB);
}

TEST_CASE("host memory: bf16 and oneDNN matmuls run under the counting allocator and free what they take", "[exec][kernel-paths]") {
  const char* want = std::getenv("ATEN_CPU_CAPABILITY");
  std::cout << "LibTorch " << TORCH_VERSION << std::endl;
  std::cout << "ATen CPU capability: " << aten_cpu_capability() << " (ATEN_CPU_CAPABILITY=" << (want ? want : "unset")
            << ")" << std::endl;

  exec::count_tensor_memory();
  at::manual_seed(7);
  const at::Tensor a32 = at::randn({96, 256}).to(at::kBFloat16).to(at::kFloat);  // values bf16 holds exactly
  const at::Tensor b32 = at::randn({256, 128}).to(at::kBFloat16).to(at::kFloat);
  const at::Tensor reference = at::matmul(a32, b32);
  const int64_t before = exec::tensor_bytes();
  exec::reset_peak_tensor_bytes();
  {
    // bf16 matmul: on AVX512-BF16 CPUs through oneDNN, whose buffers come from raw_allocate.
    const at::Tensor a = a32.to(at::kBFloat16), b = b32.to(at::kBFloat16);
    const at::Tensor c = at::matmul(a, b);
    REQUIRE(c.scalar_type() == at::kBFloat16);
    // bf16 keeps 8 bits of mantissa. Through oneDNN the products are summed in fp32 and the result
    // rounded once (relative 2^-8); without AVX512-BF16, LibTorch 1.13's own bf16 GEMM rounds its
    // running sums to bf16 as well, about sqrt(256) x 2^-8 = 6% in the worst rows (3.6% measured on
    // an AMD EPYC of family 25). A wrong layout or an unwritten buffer is off by the whole magnitude.
    const double scale = reference.abs().max().item<double>();
    CHECK((c.to(at::kFloat) - reference).abs().max().item<double>() < 0.1 * scale);
    // The three tensors, at least, were live at once: a, b (bf16) and c.
    CHECK(exec::peak_tensor_bytes() - before >= (96 * 256 + 256 * 128 + 96 * 128) * 2);

    // oneDNN's own tensors on every CPU: to_mkldnn allocates them through raw_allocate.
    REQUIRE(at::hasMKLDNN());
    const at::Tensor x = a32.to_mkldnn(), w = b32.t().contiguous().to_mkldnn();
    const at::Tensor y = at::mkldnn_linear(x, w).to_dense();
    CHECK(at::allclose(y, reference, 1e-4, 1e-3));
  }
  CHECK(exec::tensor_bytes() == before);  // everything oneDNN and the matmuls took came back
}
