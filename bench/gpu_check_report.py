#!/usr/bin/env python3
"""The summary of bench/gpu_check.sh: reads what its steps left in WORK and writes OUT/summary.md,
OUT/figures.json and copies of the calibrated profile, the measured compute tables (tables.yaml), two
traces (gzipped) and extras.tar.gz (the validate JSONs, the launch calibration and what if's fitted
profiles).

    python3 bench/gpu_check_report.py WORK OUT DRY_RUN

Exit status 1 when a step failed or a check that can fail did not hold:
- every run's losses are finite;
- the two-rank runs' losses equal the one-rank fp32 run's, step by step (relative 1e-3: the same
  samples, summed in another order on another GEMM shape);
- where the PyTorch eager side ran, each precision's losses equal Parallax's to the same 1e-3;
- on a GPU, CUPTI saw kernels, attributed to the compute actions.
The accuracy and CUPTI goals (calibrated MAPE <= 5%, kernel time within 3% of CUDA-event time)
are reported against their goal, not enforced: they are what the check is there to measure.
"""
import gzip
import json
import math
import os
import re
import shutil
import statistics
import sys
import tarfile

import stats

LOSS_TOLERANCE = 1e-3
CUDA_EVENT_LANE = "gpu compute (CUDA events)"
COMPUTE_ID = re.compile(r"^\d+(F|B|OPTIM)")


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def steps_table(work):
    rows = []
    path = os.path.join(work, "steps.tsv")
    if os.path.exists(path):
        for line in open(path):
            name, state, seconds = line.rstrip("\n").split("\t")
            rows.append({"step": name, "state": state, "seconds": int(seconds)})
    return rows


def losses(run):
    return [s["loss"] for s in run["steps"]] if run else []


def run_figures(run):
    """Losses, step times (median after the first) and the loss scaler's record of one run."""
    if not run:
        return None
    steps = run["steps"]
    times = [s["step_time_ms"] for s in steps[1:]] or [s["step_time_ms"] for s in steps]
    out = {
        "steps": len(steps),
        "first_loss": steps[0]["loss"] if steps else None,
        "last_loss": steps[-1]["loss"] if steps else None,
        "finite": all(math.isfinite(s["loss"]) for s in steps),
        "median_step_ms": stats.median(times) if times else None,
        "memory": run.get("memory"),
    }
    if steps and "loss_scale" in steps[0]:
        out["loss_scales"] = [s["loss_scale"] for s in steps]
        out["skipped_steps"] = [s["step"] for s in steps if s.get("skipped")]
    return out


def cupti_figures(trace):
    """Per compute action of the trace: GPU activity CUPTI attributed to it (kernels, copies,
    memsets) against its CUDA-event time; by kind, the ratio's median and range."""
    if not trace:
        return None
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    lanes = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
             if e.get("ph") == "M" and e.get("name") == "thread_name"}
    event_time, activity, kernels = {}, {}, 0
    for e in events:
        if e.get("ph") != "X" or e.get("cat") != "gpu":
            continue
        lane = lanes.get((e["pid"], e["tid"]), "")
        action = e.get("args", {}).get("action")
        if action is None or not COMPUTE_ID.match(action):
            continue
        key = (e["pid"], e["args"].get("step"), action)
        if lane == CUDA_EVENT_LANE:
            event_time[key] = e["dur"]
        elif lane.startswith("gpu stream"):
            activity[key] = activity.get(key, 0.0) + e["dur"]
            kernels += not (lane.endswith("memcpy") or lane.endswith("memset"))
    by_kind = {}
    for key, t in event_time.items():
        if t <= 0 or key[1] == 0:  # the first step warms up (allocations, cuBLAS handles)
            continue
        kind = COMPUTE_ID.match(key[2]).group(1)
        by_kind.setdefault(kind, []).append(activity.get(key, 0.0) / t)
    summary = {}
    for kind, ratios in sorted(by_kind.items()):
        summary[kind] = {"actions": len(ratios), "median_ratio": stats.median(ratios),
                         "min_ratio": min(ratios), "max_ratio": max(ratios)}
    return {"attributed_kernels": kernels, "timed_actions": len(event_time), "by_kind": summary}


