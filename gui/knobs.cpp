#include "gui/knobs.hpp"

namespace parallax::gui {

std::vector<std::string> KnobValues::overrides(const plan::Settings& file) const {
  std::vector<std::string> o = plan::set_flags(plan::overrides(file, settings));
  if (!hardware.empty()) o.push_back("hardware=" + hardware);
  return o;
}

std::string knob_of_error(const plan::InputError& error) {
  const std::string& key = error.key();
  if (key == "hardware" || key.rfind("hardware.", 0) == 0) return "hardware";
  return plan::find_knob(key) ? key : "";
}

}  // namespace parallax::gui
