#include "exec/gpu_activity.hpp"

#include <cstdlib>
#include <map>
#include <string>

#ifdef PARALLAX_HAVE_CUPTI
#include "profiler/cupti_tracer.hpp"
#endif

namespace parallax::exec {

#ifdef PARALLAX_HAVE_CUPTI
namespace {

class CuptiActivity : public GpuActivity {
 public:
  explicit CuptiActivity(std::unique_ptr<profiler::CuptiTracer> cupti) : cupti_(std::move(cupti)) {}

  // Kernels launched inside the action carry (step, index) as their external correlation id.
  void enter(int64_t step, size_t index, size_t actions_per_step) override {
    cupti_->push(static_cast<uint64_t>(step) * actions_per_step + index);
  }
  void leave() override { cupti_->pop(); }

  void collect(int64_t step, int rank, const std::vector<schedule::Action>& actions,
               const std::vector<timeline::DeviceSpan>& timed, std::vector<timeline::DeviceSpan>* out) override {
    std::map<uint64_t, std::pair<schedule::Action, int32_t>> ids;
    for (size_t i = 0; i < actions.size(); ++i)
      ids[static_cast<uint64_t>(step) * actions.size() + i] = {actions[i], static_cast<int32_t>(step)};
    for (const auto& a : profiler::attribute(cupti_->flush(), ids, cupti_->cupti_to_host_ns(), timed)) {
      timeline::DeviceSpan d;
      d.rank = rank;
      d.lane = a.lane;
      d.name = a.activity.name;
      d.start = plan::Time::ns(a.host_start_ns);
      d.end = plan::Time::ns(a.host_end_ns);
      d.attributed = a.attributed;
      d.action = a.action;
      d.step = a.attributed ? a.step : static_cast<int32_t>(step);
      d.bytes = a.activity.bytes;
      out->push_back(std::move(d));
    }
  }

 private:
  std::unique_ptr<profiler::CuptiTracer> cupti_;
};

}  // namespace
#endif

std::unique_ptr<GpuActivity> GpuActivity::start(int rank) {
#ifdef PARALLAX_HAVE_CUPTI
  if (const char* c = std::getenv("PARALLAX_CUPTI"); c && std::string(c) == "0") return nullptr;
  if (auto cupti = profiler::CuptiTracer::start(/*quiet=*/rank != 0)) return std::make_unique<CuptiActivity>(std::move(cupti));
#else
  (void)rank;
#endif
  return nullptr;
}

}  // namespace parallax::exec