def memory_figures(runs, work):
    """Per precision: the run's peak of allocated memory (rank 0) against the plan's without its
    reserve, from the scenario's profile (the run's own estimate) and from the calibrated profile."""
    out = {}
    mib = 1024.0 * 1024.0
    for p, run in runs.items():
        if not run or not run.get("memory"):
            continue
        m = run["memory"][0]
        row = {"measured_mb": m["measured_mb"], "datasheet_mb": m["predicted_mb"]}
        plan = load(os.path.join(work, "plan-calibrated-%s.json" % p))
        if plan and plan.get("memory"):
            e = plan["memory"][0]
            row["calibrated_mb"] = (e["total"] - e["reserve"]) / mib
            row["calibrated_activations_mb"] = e["activations"] / mib
        for key in ("datasheet", "calibrated"):
            if key + "_mb" in row and row["measured_mb"] > 0:
                row[key + "_error"] = (row[key + "_mb"] - row["measured_mb"]) / row["measured_mb"]
        out[p] = row
    return out


def undisturbed(times):
    """timeline/step_statistic.hpp's statistic (bench/stats.py): the 20th percentile of the steps
    after the first."""
    xs = times[1:] if len(times) > 1 else times
    return stats.undisturbed(xs) if xs else None


# Which validate configuration is the untraced Parallax run of each precision.
PRECISION_CONFIG = {"fp32": "parallel.grad_accumulation=1", "bf16": "parallel.precision=bf16",
                    "fp16": "parallel.precision=fp16"}


def torch_figures(work, runs, validate):
    """Per precision: plain PyTorch eager's undisturbed step against Parallax's (validate's untraced
    runs of the same configuration, the same statistic), and the losses of both."""
    out = {}
    configs = {" ".join(c["overrides"]): c for c in (validate or {}).get("configurations", [])}
    for p in ("fp32", "bf16", "fp16"):
        t = load(os.path.join(work, "torch-%s.json" % p))
        if not t:
            continue
        row = {"torch_ms": undisturbed(t["step_ms"]), "torch_median_ms": stats.median(t["step_ms"][1:] or t["step_ms"])}
        c = configs.get(PRECISION_CONFIG[p])
        if c and row["torch_ms"]:
            row["parallax_ms"] = c["measured_ms"]
            row["ratio"] = c["measured_ms"] / row["torch_ms"]
        mine = losses(runs.get(p))
        n = min(len(mine), len(t["losses"]))
        if n:
            row["steps_compared"] = n
            row["worst_relative_loss_difference"] = max(abs(a - b) / max(abs(b), 1e-12) for a, b in zip(mine[:n], t["losses"][:n]))
        out[p] = row
    return out


# What each configuration is predicted with, beside validate's own (calibrated) prediction: a
# name, and its files' name (PREFIX NAME-I.json, I: the configuration's place in validate's output).
PREDICTIONS = (("datasheet", "datasheet"), ("whatif_datasheet", "whatif-datasheet"),
               ("whatif_calibrated", "whatif-calibrated"), ("launch", "launch"))


def validate_figures(validate, work, prefix=""):
    """Each configuration: measured (validate's step statistic over its runs, and their spread), predicted from the
    GPU calibration, from the datasheet profile and from what if (the datasheet's and the calibrated profile
    fitted to validate's runs of its first configuration, which is left out of their means); the mean absolute
    and the worst error of each."""
    if not validate:
        return None
    rows = []
    for i, c in enumerate(validate["configurations"]):
        measured = c["measured_ms"]
        row = {"overrides": c["overrides"], "measured_ms": measured, "statistic": c["statistic"],
               "runs_ms": c["runs_ms"], "median_ms": c["median_ms"], "spread": c["spread"],
               "calibrated_ms": c["predicted_ms"], "calibrated_error": c["error"], "whatif_fitted_here": i == 0}
        for key, name in PREDICTIONS:
            sim = load(os.path.join(work, "%s%s-%d.json" % (prefix, name, i)))
            if sim and measured > 0:
                row[key + "_ms"] = sim["step_time_ms"]
                row[key + "_error"] = (sim["step_time_ms"] - measured) / measured
        rows.append(row)

    def errors(key):
        return [abs(r[key]) for r in rows if key in r and not (key.startswith("whatif") and r["whatif_fitted_here"])]

    out = {"configurations": rows, "steps": validate["configurations"][0]["steps"] if rows else None,
           "repeats": validate["repeats"], "max_spread": max((r["spread"] for r in rows if r["spread"] is not None), default=None)}  # null: one run
    for key in ["calibrated"] + [k for k, _ in PREDICTIONS]:
        e = errors(key + "_error")
        out[key + "_mape"] = statistics.mean(e) if e else None
        out[key + "_worst"] = max(e) if e else None
    return out


