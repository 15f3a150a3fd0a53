#pragma once
// Files built into the binary at configure time (see plan/CMakeLists.txt), so the tool works from
// any folder: the hardware profiles of scenarios/hardware/ and the default scenario.
#include <string>
#include <vector>

namespace parallax::plan {

struct BuiltinFile {
  const char* name;  ///< e.g. "t4-pcie" for scenarios/hardware/t4-pcie.yaml
  const char* text;
};

const std::vector<BuiltinFile>& builtin_hardware_files();
/// The default scenario: scenarios/gpipe-transformer-2xT4.yaml.
BuiltinFile builtin_default_scenario();

}  // namespace parallax::plan
