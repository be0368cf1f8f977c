"""The figures of one `benches/round.sh` run, as the issue-26 target table reads them.

    python3 benches/round_summary.py target/round

Criterion medians come from `target/criterion/<group>/<bench>/new/estimates.json`; instruction
counts from the callgrind profiles the script wrote (a function's inclusive instructions are
summed over every call site that calls it, divided by the number of calls); the other benches'
own summary lines are quoted from their logs.
"""

import glob
import json
import os
import re
import sys

OUT = sys.argv[1] if len(sys.argv) > 1 else "target/round"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CRITERION = os.path.join(ROOT, "target", "criterion")


def median_ns(group, bench):
    path = os.path.join(CRITERION, group, bench, "new", "estimates.json")
    try:
        with open(path) as f:
            return json.load(f)["median"]["point_estimate"]
    except (OSError, KeyError, ValueError):
        return None


def per_call(profile, pattern):
    """Inclusive instructions per call of the functions whose names match `pattern`."""
    names, want = {}, re.compile(pattern)
    total = calls = 0
    pending = None
    try:
        f = open(profile)
    except OSError:
        return None
    with f:
        for line in f:
            if line.startswith("cfn="):
                m = re.match(r"cfn=\((\d+)\)(?: (.*))?", line.strip())
                if m:
                    if m.group(2):
                        names[m.group(1)] = m.group(2)
                    pending = names.get(m.group(1), "")
                else:
                    pending = line[4:].strip()
            elif line.startswith("fn="):
                m = re.match(r"fn=\((\d+)\)(?: (.*))?", line.strip())
                if m and m.group(2):
                    names[m.group(1)] = m.group(2)
            elif line.startswith("calls=") and pending is not None:
                n = int(line.split("=", 1)[1].split()[0])
                cost = next(f).split()
                if want.search(pending):
                    calls += n
                    total += int(cost[1])
                pending = None
    return (total / calls, calls) if calls else None


def totals(profile):
    with open(profile) as f:
        for line in f:
            if line.startswith(("summary:", "totals:")):
                return int(line.split()[1])
    return None


def log_tail(name, n, needle=None):
    try:
        with open(os.path.join(OUT, f"{name}.log")) as f:
            lines = [l.rstrip() for l in f]
    except OSError:
        return [f"({name}: no log)"]
    if needle:
        lines = [l for l in lines if re.search(needle, l)]
    return lines[-n:]


def show(label, value, unit=""):
    print(f"| {label} | {value}{unit} |")


def fmt(x, digits=1):
    return "—" if x is None else f"{x:,.{digits}f}"


def ratio(a, b):
    return None if a is None or b is None or b == 0 else a / b


print("| figure | value |")
print("|---|---|")
s = "stack_overhead"
floor, decide, comp = (median_ns(s, b) for b in ("a_floor_service_fn", "g_decide_200_rules", "f_composite_200_rules"))
for b in ("a_floor_service_fn", "g_decide_200_rules", "h_decide_200_rules_hot", "f_composite_200_rules",
          "e_gate_only_200_rules", "d_filters_only", "b_full_stack_200_rules"):
    show(f"{s}/{b}", fmt(median_ns(s, b)), " ns")
show("26.1 composite ÷ decide (timed)", fmt(ratio(comp, decide), 2), "×")
show("26.1 composite ÷ floor (timed)", fmt(ratio(comp, floor), 1), "×")
cg = {}
for b in ("f_composite_200_rules", "g_decide_200_rules", "e_gate_only_200_rules", "d_filters_only",
          "b_full_stack_200_rules"):
    fn = r"Governance>::decide$|Governance::decide$" if b.startswith("g_") else r"stack::drive"
    cg[b] = per_call(os.path.join(OUT, f"cg.{b}"), fn)
    show(f"instructions per call, {b}", fmt(cg[b][0] if cg[b] else None, 0))
if cg["f_composite_200_rules"] and cg["g_decide_200_rules"]:
    show("26.1 composite ÷ decide (instructions)",
         fmt(cg["f_composite_200_rules"][0] / cg["g_decide_200_rules"][0], 2), "×")
c = "engine_vs_cedar_200_rules"
td, cb = median_ns(c, "toolgate_decide"), median_ns(c, "cedar_build_request_and_authorize")
show(f"{c}/toolgate_decide", fmt(td), " ns")
show(f"{c}/cedar_build_request_and_authorize", fmt(cb and cb / 1000), " µs")
show("26.2 Cedar with request building ÷ decide", fmt(ratio(cb, td), 0), "×")
e = "exposure_10k_tools"
first = median_ns(e, "expose_first")
show("26.5 first exposure per tool (timed)", fmt(first and first / 10_000), " ns")
ex = per_call(os.path.join(OUT, "cg.expose_first"), r"compute_exposure")
show("26.5 first exposure, instructions per tool", fmt(ex and ex[0] / 10_000, 0))
o = "over_time"
d0, d1 = median_ns(o, "decide_200_rules"), median_ns(o, "decide_at_50_quotas_50_grants")
show("26.6 decide_at 50 quotas + 50 grants ÷ decide (timed)", fmt(ratio(d1, d0), 3), "×")
for b in ("decide_200_rules", "decide_at_50_quotas_50_grants", "reserve_memory", "reserve_sqlite"):
    show(f"{o}/{b}", fmt(median_ns(o, b)), " ns")
replay = median_ns("policy_simulate", "replay_100000_recorded_calls")
show("26.6 policy simulate, 100,000 calls", fmt(replay and replay / 1e9, 3), " s")
stdio = []
for n in (100, 600):
    profiles = glob.glob(os.path.join(OUT, f"cg-stdio-{n}", "callgrind.out.*"))
    stdio.append(totals(profiles[0]) if len(profiles) == 1 else None)
if None not in stdio:
    show("26.3 proxy instructions per governed call ((600 − 100) ÷ 500)", fmt((stdio[1] - stdio[0]) / 500, 0))
print()
for name, n, needle in (("quota_processes", 12, r"^\||^##|exact"), ("pending_page", 12, None),
                        ("replicas", 4, None), ("stdio_python", 3, None), ("stdio_rmcp", 3, None),
                        ("http_sessions", 8, None), ("serve_memory", 6, None)):
    print(f"{name}:")
    for line in log_tail(name, n, needle):
        print(f"    {line}")