def two_rank_figures(run, reference):
    if not run or not reference:
        return None
    mine, ref = losses(run), losses(reference)
    n = min(len(mine), len(ref))
    worst = max((abs(a - b) / max(abs(b), 1e-12) for a, b in zip(mine[:n], ref[:n])), default=math.inf)
    return {"steps": n, "worst_relative_difference": worst, "equal": n > 0 and n == len(ref) and worst <= LOSS_TOLERANCE,
            "losses": mine, "one_rank_losses": ref}


def pct(x):
    return "-" if x is None else "%+.1f%%" % (100 * x)


def validate_table(v):
    """The summary's lines for one validate: each configuration's measured step and predictions."""
    if not v:
        return ["validate did not run."]
    lines = ["%d steps per run (the first a warm-up), %d run(s) per configuration; measured = median of the "
             "runs' %s; spread = (slowest - fastest) / measured." % (
                 v["steps"] or 0, v["repeats"], v["configurations"][0]["statistic"] if v["configurations"] else "step"), "",
             "Predicted with: calibrated, `parallax calibrate` on this GPU; datasheet, the shipped profile; what if, "
             "each of those fitted to the two runs of the first configuration (`calibrate --from-trace`), whose row is "
             "marked (fitted) and left out of the means; '-' for a precision the fit did not see; launch, `calibrate "
             "--launch --quick` (the device's time and the host's launches apart; '-' where it did not run).", "",
             "| configuration | measured (ms) | spread | calibrated | datasheet | what if, datasheet | what if, calibrated "
             "| launch |",
             "|---|---|---|---|---|---|---|---|"]

    def cell(r, key):
        if key + "_ms" not in r:
            return "-"
        fitted = " (fitted)" if key.startswith("whatif") and r["whatif_fitted_here"] else ""
        return "%.2f (%s)%s" % (r[key + "_ms"], pct(r[key + "_error"]), fitted)

    for r in v["configurations"]:
        lines.append("| %s | %.2f | %s | %s |" % (
            " ".join(r["overrides"]) or "(base)", r["measured_ms"], pct(r["spread"]).lstrip("+"),
            " | ".join(cell(r, k) for k in ("calibrated", "datasheet", "whatif_datasheet", "whatif_calibrated", "launch"))))
    lines += ["", "Mean absolute error (worst): " + ", ".join(
        "%s %s (%s)" % (k.replace("_", " "), pct(v[k + "_mape"]).lstrip("+"), pct(v[k + "_worst"]).lstrip("+"))
        for k in ("calibrated", "datasheet", "whatif_datasheet", "whatif_calibrated", "launch")) +
        "; goal for calibrated and what if: <= 5%%. Largest spread %s." % pct(v["max_spread"]).lstrip("+")]
    return lines


def llama_lines(run, kinds):
    """The Llama blocks' run, and what `calibrate --from-trace` said of its kernels by kind."""
    if not run:
        return ["did not run."]
    lines = ["%d steps, loss %.4f -> %.4f, median step %.2f ms%s." % (
        run["steps"], run["first_loss"], run["last_loss"], run["median_step_ms"],
        "".join(", memory %.0f MiB measured / %.0f planned" % (m["measured_mb"], m["predicted_mb"]) for m in run["memory"] or []))]
    if kinds:
        lines += ["", "```"] + [l.rstrip() for l in kinds.splitlines()
                                if l.startswith(("measured", "predicted", "  kernels:", "fitted", "the GPU's kernels", "  F ", "  B ", "  OPTIM"))] + ["```"]
    return lines


