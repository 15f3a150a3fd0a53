#!/usr/bin/env bash
# Prediction accuracy on this machine, over the accuracy set (scenarios/accuracy/, 28
# configurations): calibrates first, then `parallax validate` runs each configuration for real
# and simulates it with the fresh profile, and this prints one table with the mean absolute error,
# the worst error and Kendall's tau within each sweep.
#
# Calibration measures the layer tables of the accuracy set at fp32 and, for the set's bf16 row,
# bf16 (--precision bf16). Its in-run probes (--probe-with) run on two models outside the set:
# scenarios/mlp-fashion-mnist-ddp2.yaml's MLP (2 hidden layers of 256) and, as the larger of the two
# models the in-run line is fitted through, bench/data/probe-transformer.yaml (hidden 128 where the
# set's transformer has 64). No configuration of the set, nor its models, runs during calibration:
# its layers are timed alone, and every run of the set is held out.
#
# Then what if: per sweep, `calibrate --from-trace` fits the calibrated profile to the runs of the
# sweep's first configuration (one per round; the fit takes the median of their step statistics, as
# the table's measured step is), and the sweep's other configurations are predicted with it.
#
# Action by action (each rank's F, B and OPTIM against their prediction):
# `python3 bench/accuracy_actions.py DIR`. How much of the spread over runs the host's speed explains:
# `python3 bench/accuracy_noise.py DIR`. DIR is the folder this wrote (below).
#
# Usage: bench/accuracy.sh [BUILD_DIR] [--out DIR]   (environment: REPEATS=3; STEPS=N per run,
# default validate's own: enough for 2 s of steps)
# Each configuration runs REPEATS times, in rounds over the whole set; the measured step is the
# median over the runs of each run's undisturbed step (the step statistic), and the spread is
# (max - min) / measured of those. The median step is given beside it. Medians are bench/stats.py's
# (interpolated, as timeline/step_statistic.hpp's).
# The raw output goes to DIR (--out, else the environment's OUT, else a new
# bench/results/accuracy-cpu-DATE): the calibrated profile (here.yaml), each round's validate JSON
# (SCENARIO.roundR.json) and traces (traces/), the merged configurations (merged.json), what if's
# fitted profiles (fitted-*.yaml); machine.txt (CPU, cores, commit, date); summary.txt, what this
# printed; log.txt, its stderr (calibrate's and validate's progress).
set -euo pipefail
args=("$@")
source "$(dirname "$0")/lib.sh"
cd "$(dirname "$0")/.."
bench_build_args "$0" "$@"
bin="$build/parallax"
steps=()
[ -z "${STEPS:-}" ] || steps=(--steps "$STEPS")
repeats="${REPEATS:-3}"
out=$(bench_out_dir accuracy "$out")
rm -rf "$out"/*.round*.json "$out/traces" "$out"/fitted-*.yaml  # an earlier run's, when --out names a folder again
bench_machine "$out" "$0" "${args[@]}"
bench_tee "$out"
trap bench_tee_close EXIT

"$bin" calibrate --precision bf16 scenarios/accuracy/*.yaml -o "$out/here.yaml" \
  --probe-with scenarios/mlp-fashion-mnist-ddp2.yaml --probe-with bench/data/probe-transformer.yaml 2>&1 |
  grep -E "wrote|in a real run|message whose|host speed|differ by|again" >&2

# validate SCENARIO ROUND SWEEP...: one run of each configuration of the scenario's sweeps.
validate() {
  local scenario="$1" round="$2"; shift 2
  local sweeps=()
  for s in "$@"; do sweeps+=(--sweep "$s"); done
  local name
  name=$(basename "$scenario" .yaml)
  "$bin" validate "$scenario" "${sweeps[@]}" --profile "$out/here.yaml" "${steps[@]}" --repeats 1 \
    --keep-traces "$out/traces/$name.round$round" --json 2>&1 >"$out/$name.round$round.json" |
    grep -E "^validate: \[" >&2
}

# The repeats go round the whole set, so that a configuration's runs are minutes apart: this
# kind of machine changes speed for seconds to minutes at a time (docs/accuracy.md), and repeats
# taken within one minute can all land in one slow or fast spell.
for round in $(seq "$repeats"); do
  echo "round $round of $repeats" >&2
  validate scenarios/accuracy/mlp-pipeline2.yaml "$round" parallel.chunks=1,2,4,8,16,32 \
    "parallel.partition_len=[1,3],[3,1]" parallel.schedule=gpipe,1f1b parallel.grad_accumulation=2,4,8 \
    parallel.activation_checkpointing=true parallel.precision=bf16
  validate scenarios/accuracy/mlp-interleaved.yaml "$round" parallel.chunks=2,4,8
  validate scenarios/accuracy/mlp-ddp2.yaml "$round" parallel.bucket_cap_mb=0.25,5,100 data.batch_size=32,128,256
  validate scenarios/accuracy/transformer-pipeline2.yaml "$round" parallel.chunks=1,2,4,8
done

python3 - "$out"/*.round*.json <<'EOF'
import json, sys
sys.path.insert(0, "bench")
from stats import median
# Each round's validate output, merged per configuration as `validate --repeats N` merges its
# runs: the measured step is the median over runs of each run's undisturbed step (the step
# statistic, timeline/step_statistic.hpp), the spread (max - min) / measured over the runs; the
# median step beside it, the same way. Bubbles are the first run's.
def kendall_tau(a, b):  # as fit/measure.cpp's
    n, score = len(a), 0
    if n < 2:
        return 1.0
    for i in range(n):
        for j in range(i + 1, n):
            s = (a[i] - a[j]) * (b[i] - b[j])
            score += 1 if s > 0 else -1 if s < 0 else 0
    return score / (n * (n - 1) / 2)
def resolved_tau(p, low, high):  # as fit/measure.cpp's kendall_tau_resolved
    score = resolved = pairs = 0
    for i in range(len(p)):
        for j in range(i + 1, len(p)):
            pairs += 1
            i_faster, j_faster = high[i] < low[j], high[j] < low[i]
            if not (i_faster or j_faster):
                continue
            resolved += 1
            if p[i] != p[j]:
                score += 1 if (p[i] < p[j]) == i_faster else -1
    return (score / resolved if resolved else 0.0), resolved, pairs
configs = {}  # name -> merged
statistic = "?"
for f in sys.argv[1:]:
    for c in json.load(open(f))["configurations"]:
        statistic = c["statistic"]
        short = c["scenario"].split("/")[-1][:-5]
        name = short + " " + " ".join(c["overrides"])
        sweep = short + " " + c["overrides"][0].split("=")[0] if c["overrides"] else ""
        m = configs.setdefault(name, {"sweep": sweep, "predicted_ms": c["predicted_ms"], "runs": [], "medians": [],
                                      "disturbed": [], "ranks": c["ranks"]})
        m["runs"] += c["runs_ms"]
        m["medians"].append(c["median_ms"])
        m["disturbed"].append(c["disturbed_share"])
rows = []
for name, m in configs.items():
    m["measured_ms"] = median(m["runs"])
    m["spread"] = (max(m["runs"]) - min(m["runs"])) / m["measured_ms"]
    m["error"] = (m["predicted_ms"] - m["measured_ms"]) / m["measured_ms"]
    m["median_ms"] = median(m["medians"])
    m["median_spread"] = (max(m["medians"]) - min(m["medians"])) / m["median_ms"]
    m["median_error"] = (m["predicted_ms"] - m["median_ms"]) / m["median_ms"]
    rows.append((name, m))
json.dump(configs, open(sys.argv[1].rsplit("/", 1)[0] + "/merged.json", "w"))
print("%d runs of each configuration, minutes apart; measured: the %s of each run, the median over runs" %
      (max(len(m["runs"]) for _, m in rows), statistic))
print("| configuration | predicted ms | measured ms | error | spread | median ms | error | spread | disturbed steps | bubble per rank, predicted/measured |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
for name, c in rows:
    bubbles = "  ".join("%d: %.0f/%.0f%%" % (r["rank"], 100 * r["predicted_bubble_fraction"],
                                              100 * r["measured_bubble_fraction"]) for r in c["ranks"])
    print("| %s | %.3f | %.3f | %+.1f%% | %.1f%% | %.3f | %+.1f%% | %.1f%% | %.0f%% | %s |" % (
        name, c["predicted_ms"], c["measured_ms"], 100 * c["error"], 100 * c["spread"], c["median_ms"],
        100 * c["median_error"], 100 * c["median_spread"], 100 * sum(c["disturbed"]) / len(c["disturbed"]), bubbles))
def summary(key, spread_key, what):
    errors = [c[key] for _, c in rows]
    worst = max(rows, key=lambda r: abs(r[1][key]))
    spreads = [c[spread_key] for _, c in rows]
    within = sum(1 for s in spreads if s <= 0.05)
    print("against the %s: mean absolute error %.1f%% over %d configurations, mean signed %+.1f%%, worst %+.1f%% (%s); "
          "spread over runs: median %.1f%%, <= 5%% on %d of %d" %
          (what, 100 * sum(abs(e) for e in errors) / len(errors), len(errors), 100 * sum(errors) / len(errors),
           100 * worst[1][key], worst[0], 100 * median(spreads), within, len(spreads)))
print()
summary("error", "spread", statistic)
summary("median_error", "median_spread", "median step")
sweeps = {}
for name, c in rows:
    if c["sweep"]:
        sweeps.setdefault(c["sweep"], []).append(c)
for sweep, cs in sorted(sweeps.items()):
    if len(cs) > 1:
        tau, resolved, pairs = resolved_tau([c["predicted_ms"] for c in cs], [min(c["runs"]) for c in cs],
                                            [max(c["runs"]) for c in cs])
        print("Kendall tau %+.2f over the %d configurations of sweep %s; %+.2f over the %d of %d pairs the runs resolve" %
              (kendall_tau([c["predicted_ms"] for c in cs], [c["measured_ms"] for c in cs]), len(cs), sweep, tau,
               resolved, pairs))
EOF

# What if: per sweep, a profile fitted to the measured runs of its first configuration
# (`calibrate --from-trace`, over the calibrated profile) predicts the sweep's other
# configurations, against what they measured in the same rounds.
python3 - "$bin" "$out" <<'EOF'
import json, os, subprocess, sys
bin, out = sys.argv[1:]
merged = json.load(open(os.path.join(out, "merged.json")))
def sets_of(c, hardware):
    args = []
    for s in c["sets"]:
        args += ["--set", "hardware=" + hardware if s.startswith("hardware=") else s]
    return args
rows, errors = [], []
for f in sorted(os.listdir(out)):
    if not f.endswith(".round1.json"):
        continue
    name = f[:-len(".round1.json")]
    configs = json.load(open(os.path.join(out, f)))["configurations"]
    sweeps = {}
    for i, c in enumerate(configs):
        if c["overrides"]:
            sweeps.setdefault(c["overrides"][0].split("=")[0], []).append((i, c))
    for key, members in sweeps.items():
        if len(members) < 2:
            continue
        i0, anchor = members[0]
        fitted = os.path.join(out, "fitted-%s-%s.yaml" % (name, key.replace(".", "_")))
        traces = []
        for r in range(1, 100):
            t = os.path.join(out, "traces", "%s.round%d" % (name, r), "%d.run1.json" % i0)
            if not os.path.exists(t):
                break
            traces += ["--from-trace", t]
        fit = subprocess.run([bin, "calibrate"] + traces + [anchor["scenario"]] +
                             sets_of(anchor, os.path.join(out, "here.yaml")) + ["-o", fitted],
                             capture_output=True, text=True)
        if fit.returncode != 0:
            print("what-if %s %s: the fit failed: %s" % (name, key, fit.stderr.strip()[-300:]))
            continue
        for i, c in members[1:]:
            sim = subprocess.run([bin, "simulate", c["scenario"]] + sets_of(c, fitted) + ["--json"],
                                 capture_output=True, text=True, check=True)
            predicted = json.loads(sim.stdout)["step_time_ms"]
            label = name + " " + " ".join(c["overrides"])
            measured = merged[label]
            m = measured["measured_ms"]
            err = (predicted - m) / m
            errors.append(err)
            rows.append((label, anchor["overrides"][0], measured["predicted_ms"], predicted, m, err))
print()
print("what if: each sweep's other configurations predicted from a profile fitted to the runs of its first")
print("| configuration | fitted from | calibrated ms | what-if ms | measured ms | what-if error |")
print("|---|---|---:|---:|---:|---:|")
for label, anchor, calibrated, predicted, m, err in rows:
    print("| %s | %s | %.3f | %.3f | %.3f | %+.1f%% |" % (label, anchor, calibrated, predicted, m, 100 * err))
if errors:
    print("what-if: mean absolute error %.1f%% over %d configurations, mean signed %+.1f%%, worst %+.1f%%" %
          (100 * sum(abs(e) for e in errors) / len(errors), len(errors), 100 * sum(errors) / len(errors),
           100 * max(errors, key=abs)))
EOF
