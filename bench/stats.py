"""The one median and quantile of the benches' Python, the same as Parallax's own step statistic.

Every bench that reports a median or a 20th percentile of step times, spreads or ratios takes it
from here, so that a figure a bench prints and the figure `parallax validate` or `compare` prints
for the same steps are computed alike.

quantile(values, q) interpolates linearly between order statistics: with the values sorted and
n of them, it is taken at position (n - 1) * q, between the order statistics on either side.
That is numpy.percentile's default method ("linear", Hyndman and Fan's type 7) and
timeline::quantile in timeline/step_statistic.cpp, term for term:
    v[below] + (at - below) * (v[above] - v[below]),  at = q * (n - 1), below = floor(at).
(numpy rearranges the same line for at - below >= 0.5, so the two may differ in the last bit.)
An index into the sorted list (sorted(v)[len(v) // 2]) is not this median: for an even count it
takes the upper of the two middle values.

Where this differs from the C++ on purpose: an empty list or a q outside [0, 1] raises ValueError
(the C++ returns 0 and clamps q), since a bench that asks for the median of nothing has a bug that
a printed 0 would hide.
"""
import math

# timeline/step_statistic.hpp: kUndisturbedQuantile and kDisturbedMargin.
UNDISTURBED_QUANTILE = 0.2
DISTURBED_MARGIN = 0.10


def quantile(values, q):
    """The q-quantile of `values` (0 <= q <= 1), linear between order statistics."""
    v = sorted(float(x) for x in values)
    if not v:
        raise ValueError("quantile of no values")
    if not 0.0 <= q <= 1.0:
        raise ValueError("quantile %r is outside [0, 1]" % (q,))
    at = q * (len(v) - 1)
    below = int(math.floor(at))
    above = min(below + 1, len(v) - 1)
    return v[below] + (at - below) * (v[above] - v[below])


def percentile(values, p):
    """The p-th percentile (0 <= p <= 100), as numpy.percentile(values, p) computes it by default."""
    if not 0.0 <= p <= 100.0:
        raise ValueError("percentile %r is outside [0, 100]" % (p,))
    return quantile(values, p / 100.0)


def median(values):
    """The median: the mean of the two middle values for an even count."""
    return quantile(values, 0.5)


def p20(values):
    """The 20th percentile: the undisturbed level of a set of times (profiler::undisturbed)."""
    return quantile(values, UNDISTURBED_QUANTILE)


def undisturbed(steps):
    """The step statistic of a run's steps: their 20th percentile. As profiler::step_statistic, it
    is over the steps after the warm-up: the caller drops those (a step, or a fifth of the run)."""
    return p20(steps)


def disturbed_share(steps):
    """The share of `steps` more than DISTURBED_MARGIN slower than their undisturbed step, as
    profiler::StepStatistic::disturbed_share counts them."""
    steps = list(steps)
    level = undisturbed(steps) * (1 + DISTURBED_MARGIN)
    return sum(1 for s in steps if s > level) / len(steps)