def titan_lines(titan):
    """Llama blocks trained as torchtitan trains them (bench/torch_llama_step.py): each mode's steps after
    the warm-up and after the idle, and what `calibrate --from-trace` said of their kernels by kind."""
    lines = []
    for mode, t in titan.items():
        g = t["figures"]
        if not g:
            lines += ["- %s: did not run." % mode]
            continue
        s = g["shape"]
        lines += ["- %s (%s, torch %s; %d blocks of hidden %d, sequence %d, batch %d, sdpa %s): loss %.3f -> %.3f; "
                  "%d steps (%.1f s) of warm-up, then median %.2f ms a step%s." % (
                      mode, g["device"], g["torch"], s["blocks"], s["hidden"], s["seq"], s["batch"], g["sdpa"],
                      g["first_loss"], g["last_loss"], g["warmup_steps"], g["warmup_seconds"],
                      statistics.median(g["sustained_ms"]),
                      "; after the idle %.2f ms (sustained / burst %.3f)" % (
                          statistics.median(g["burst_ms"]), statistics.median(g["sustained_ms"]) / statistics.median(g["burst_ms"]))
                      if g.get("burst_ms") else "")]
        for when in ("sustained", "burst"):
            if t[when]:
                lines += ["", "  %s, kernels by kind:" % when, "", "```"] + [
                    l.rstrip() for l in t[when].splitlines() if l.startswith(("measured", "predicted", "  kernels:"))] + ["```", ""]
    return lines


def gemm_clock_table(g):
    """Each shape's burst and sustained rates, their ratio, and the clock and power meanwhile."""
    if not g:
        return ["not run (no python with torch)."]
    lines = ["%s, torch %s, %s; sustained: %s s of back-to-back calls, the rate over the last half." % (
        g["facts"]["device"], g["facts"]["torch"], g["facts"]["dtype"], g["facts"]["sustained_seconds"]), "",
        "| m x n x k | burst TFLOP/s | sustained, random | sustained / burst | SM MHz | W | clock event reasons | zeros, sustained |",
        "|---|---|---|---|---|---|---|---|"]
    for r in g["shapes"]:
        s, z = r["sustained"], r.get("zeros")
        lines.append("| %dx%dx%d | %.4g | %.4g | %.3f | %s | %s | %s | %s |" % (
            r["m"], r["n"], r["k"], r["burst_tflops"], s["tflops"], r["sustained_over_burst"],
            "%.0f" % s["sm_clock_mhz"] if "sm_clock_mhz" in s else "-", "%.0f" % s["power_w"] if "power_w" in s else "-",
            ", ".join(s.get("clock_event_reasons", [])) or "-",
            "%.4g%s" % (z["tflops"], " at %.0f MHz, %.0f W" % (z["sm_clock_mhz"], z["power_w"]) if "sm_clock_mhz" in z else "")
            if z else "-"))
    return lines


def tables_lines(text):
    """calibrate --tables's report: what each table was measured from, and measured against shipped."""
    if text is None:
        return ["not run (GPU only)."]
    kept = [l[len("calibrate: "):] if l.startswith("calibrate: ") else l for l in text.splitlines()]
    return ["```"] + [l for l in kept if l.strip()] + ["```"]


