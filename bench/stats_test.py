#!/usr/bin/env python3
"""bench/stats.py against values worked out by hand and, where numpy is installed, against
numpy.percentile's default on random lists.

    python3 bench/stats_test.py

The hand-worked checks always run and decide the result: without numpy the test still fails on a
wrong interpolation; it only says that the comparison with numpy did not run.
"""
import os
import random
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import stats  # noqa: E402

failures = []
checked = 0


def check(what, got, want, tolerance=1e-12):
    global checked
    checked += 1
    if abs(got - want) > tolerance * max(1.0, abs(want)):
        failures.append("%s: got %r, want %r" % (what, got, want))


def check_raises(what, fn):
    global checked
    checked += 1
    try:
        fn()
    except ValueError:
        return
    failures.append("%s: no ValueError" % what)


# Worked by hand: position (n - 1) * q in the sorted list, linear between its neighbours.
check("median of [1, 2, 3, 4]", stats.median([1, 2, 3, 4]), 2.5)  # not 3, the upper middle
check("median of [4, 1, 3, 2] (unsorted)", stats.median([4, 1, 3, 2]), 2.5)
check("median of [5, 1, 3]", stats.median([5, 1, 3]), 3.0)
check("median of [7]", stats.median([7]), 7.0)
check("p20 of [10, 20, 30, 40, 50]", stats.p20([10, 20, 30, 40, 50]), 18.0)  # 10 + 0.8 * 10
check("p20 of 1..10", stats.p20(range(1, 11)), 2.8)  # at 1.8: 2 + 0.8 * 1
check("p20 of [4, 1, 3, 2]", stats.p20([4, 1, 3, 2]), 1.6)  # tests/timeline/step_statistic_test.cpp's
check("quantile 0 is the least", stats.quantile([3, 9, 1], 0), 1.0)
check("quantile 1 is the greatest", stats.quantile([3, 9, 1], 1), 9.0)
check("quantile 0.75 of [1, 2, 3, 4]", stats.quantile([1, 2, 3, 4], 0.75), 3.25)
check("percentile 20 of [10, 20, 30, 40, 50]", stats.percentile([10, 20, 30, 40, 50], 20), 18.0)
check("percentile 50 of [1, 2, 3, 4]", stats.percentile([1, 2, 3, 4], 50), 2.5)
check("undisturbed of [7]", stats.undisturbed([7]), 7.0)
# docs/accuracy.md's 28 spreads of 2026-11-27 17:44: sorted(v)[14] printed 19.9%; the median is
# the mean of the 14th and 15th, 19.3% and 19.9%.
spreads = [18.9, 26.0, 29.7, 30.2, 26.0, 20.9, 18.4, 19.1, 16.9, 24.3, 10.1, 19.9, 19.3, 8.7, 20.1, 14.8, 15.6,
           16.8, 21.4, 5.2, 16.6, 10.0, 33.8, 5.7, 26.2, 26.5, 38.6, 23.5]
check("median of the 28 spreads", stats.median(spreads), 19.6)
# Ten steps at a level of 10 ms, two of them slow: p20 at position 1.8 is 10, and only the steps
# above 11 ms (10% over it) count as disturbed.
steps = [10.0] * 8 + [10.5, 20.0]
check("undisturbed of a run with one burst", stats.undisturbed(steps), 10.0)
check("disturbed share", stats.disturbed_share(steps), 0.1)
check_raises("median of nothing", lambda: stats.median([]))
check_raises("quantile above 1", lambda: stats.quantile([1, 2], 1.5))
check_raises("quantile below 0", lambda: stats.quantile([1, 2], -0.1))
check_raises("percentile above 100", lambda: stats.percentile([1, 2], 120))
hand_checks = checked

try:
    import numpy
except ImportError:
    numpy = None
if numpy is not None:
    rng = random.Random(54)
    for trial in range(500):
        values = [rng.uniform(0.5, 60.0) for _ in range(rng.randint(1, 80))]
        for q in (0.0, 0.1, 0.2, 0.25, 0.5, 0.75, 0.9, 1.0, rng.random()):
            check("trial %d, q %.4f against numpy.percentile" % (trial, q), stats.percentile(values, 100 * q),
                  float(numpy.percentile(values, 100 * q)), tolerance=1e-9)
        check("trial %d, median against numpy.median" % trial, stats.median(values), float(numpy.median(values)),
              tolerance=1e-9)

if failures:
    print("bench/stats_test.py: %d check(s) failed:" % len(failures))
    for f in failures:
        print("  " + f)
    sys.exit(1)
print("bench/stats_test.py: %d hand-worked checks passed; %s" % (
    hand_checks, "500 random lists agree with numpy.percentile" if numpy is not None
    else "numpy is not installed, so the comparison with numpy.percentile did not run"))
