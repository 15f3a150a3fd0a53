"""The line the published benches print for each hardware profile and group of runs they predict.

    published_check PROFILE "GROUP": N rows, mean error -10.6%, mean absolute error 14.8%, worst +33.6%

errors are predicted / published - 1 (of steps, or of a change's ratio of steps). A shipped profile's
`published_check:` entry quotes one such line of its bench's newest results folder, and
tests/plan/published_check_test.cpp holds the two equal (it formats the line the same way).
"""


def line(profile, runs_of, errors):
    mean = sum(errors) / len(errors)
    mae = sum(abs(e) for e in errors) / len(errors)
    worst = max(errors, key=abs)
    return (f'published_check {profile} "{runs_of}": {len(errors)} rows, mean error {100 * mean:+.1f}%, '
            f"mean absolute error {100 * mae:.1f}%, worst {100 * worst:+.1f}%")


def split_line(runs_of, parts):
    """Where the error lies: each predicted step split into its F and B kernels (simulate's `kernels`) and the
    rest (collectives and the slowdown beside them, bubbles, the optimizer), `parts` as (kernels s, rest s,
    published s) per row, and the factor on each part that brings the predictions nearest the published steps
    (least squares of the relative errors). A diagnostic fitted to those very rows, which no prediction uses:
    it says which part is off, and by about how much."""
    A = [(k / y, r / y) for k, r, y in parts]
    s11, s12, s22 = sum(a * a for a, _ in A), sum(a * b for a, b in A), sum(b * b for _, b in A)
    t1, t2 = sum(a for a, _ in A), sum(b for _, b in A)
    det = s11 * s22 - s12 * s12
    fk, fr = (t1 * s22 - t2 * s12) / det, (s11 * t2 - s12 * t1) / det
    alone = sum(a * (1 - b) for a, b in A) / s11  # kernels alone, the rest as predicted

    def errors(k_factor, rest_factor):
        e = [(k_factor * k + rest_factor * r) / y - 1 for k, r, y in parts]
        return f"mean absolute error {100 * sum(map(abs, e)) / len(e):.1f}%, worst {100 * max(e, key=abs):+.1f}%"

    share = sum(k for k, _, _ in parts) / sum(k + r for k, r, _ in parts)
    return (f"{runs_of}: {len(parts)} rows, kernels {100 * share:.0f}% of the predicted steps; kernels x{fk:.2f} and the rest "
            f"x{fr:.2f}: {errors(fk, fr)}; kernels alone x{alone:.2f}: {errors(alone, 1)}; as predicted: {errors(1, 1)}")


SPLIT_TITLE = ("where the error lies (a diagnostic fitted to these rows; no prediction uses it): the step as its F and B "
               "kernels and the rest, the factor on each that fits the published steps best")
