#pragma once
// Time in Parallax: an int64 count of nanoseconds in a strong type, so a duration can never be
// mistaken for a byte count or a microsecond figure. Every conversion lives here.
#include <cmath>
#include <compare>
#include <cstdint>
#include <cstdio>
#include <string>

namespace parallax::plan {

class Time {
 public:
  constexpr Time() = default;
  static constexpr Time ns(int64_t n) { return Time(n); }
  /// Rounds to the nearest nanosecond.
  static Time us(double u) { return Time(std::llround(u * 1e3)); }
  static Time ms(double m) { return Time(std::llround(m * 1e6)); }
  static Time seconds(double s) { return Time(std::llround(s * 1e9)); }

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
  Time scaled(double f) const { return Time(std::llround(static_cast<double>(ns_) * f)); }
  constexpr auto operator<=>(const Time&) const = default;

 private:
  constexpr explicit Time(int64_t n) : ns_(n) {}
  int64_t ns_ = 0;
};

/// "12.345 ms": a duration as text is written, in the CLI's reports, the tuner's "why" and the GUI.
inline std::string duration_text(Time t) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.3f ms", t.to_ms());
  return buf;
}

}  // namespace parallax::plan
