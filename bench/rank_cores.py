"""Binds a rank of a PyTorch bench to its own cores, as Parallax's launcher binds its local ranks
(exec/launcher.hpp, rank_cores): the process's allowed CPUs cut into `world` equal runs of
consecutive CPUs, rank r the r-th; nothing bound with more ranks than CPUs, or with
PARALLAX_CPU_AFFINITY=off. So that both sides of a comparison run alike."""
import os


def bind_rank_cores(rank, world):
    if os.environ.get("PARALLAX_CPU_AFFINITY") == "off":
        return
    cpus = sorted(os.sched_getaffinity(0))
    each = len(cpus) // world
    if each == 0:
        return
    os.sched_setaffinity(0, cpus[rank * each:(rank + 1) * each])