def write_summary(out, f, failures):
    lines = ["# GPU check", ""]
    lines += ["    " + l for l in f["facts"]] + [""]
    lines += ["## Steps", "", "| step | state | seconds |", "|---|---|---|"]
    lines += ["| %s | %s | %d |" % (s["step"], s["state"], s["seconds"]) for s in f["steps"]]
    lines += ["", "## One GPU, three precisions", "",
              "| precision | steps | first loss | last loss | finite | median step (ms) | memory (MiB), measured / planned | loss scale, last | skipped steps |",
              "|---|---|---|---|---|---|---|---|---|"]
    for p, r in f["runs"].items():
        if not r:
            lines.append("| %s | did not run | | | | | | | |" % p)
            continue
        scale = r["loss_scales"][-1] if "loss_scales" in r else "-"
        skipped = ", ".join(str(s) for s in r.get("skipped_steps", [])) or ("none" if "loss_scales" in r else "-")
        memory = ", ".join("%.0f / %.0f" % (m["measured_mb"], m["predicted_mb"]) for m in r["memory"] or [])
        lines.append("| %s | %d | %.4f | %.4f | %s | %.2f | %s | %s | %s |" % (
            p, r["steps"], r["first_loss"], r["last_loss"], r["finite"], r["median_step_ms"], memory, scale, skipped))
    lines += ["", "## Memory: the run's peak of allocated bytes against the plan's (without its reserve)", "",
              "| precision | measured (MiB) | planned, shipped profile (MiB) | error | planned, calibrated (MiB) | error |",
              "|---|---|---|---|---|---|"]
    for p, m in f["memory"].items():
        lines.append("| %s | %.0f | %.0f | %s | %s | %s |" % (
            p, m["measured_mb"], m["datasheet_mb"], pct(m.get("datasheet_error")),
            "%.0f" % m["calibrated_mb"] if "calibrated_mb" in m else "-", pct(m.get("calibrated_error"))))
    lines += ["", "## CUPTI kernel time against CUDA-event time, per compute action (steps after the first)", ""]
    for p, c in f["cupti"].items():
        if not c:
            lines.append("- %s: no trace" % p)
            continue
        lines.append("- %s: %d kernels attributed, %d actions timed" % (p, c["attributed_kernels"], c["timed_actions"]))
        for kind, k in c["by_kind"].items():
            lines.append("  - %s: GPU activity / CUDA-event time median %.3f (%.3f .. %.3f) over %d actions" % (
                kind, k["median_ratio"], k["min_ratio"], k["max_ratio"], k["actions"]))
    for key, title in (("validate", "Single-GPU step time, predicted against measured"),
                       ("validate_bf16", "The same sweeps in bf16")):
        lines += ["", "## " + title, ""] + validate_table(f[key])
    lines += ["", "## Parallax's executor against plain PyTorch eager, the same plan on the same device", ""]
    if f["torch"]:
        lines += ["Step: the undisturbed step (p20 after the first) of Parallax's untraced validate runs and of "
                  "bench/torch_eager_step.py; losses: Parallax's traced run against torch's, step by step.", "",
                  "| precision | Parallax (ms) | PyTorch eager (ms) | Parallax / torch | worst relative loss difference |",
                  "|---|---|---|---|---|"]
        for p, t in f["torch"].items():
            lines.append("| %s | %s | %.2f | %s | %s |" % (
                p, "%.2f" % t["parallax_ms"] if "parallax_ms" in t else "-", t["torch_ms"],
                "%.3f" % t["ratio"] if "ratio" in t else "-",
                "%.1e over %d steps" % (t["worst_relative_loss_difference"], t["steps_compared"])
                if "steps_compared" in t else "-"))
    else:
        lines.append("not run (no python with torch).")
    lines += ["", "## Compute tables measured on this GPU (calibrate --tables: tables.yaml), against the shipped profile's", ""]
    lines += tables_lines(f["tables"])
    lines += ["", "## Two of Llama 3.1 8B's blocks at their width (bench/data/gpu-llama.yaml): kernels by kind", ""]
    lines += llama_lines(f["llama"], f["llama_kinds"])
    lines += ["", "## Llama 3.1 8B's blocks as torchtitan trains them (bench/data/gpu-titan.yaml, bench/torch_llama_step.py): "
              "kernels by kind after a warm-up, and after an idle", ""]
    lines += titan_lines(f["titan"])
    lines += ["", "## GEMMs in bursts and without pause (bench/gemm_clock.py: device.compute.clock_fraction)", ""]
    lines += gemm_clock_table(f["gemm_clock"])
    lines += ["", "## Two ranks against one (losses only; timings of ranks sharing one GPU mean nothing)", ""]
    for name, t in f["two_ranks"].items():
        if not t:
            lines.append("- %s: did not run" % name)
        else:
            lines.append("- %s: %d steps, worst relative loss difference %.2e: %s" % (
                name, t["steps"], t["worst_relative_difference"], "equal" if t["equal"] else "NOT EQUAL"))
    lines += ["", "## Result", ""]
    lines += ["- FAILED: " + x for x in failures] or ["- every step ran and every check held"]
    with open(os.path.join(out, "summary.md"), "w") as fh:
        fh.write("\n".join(lines) + "\n")


