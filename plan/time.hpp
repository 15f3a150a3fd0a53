#pragma once
// Time in Parallax: an int64 count of nanoseconds in a strong type, so a duration can never be
// mistaken for a byte count or a microsecond figure. Every conversion lives here.
#include <cmath>
#include <compare>
#include <cstdint>
#include <cstdio>
#include <string>

#include "plan/error.hpp"

namespace parallax::plan {

/// A duration too long for the nanosecond count (or not a number): a figure of the scenario or its
/// profile out of scale (a forward of 1e300 us a sample, a peak of 1e-9 TFLOP/s). Bad input: the
/// CLI exits 2 with it. Without the check llround's result is unspecified, and a step of 1e290 s
/// printed as 0.000 ms.
class DurationOutOfRange : public OutOfScale {
 public:
  explicit DurationOutOfRange(double ns) : OutOfScale(text(ns)) {}

 private:
  static std::string text(double ns) {
    char buf[320];
    std::snprintf(buf, sizeof buf,
                  "a duration of %g s comes out of the scenario's and its hardware profile's figures, beyond the %.1f days "
                  "Parallax times any one action or step in: one of them is out of scale (a time per sample, a peak, a "
                  "bandwidth, a latency)",
                  ns / 1e9, kMaxNs / 86400e9);
    return buf;
  }

 public:
  /// 10^15 ns, 11.6 days: far beyond any step, and a sum of a thousand such stays inside int64.
  static constexpr double kMaxNs = 1e15;
};

class Time {
 public:
  constexpr Time() = default;
  static constexpr Time ns(int64_t n) { return Time(n); }
  /// Rounds to the nearest nanosecond.
  static Time us(double u) { return from_ns(u * 1e3); }
  static Time ms(double m) { return from_ns(m * 1e6); }
  static Time seconds(double s) { return from_ns(s * 1e9); }

  constexpr int64_t count_ns() const { return ns_; }
  constexpr double to_us() const { return static_cast<double>(ns_) / 1e3; }
  constexpr double to_ms() const { return static_cast<double>(ns_) / 1e6; }
  constexpr double to_seconds() const { return static_cast<double>(ns_) / 1e9; }

  constexpr Time operator+(Time o) const { return Time(ns_ + o.ns_); }
  constexpr Time operator-(Time o) const { return Time(ns_ - o.ns_); }
  constexpr Time& operator+=(Time o) { ns_ += o.ns_; return *this; }
  constexpr Time& operator-=(Time o) { ns_ -= o.ns_; return *this; }
  constexpr Time operator-() const { return Time(-ns_); }
  friend constexpr Time abs(Time t) { return t.ns_ < 0 ? -t : t; }
  /// Scalar arithmetic, exact on integers: k actions of t each, t split k ways (rounds toward 0).
  constexpr Time operator*(int64_t k) const { return Time(ns_ * k); }
  friend constexpr Time operator*(int64_t k, Time t) { return t * k; }
  constexpr Time operator/(int64_t k) const { return Time(ns_ / k); }
  /// How many times `o` fits in this time, as a ratio (a fraction of a step, a speed-up).
  constexpr double operator/(Time o) const { return static_cast<double>(ns_) / static_cast<double>(o.ns_); }
  /// This time stretched by a real factor, to the nearest nanosecond (no implicit double product:
  /// where a duration is rounded is then always visible).
  Time scaled(double f) const { return from_ns(static_cast<double>(ns_) * f); }
  constexpr auto operator<=>(const Time&) const = default;

 private:
  constexpr explicit Time(int64_t n) : ns_(n) {}
  /// The one place a real number becomes a count: DurationOutOfRange beyond kMaxNs (or NaN).
  static Time from_ns(double ns) {
    if (!(std::abs(ns) <= DurationOutOfRange::kMaxNs)) throw DurationOutOfRange(ns);
    return Time(std::llround(ns));
  }
  int64_t ns_ = 0;
};

/// "12.345 ms": a duration as text is written, in the CLI's reports, the tuner's "why" and the GUI.
inline std::string duration_text(Time t) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.3f ms", t.to_ms());
  return buf;
}

}  // namespace parallax::plan
