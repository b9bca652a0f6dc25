#!/usr/bin/env python3
"""Where a colo-run step's time goes, from its Chrome trace (colo-run PLAN ... --trace FILE).

    python3 scripts/gpu/trace_summary.py TRACE.json [--steps 2] [--top 30] > summary.json

Per step (the trace holds the last --steps steps): the device's busy time against the traced span,
the kernels by total time (and by kind: matrix products, attention, colo's fused kernels, copies,
the rest), kernel launches, for each of colo's phases (forward, backward, gradient reduction,
optimizer; or whatever colo:* scopes the trace holds) its host time and the device time of the kernels
launched inside it, and the CUDA runtime calls by host time, overall and by phase (a synchronising call
that waits for the device shows here).
"""
import argparse
import bisect
import collections
import json
import re
import sys

KINDS = [
    ("gemm", re.compile(r"gemm|cutlass|xmma|nvjet|cublas|sm\d+_.*_tn|s16816|hmma", re.I)),
    ("attention", re.compile(r"flash|fmha|attention|sdpa", re.I)),
    ("colo", re.compile(r"colo", re.I)),
    ("copy", re.compile(r"memcpy|memset|copy", re.I)),
    ("nccl", re.compile(r"nccl", re.I)),
]


def kind_of(name):
    for kind, pattern in KINDS:
        if pattern.search(name):
            return kind
    return "other"


def union_us(intervals):
    total, end = 0.0, float("-inf")
    for start, stop in sorted(intervals):
        if stop <= end:
            continue
        total += stop - max(start, end)
        end = stop
    return total


def summarize(trace, steps, top):
    events = [e for e in trace.get("traceEvents", []) if e.get("ph") == "X"]
    device = [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    launches = {e["args"]["correlation"]: e for e in events
                if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})}
    scopes = sorted((e for e in events if e.get("cat") == "user_annotation" and e.get("name", "").startswith("colo:")),
                    key=lambda e: e["ts"])
    starts = [s["ts"] for s in scopes]
    host = [e for e in events if e.get("cat") in ("cpu_op", "user_annotation", "cuda_runtime")]
    span = (max(e["ts"] + e["dur"] for e in host) - min(e["ts"] for e in host)) if host else 0.0

    by_name = collections.defaultdict(lambda: [0.0, 0])
    by_kind = collections.Counter()
    by_phase = collections.Counter()
    for k in device:
        by_name[k["name"]][0] += k["dur"]
        by_name[k["name"]][1] += 1
        by_kind[kind_of(k["name"]) if k.get("cat") == "kernel" else "copy"] += k["dur"]
        launch = launches.get(k.get("args", {}).get("correlation"))
        phase = "outside colo's phases"
        if launch is not None:
            i = bisect.bisect_right(starts, launch["ts"]) - 1
            # The innermost scope that began before the launch and had not ended.
            while i >= 0:
                s = scopes[i]
                if s["ts"] <= launch["ts"] <= s["ts"] + s["dur"]:
                    phase = s["name"]
                    break
                i -= 1
        by_phase[phase] += k["dur"]
    phase_host = collections.Counter()
    for s in scopes:
        phase_host[s["name"]] += s["dur"]
    runtime = collections.defaultdict(lambda: [0.0, 0])
    runtime_by_phase = collections.defaultdict(lambda: collections.defaultdict(lambda: [0.0, 0]))
    for call in (e for e in events if e.get("cat") in ("cuda_runtime", "cuda_driver")):
        runtime[call["name"]][0] += call["dur"]
        runtime[call["name"]][1] += 1
        phase = next((sc["name"] for sc in reversed(scopes[:bisect.bisect_right(starts, call["ts"])])
                      if sc["ts"] <= call["ts"] <= sc["ts"] + sc["dur"]), "outside colo's phases")
        runtime_by_phase[phase][call["name"]][0] += call["dur"]
        runtime_by_phase[phase][call["name"]][1] += 1

    per = lambda us: round(us / steps / 1e3, 3)  # ms a step
    busy = union_us([(k["ts"], k["ts"] + k["dur"]) for k in device])
    kernels = sum(1 for k in device if k.get("cat") == "kernel")
    return {
        "steps": steps,
        "traced_span_ms_per_step": per(span),
        "device_busy_ms_per_step": per(busy),
        "device_busy_share": round(busy / span, 3) if span else None,
        "kernel_launches_per_step": round(kernels / steps),
        "device_ms_per_step_by_kind": {k: per(v) for k, v in by_kind.most_common()},
        "device_ms_per_step_by_phase": {k: per(v) for k, v in by_phase.most_common()},
        "host_ms_per_step_by_phase": {k: per(v) for k, v in phase_host.most_common()},
        "runtime_calls": [{"name": n, "ms_per_step": per(t), "calls_per_step": round(c / steps, 1)}
                          for n, (t, c) in sorted(runtime.items(), key=lambda x: -x[1][0])[:12]],
        "runtime_calls_by_phase": {phase: [{"name": n, "ms_per_step": per(t), "calls_per_step": round(c / steps, 1)}
                                           for n, (t, c) in sorted(calls.items(), key=lambda x: -x[1][0])[:6]]
                                   for phase, calls in runtime_by_phase.items()},
        "top_kernels": [{"name": n[:160], "ms_per_step": per(t), "calls_per_step": round(c / steps, 1), "kind": kind_of(n)}
                        for n, (t, c) in sorted(by_name.items(), key=lambda x: -x[1][0])[:top]],
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace")
    ap.add_argument("--steps", type=int, default=2, help="steps the trace holds (colo-run traces the last 2)")
    ap.add_argument("--top", type=int, default=30)
    a = ap.parse_args()
    try:
        with open(a.trace) as f:
            trace = json.load(f)
    except (OSError, ValueError) as e:
        print(f"trace_summary: {a.trace}: {e}", file=sys.stderr)
        return 2
    json.dump(summarize(trace, max(1, a.steps), a.top), sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
