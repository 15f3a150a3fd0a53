#pragma once
// Time in Parallax: an int64 count of nanoseconds in a strong type, so a duration can never be
// mistaken for a byte count or a microsecond figure. Every conversion lives here.
#include <cmath>
#include <compare>
#include <cstdint>

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
  constexpr auto operator<=>(const Time&) const = default;

 private:
  constexpr explicit Time(int64_t n) : ns_(n) {}
  int64_t ns_ = 0;
};

}  // namespace parallax::plan