def main():
    if len(sys.argv) != 4:
        sys.exit("usage: gpu_check_report.py WORK OUT DRY_RUN")
    work, out, dry_run = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
    facts_path = os.path.join(work, "facts.txt")
    f = {"facts": open(facts_path).read().splitlines() if os.path.exists(facts_path) else [],
         "dry_run": dry_run, "steps": steps_table(work)}
    runs = {p: load(os.path.join(work, "run-%s.json" % p)) for p in ("fp32", "bf16", "fp16")}
    f["runs"] = {p: run_figures(r) for p, r in runs.items()}
    f["memory"] = memory_figures(runs, work)
    f["cupti"] = {p: cupti_figures(load(os.path.join(work, "trace-%s.json" % p))) for p in ("fp32", "bf16")}
    f["validate"] = validate_figures(load(os.path.join(work, "validate.json")), work)
    f["validate_bf16"] = validate_figures(load(os.path.join(work, "validate-bf16.json")), work, "bf16-")
    f["torch"] = torch_figures(work, runs, load(os.path.join(work, "validate.json")))
    f["gemm_clock"] = load(os.path.join(work, "gemm-clock.json"))
    tables = os.path.join(work, "tables.txt")
    f["tables"] = open(tables).read() if os.path.exists(tables) else None
    f["llama"] = run_figures(load(os.path.join(work, "run-llama.json")))
    kinds = os.path.join(work, "llama-kinds.txt")
    f["llama_kinds"] = open(kinds).read() if os.path.exists(kinds) else None
    text = lambda name: open(os.path.join(work, name)).read() if os.path.exists(os.path.join(work, name)) else None
    f["titan"] = {mode: {"figures": load(os.path.join(work, "titan-%s.json" % mode)),
                         "sustained": text("titan-%s-kinds.txt" % mode), "burst": text("titan-%s-burst-kinds.txt" % mode)}
                  for mode in ("compiled", "eager")}
    f["two_ranks"] = {name: two_rank_figures(load(os.path.join(work, name + ".json")), runs["fp32"])
                      for name in ("nccl-pipeline2", "nccl-data2")}

    failures = ["step %s: %s" % (s["step"], s["state"]) for s in f["steps"] if s["state"] != "ok"]
    if not f["steps"]:
        failures.append("no step ran")
    failures += ["%s: a loss is not finite" % p for p, r in f["runs"].items() if r and not r["finite"]]
    if f["llama"] and not f["llama"]["finite"]:
        failures.append("llama: a loss is not finite")
    failures += ["%s: the losses differ from one rank's" % n for n, t in f["two_ranks"].items() if t and not t["equal"]]
    failures += ["%s: the losses differ from PyTorch eager's (worst relative %.1e)" % (p, t["worst_relative_loss_difference"])
                 for p, t in f["torch"].items()
                 if t.get("worst_relative_loss_difference", 0) > LOSS_TOLERANCE]
    if not dry_run:
        fp32 = f["cupti"]["fp32"]
        if not fp32 or fp32["attributed_kernels"] == 0:
            failures.append("CUPTI attributed no kernel to the fp32 run's actions")
    f["failures"] = failures

    with open(os.path.join(out, "figures.json"), "w") as fh:
        json.dump(f, fh, indent=1)
    write_summary(out, f, failures)
    for name in ("calibrated.yaml", "tables.yaml"):
        if os.path.exists(os.path.join(work, name)):
            shutil.copy(os.path.join(work, name), os.path.join(out, name))
    # The rest in one file: a GPU machine lent here gives back 8 files at most.
    extras = [n for n in sorted(os.listdir(work))
              if n in ("validate.json", "validate-bf16.json", "calibrated-launch.yaml") or ("whatif" in n and n.endswith(".yaml"))]
    if extras:
        with tarfile.open(os.path.join(out, "extras.tar.gz"), "w:gz") as tar:
            for n in extras:
                tar.add(os.path.join(work, n), arcname=n)
    for p in ("fp32", "bf16"):
        src = os.path.join(work, "trace-%s.json" % p)
        if os.path.exists(src):
            with open(src, "rb") as a, gzip.open(os.path.join(out, "trace-%s.json.gz" % p), "wb") as b:
                shutil.copyfileobj(a, b)
    print(open(os.path.join(out, "summary.md")).read())
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
