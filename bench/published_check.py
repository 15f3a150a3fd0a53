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
