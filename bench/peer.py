"""The conditions a PyTorch peer runs under in a side-by-side bench: those of a Parallax rank, set in
this one place so that no bench forgets one (bench/ddp_pytorch.py, bench/pipelining_torch.py).

A Parallax rank, started by `parallax run` (exec/launcher.cpp, exec/runtime.cpp):
- is bound to its own run of cores: the allowed CPUs cut into `world` equal runs, rank r the r-th,
  none bound with more ranks than CPUs or with PARALLAX_CPU_AFFINITY=off;
- runs hardware_concurrency() / world intra-op threads (at least 1), OMP_NUM_THREADS and
  OPENBLAS_NUM_THREADS the same unless the user set them;
- marks the threads its process group started (Gloo's) SCHED_BATCH, unless
  PARALLAX_HELPER_THREADS=normal (exec/threads.hpp says why);
- times a step from before it loads the step's data to after the optimizer, and reports per step
  the slowest rank's time.
A bench then takes, on both sides alike, the undisturbed step (bench/stats.py's p20, as
profiler::step_statistic) of the steps after a warm-up fifth.

    parent:   peer.set_thread_environment(world)        # before the ranks are spawned
    rank:     before = peer.start_rank(rank, world)     # before the process group
              peer.demote_helper_threads(before)        # after it
    parent:   steps = peer.slowest_rank_steps(per_rank_step_ms)
              figure = peer.step_statistic(steps)
    or, for a bench whose ranks each save their step times and losses:
    rank:     peer.save_rank(folder, rank, times, losses)
    parent:   peer.write_figures(OUT, folder, world, steps)
"""
import json
import os
import threading

import stats

WARM_UP_SHARE = 5  # the first len // 5 steps are the warm-up, on both sides


def threads_per_rank(world):
    """Intra-op threads of each rank: exec/runtime.cpp's hardware_concurrency() / world."""
    return max(1, (os.cpu_count() or 1) // max(1, world))


def set_thread_environment(world):
    """OMP_NUM_THREADS and OPENBLAS_NUM_THREADS as Parallax's launcher sets them for its ranks (a
    user's own setting wins); spawned ranks inherit them."""
    for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ.setdefault(name, str(threads_per_rank(world)))


def rank_cores(rank, world):
    """The CPUs rank `rank` is bound to, or None where Parallax binds none."""
    if os.environ.get("PARALLAX_CPU_AFFINITY") == "off":
        return None
    cpus = sorted(os.sched_getaffinity(0))
    each = len(cpus) // world
    if each == 0:
        return None
    return cpus[rank * each:(rank + 1) * each]


def thread_ids():
    return {int(tid) for tid in os.listdir("/proc/self/task")}


def start_rank(rank, world):
    """Binds this rank to its cores and sets its intra-op threads; returns the threads that exist
    now, for demote_helper_threads."""
    import torch

    cores = rank_cores(rank, world)
    if cores is not None:
        os.sched_setaffinity(0, cores)
    torch.set_num_threads(threads_per_rank(world))
    return thread_ids()


def demote_helper_threads(before):
    """The threads started since `before` SCHED_BATCH, as exec/threads.cpp does for a Parallax rank."""
    if os.environ.get("PARALLAX_HELPER_THREADS") == "normal":
        return
    for tid in thread_ids() - before:
        if tid != threading.get_native_id():
            try:
                os.sched_setscheduler(tid, os.SCHED_BATCH, os.sched_param(0))
            except OSError:
                pass  # a thread that ended meanwhile


def slowest_rank_steps(per_rank):
    """Per step, the slowest rank's time: `per_rank` is each rank's step times, in step order."""
    return [max(times) for times in zip(*per_rank)]


def step_statistic(steps):
    """The undisturbed step (p20) of the steps after the warm-up fifth."""
    return stats.undisturbed(steps[len(steps) // WARM_UP_SHARE:])


def conditions(world):
    """One line saying how both sides of a ratio ran."""
    cores = rank_cores(0, world)
    binding = "each rank bound to %d core(s)" % len(cores) if cores else "ranks not bound to cores"
    policy = ("Gloo's threads SCHED_OTHER" if os.environ.get("PARALLAX_HELPER_THREADS") == "normal"
              else "Gloo's threads SCHED_BATCH")
    return ("both sides: %s, %d intra-op thread(s) per rank, %s, data loaded inside the timed step, "
            "the slowest rank's step, the undisturbed step (p20) after a warm-up fifth"
            % (binding, threads_per_rank(world), policy))


def save_rank(folder, rank, times, losses):
    """A rank's step times (ms) and losses, for write_figures to read."""
    with open(os.path.join(folder, "rank%d.json" % rank), "w") as f:
        json.dump({"times": times, "losses": losses}, f)


def write_figures(out, folder, world, steps, **extra):
    """From the ranks' save_rank files in `folder`: the step statistic of the slowest rank's steps
    in ms into OUT, and the raw figures (every rank's step times and losses, the conditions, and
    `extra`) into OUT with the extension .json."""
    import torch

    per_rank = [json.load(open(os.path.join(folder, "rank%d.json" % r))) for r in range(world)]
    slowest = slowest_rank_steps([r["times"] for r in per_rank])
    with open(out, "w") as f:
        f.write("%f\n" % step_statistic(slowest))
    raw = os.path.splitext(out)[0] + ".json"
    with open(raw if raw != out else out + ".steps.json", "w") as f:
        json.dump(dict({"torch": torch.__version__, "warm_up_steps": steps // WARM_UP_SHARE, "conditions": conditions(world),
                        "step_ms": slowest, "rank_step_ms": [r["times"] for r in per_rank],
                        "rank_loss": [r["losses"] for r in per_rank]}, **extra), f)
        f.write("\n")
