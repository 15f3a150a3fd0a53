#include "plan/compute_tables.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <iomanip>
#include <sstream>
#include <stdexcept>
#include <utility>

namespace parallax::plan {

namespace {

// TFLOP/s to a tenth, as the shipped tables give them; below 1 (a CPU's small shapes) to three
// significant figures, never 0.
std::string figures(const std::vector<double>& v) {
  std::ostringstream s;
  s << "[";
  for (size_t i = 0; i < v.size(); ++i) {
    s << (i ? ", " : "");
    if (v[i] >= 1) s << std::fixed << std::setprecision(1) << v[i];
    else s << std::defaultfloat << std::setprecision(3) << v[i];
  }
  s << "]";
  return s.str();
}

// A fraction to three significant figures (0.896; 1.2e-05 for a CPU against a GPU's peak).
std::string fraction(double v) {
  std::ostringstream s;
  s << std::setprecision(3) << v;
  return s.str();
}

std::string curve(const std::vector<std::pair<double, double>>& points) {
  std::ostringstream s;
  s << "[";
  for (size_t i = 0; i < points.size(); ++i)
    s << (i ? ", " : "") << "[" << static_cast<long long>(points[i].first) << ", " << fraction(points[i].second) << "]";
  s << "]";
  return s.str();
}

std::string sizes(const std::vector<double>& v) {
  std::ostringstream s;
  s << "[";
  for (size_t i = 0; i < v.size(); ++i) s << (i ? ", " : "") << static_cast<long long>(v[i]);
  s << "]";
  return s.str();
}

void write_grid(std::ostringstream& s, Precision p, const GemmGrid& g) {
  s << "      " << name(p) << ":\n";
  s << "        m: " << sizes(g.m) << "\n        n: " << sizes(g.n) << "\n        k: " << sizes(g.k) << "\n";
  s << "        tflops:   # one line per (m, n), k across\n";
  for (size_t i = 0; i < g.m.size(); ++i)
    for (size_t j = 0; j < g.n.size(); ++j) {
      const auto from = g.tflops.begin() + static_cast<std::ptrdiff_t>((i * g.n.size() + j) * g.k.size());
      s << "          - " << figures({from, from + static_cast<std::ptrdiff_t>(g.k.size())}) << "   # m "
        << static_cast<long long>(g.m[i]) << ", n " << static_cast<long long>(g.n[j]) << "\n";
    }
}

void write_by_sequence(std::ostringstream& s, const char* key, const ComputeModel::BySequence& b) {
  if (b.full.empty() && b.causal.empty()) return;
  s << "    " << key << ":\n";
  if (!b.full.empty()) s << "      full: " << curve(b.full) << "\n";
  if (!b.causal.empty()) s << "      causal: " << curve(b.causal) << "\n";
}

std::string percent(double ratio) {
  std::ostringstream s;
  s << std::showpos << std::fixed << std::setprecision(1) << (ratio - 1) * 100 << "%";
  return s.str();
}

std::string shape(const GemmGrid& g, size_t index) {
  const size_t k = index % g.k.size(), n = index / g.k.size() % g.n.size(), m = index / g.k.size() / g.n.size();
  return std::to_string(static_cast<long long>(g.m[m])) + "x" + std::to_string(static_cast<long long>(g.n[n])) + "x" +
         std::to_string(static_cast<long long>(g.k[k]));
}

}  // namespace

std::string fixed(double v, int digits) {
  std::ostringstream s;
  s << std::fixed << std::setprecision(digits) << v;
  return s.str();
}

std::string gpu_chip(const std::string& device_name) {
  std::string word;
  auto is_chip = [](const std::string& w) {
    size_t letters = 0;
    while (letters < w.size() && std::isupper(static_cast<unsigned char>(w[letters]))) ++letters;
    size_t digits = letters;
    while (digits < w.size() && std::isdigit(static_cast<unsigned char>(w[digits]))) ++digits;
    // Letters, digits, then at most a suffix of capitals (L40S): "80GB" starts with a digit, "SXM5" has four letters.
    size_t rest = digits;
    while (rest < w.size() && std::isupper(static_cast<unsigned char>(w[rest]))) ++rest;
    return letters >= 1 && letters <= 3 && digits > letters && rest == w.size();
  };
  for (size_t i = 0; i <= device_name.size(); ++i) {
    const char c = i < device_name.size() ? device_name[i] : ' ';
    if (c == ' ' || c == '-') {
      if (is_chip(word)) return word;
      word.clear();
    } else {
      word += c;
    }
  }
  return "";
}

std::string compute_yaml(const ComputeModel& c, const std::vector<std::string>& notes) {
  std::ostringstream s;
  s << "  compute:\n";
  for (const auto& n : notes) s << "    # " << n << "\n";
  s << "    precisions: [";
  for (size_t i = 0; i < c.precisions.size(); ++i) s << (i ? ", " : "") << name(c.precisions[i]);
  s << "]\n";
  if (!c.gemm.empty()) {
    s << "    gemm:\n";
    for (const auto& [p, grid] : c.gemm) write_grid(s, p, grid);
  }
  if (!c.gemm_efficiency.empty()) s << "    gemm_efficiency: " << curve(c.gemm_efficiency) << "\n";
  if (!c.sustained_tflops.empty()) {
    s << "    sustained_tflops: {";
    bool first = true;
    for (const auto& [p, v] : c.sustained_tflops) s << (std::exchange(first, false) ? "" : ", ") << name(p) << ": " << fixed(v, 1);
    s << "}\n";
  }
  s << "    memory_efficiency: " << fraction(c.memory_efficiency) << "\n";
  s << "    flash_forward_efficiency: " << fraction(c.flash_forward_efficiency) << "\n";
  s << "    flash_backward_efficiency: " << fraction(c.flash_backward_efficiency) << "\n";
  if (c.flash2_forward_efficiency) s << "    flash2_forward_efficiency: " << fraction(*c.flash2_forward_efficiency) << "\n";
  if (c.flash2_backward_efficiency) s << "    flash2_backward_efficiency: " << fraction(*c.flash2_backward_efficiency) << "\n";
  write_by_sequence(s, "flash_by_sequence", c.flash_by_sequence);
  write_by_sequence(s, "flash2_by_sequence", c.flash2_by_sequence);
  return s.str();
}

std::string with_compute_block(const std::string& base_text, const std::string& compute_block) {
  // Line-wise, as renamed_profile_text works: a profile's top-level keys start in column 0 and
  // device's keys at two spaces; the compute block runs to the next line indented two or less.
  std::istringstream in(base_text);
  std::ostringstream out;
  enum { before, in_device, in_compute, after } where = before;
  bool written = false;
  auto indent = [](const std::string& line) { return line.find_first_not_of(' '); };
  for (std::string line; std::getline(in, line);) {
    const bool blank = line.find_first_not_of(' ') == std::string::npos;
    if (where == in_compute && !blank && indent(line) <= 2) where = in_device;
    if (where == in_device && !blank && indent(line) == 0) {
      if (!written) out << compute_block;
      written = true;
      where = after;
    }
    if (where == before && line.rfind("device:", 0) == 0) {
      if (line.find_first_not_of(' ', 7) != std::string::npos && line[line.find_first_not_of(' ', 7)] != '#')
        throw std::logic_error("the profile's device: is not a block map");
      where = in_device;
    }
    if (where == in_device && line.rfind("  compute:", 0) == 0) {
      out << compute_block;
      written = true;
      where = in_compute;
    }
    if (where != in_compute) out << line << "\n";
  }
  if (where == before) throw std::logic_error("the profile has no top-level device: section");
  if (!written) out << compute_block;
  return out.str();
}

std::vector<std::string> compare_compute(const ComputeModel& measured, const ComputeModel& shipped) {
  std::vector<std::string> out;
  for (const auto& [p, grid] : measured.gemm) {
    const auto other = shipped.gemm.find(p);
    if (other == shipped.gemm.end()) {
      out.push_back(std::string("gemm ") + name(p) + ": the shipped profile has no grid at this precision");
      continue;
    }
    // At each measured shape, the shipped grid's figure there (interpolated where the axes differ).
    std::vector<double> ratios;
    for (size_t i = 0; i < grid.tflops.size(); ++i) {
      const size_t k = i % grid.k.size(), n = i / grid.k.size() % grid.n.size(), m = i / grid.k.size() / grid.n.size();
      ratios.push_back(grid.tflops[i] / other->second.at(grid.m[m], grid.n[n], grid.k[k]));
    }
    const auto [lo, hi] = std::minmax_element(ratios.begin(), ratios.end());
    double log_sum = 0;
    for (double r : ratios) log_sum += std::log(r);
    const size_t biggest = grid.tflops.size() - 1;
    out.push_back(std::string("gemm ") + name(p) + ": measured / shipped over " + std::to_string(ratios.size()) +
                  " shapes: geometric mean " + fixed(std::exp(log_sum / static_cast<double>(ratios.size())), 3) + ", " +
                  fixed(*lo, 3) + " at " + shape(grid, static_cast<size_t>(lo - ratios.begin())) + " to " + fixed(*hi, 3) + " at " +
                  shape(grid, static_cast<size_t>(hi - ratios.begin())) + "; at " + shape(grid, biggest) + " " +
                  fixed(grid.tflops[biggest], 1) + " against " + fixed(grid.tflops[biggest] / ratios[biggest], 1) + " TFLOP/s");
  }
  out.push_back("memory_efficiency: measured " + fixed(measured.memory_efficiency, 3) + ", shipped " +
                fixed(shipped.memory_efficiency, 3) + " (" + percent(measured.memory_efficiency / shipped.memory_efficiency) + ")");
  auto flash_line = [&](const char* key, double m, double s) {
    out.push_back(std::string(key) + ": measured " + fixed(m, 3) + ", shipped " + fixed(s, 3) + " (" + percent(m / s) + ")");
  };
  flash_line("flash_forward_efficiency", measured.flash_forward_efficiency, shipped.flash_forward_efficiency);
  flash_line("flash_backward_efficiency", measured.flash_backward_efficiency, shipped.flash_backward_efficiency);
  if (measured.flash2_forward_efficiency && shipped.flash2_forward_efficiency)
    flash_line("flash2_forward_efficiency", *measured.flash2_forward_efficiency, *shipped.flash2_forward_efficiency);
  if (measured.flash2_backward_efficiency && shipped.flash2_backward_efficiency)
    flash_line("flash2_backward_efficiency", *measured.flash2_backward_efficiency, *shipped.flash2_backward_efficiency);
  for (bool flash2 : {false, true})
    for (bool causal : {false, true}) {
      const auto& own = flash2 ? measured.flash2_by_sequence : measured.flash_by_sequence;
      const auto& points = causal ? own.causal : own.full;
      if (points.empty()) continue;
      // A stream, not string +: g++ 12 warns falsely (-Wrestrict) on the concatenations.
      std::ostringstream line;
      line << (flash2 ? "flash2" : "flash") << "_by_sequence." << (causal ? "causal" : "full") << " (tokens: measured / shipped):";
      for (const auto& [tokens, fraction] : points)
        line << " " << static_cast<long long>(tokens) << ": " << fixed(fraction, 3) << " / "
             << fixed(shipped.flash_sequence_fraction(flash2, causal, tokens), 3);
      out.push_back(line.str());
    }
  return out;
}

}  // namespace parallax::plan
