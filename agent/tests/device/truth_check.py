"""Fleetlens truth suite: alert set-up before the workload, assertions and table after it.

  python3 truth_check.py setup URL TOKEN          shorten the shipped rules' `for`, add a user rule
  python3 truth_check.py check URL TOKEN OUTDIR   assert, print the table, write OUTDIR/trace.jsonl

Every phase is judged on its samples after SETTLE_S seconds (the first ones straddle the change
and the batch in flight): the state of that window (GET /gpus/{uuid}/states with one window),
mean SM activity against nvidia-smi dmon's GPM column over the same seconds, and for the
sawtooth the agent's mean utilization against the busy fraction the workload measured itself.
"""
import json
import sys

from readback import api, first_gpu, parse_dmon, samples as read_samples

SETTLE_S = 6
SMACT_TOLERANCE = 2.0
UTIL_TOLERANCE = 10.0

# What a truthful monitor concludes in each phase.
EXPECTED = {
    "idle": {"idle"},
    "held_30gb": {"idle_held"},
    "spin_2_blocks": {"stalled"},
    "matmul_bf16": {"compute_bound"},
    "d2d_copy": {"memory_bound"},
    # Launch-bound: the GPU is mostly empty; `hollow` if kernels cover half the interval or more,
    # `starved` (the host cannot keep it busy) below that.
    "mlp_batch1": {"hollow", "starved"},
    "saw_0.5s": {"starved"},
    "saw_1s": {"starved"},
    "saw_2s": {"starved"},
    "resnet_starved": {"starved"},
    "resnet_fed": {"active", "compute_bound", "memory_bound", "low_occupancy"},
}
SAWTOOTH = ("saw_0.5s", "saw_1s", "saw_2s")

USER_RULE = {
    "name": "Copy-bound (truth suite)",
    "condition": "dram_active_pct >= 60 && tensor_active_pct < 5",
    "for_s": 10,
    "severity": "info",
    "description": "DRAM {dram_active_pct} % busy, tensor pipes {tensor_active_pct} %",
}
# Rule (shipped key, or the user rule's name) -> phases where it must fire, phases where it may.
# Everywhere else it must not fire.
ALERTS = {
    "busy_but_hollow": ({"spin_2_blocks"}, {"mlp_batch1"}),
    "inefficient": ({"spin_2_blocks"}, {"mlp_batch1"}),
    "stalled": ({"spin_2_blocks"}, set()),
    "idle_held": ({"held_30gb"}, set()),
    "agent_offline": (set(), set()),
    "throttling": (set(), set()),
    "xid_errors": (set(), set()),
    USER_RULE["name"]: ({"d2d_copy"}, set()),
}
# The shipped rules wait minutes before firing (`for`); a 40-s phase needs seconds.
SHORT_FOR_S = {"busy_but_hollow": 10, "inefficient": 10, "stalled": 10, "idle_held": 10}


def setup(url, token):
    rules = api(url, token, "/api/v1/alert-rules")["rules"]
    for r in rules:
        if r["builtin"] in SHORT_FOR_S:
            api(url, token, f"/api/v1/alert-rules/{r['id']}", {"for_s": SHORT_FOR_S[r["builtin"]]}, "PUT")
    api(url, token, "/api/v1/alert-rules", USER_RULE, "POST")
    print(f"alert rules: {len(rules)} shipped ({', '.join(sorted(SHORT_FOR_S))} with for_s 10 s), one user rule")


def mean(xs):
    xs = [x for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else None


def fmt(v, nd=1):
    return "–" if v is None else f"{v:.{nd}f}"


def check(url, token, out):
    phases = json.load(open(f"{out}/phases.json"))
    gpu = first_gpu(url, token)
    uuid = gpu["uuid"]
    t_from, t_to = phases[0]["start_ms"] - 5000, phases[-1]["end_ms"] + 8000
    samples = read_samples(url, token, uuid, t_from, t_to)
    dmon = parse_dmon(f"{out}/dmon.txt")
    smact_col = next((c for c in ("smutil", "smact") if any(r.get(c) is not None for r in dmon.values())), None)
    alerts = api(url, token, "/api/v1/alerts?status=all&limit=1000")["alerts"]
    rules = {r["id"]: r for r in api(url, token, "/api/v1/alert-rules")["rules"]}
    events = api(url, token, f"/api/v1/events?from={t_from}&to={t_to + 60000}")["events"]

    def phase_at(ts):
        for p in phases:
            if p["start_ms"] <= ts < p["end_ms"]:
                return p["phase"]
        return "outside"

    fired = {}  # rule key -> set of phases
    for a in alerts:
        if a.get("fired_at_ms") is None:
            continue
        r = rules.get(a["rule_id"], {})
        key = r.get("builtin") or a["rule_name"]
        fired.setdefault(key, set()).add(phase_at(a["fired_at_ms"]))

    failures, table = [], []
    for p in phases:
        name = p["phase"]
        lo, hi = p["start_ms"] + SETTLE_S * 1000, p["end_ms"]
        window_s = max(1, (hi - lo) // 1000)
        hi = lo + window_s * 1000
        states = api(url, token, f"/api/v1/gpus/{uuid}/states?from={lo}&to={hi}&window_s={window_s}")
        state = states[0]["state"] if states else None
        reason = states[0].get("reason") if states else None
        inside = [s for s in samples if lo <= s["ts_ms"] < hi]
        util = mean(s.get("gpu_util_pct") for s in inside)
        smact = mean(s.get("sm_active_pct") for s in inside)
        ref = [dmon[t].get(smact_col) for t in range(lo // 1000 + 1, hi // 1000) if t in dmon] if smact_col else []
        smact_ref = mean(ref)
        dmon_sm = mean(dmon[t].get("sm") for t in range(lo // 1000 + 1, hi // 1000) if t in dmon)
        busy = p.get("busy_frac")
        ok = True
        if state not in EXPECTED[name]:
            failures.append(f"{name}: state {state} ({reason}), expected {'/'.join(sorted(EXPECTED[name]))}")
            ok = False
        if smact is None or smact_ref is None or abs(smact - smact_ref) > SMACT_TOLERANCE:
            failures.append(f"{name}: SM activity {fmt(smact, 2)} vs dmon {fmt(smact_ref, 2)} (±{SMACT_TOLERANCE})")
            ok = False
        if name in SAWTOOTH and (util is None or busy is None or abs(util - 100 * busy) > UTIL_TOLERANCE):
            failures.append(f"{name}: util {fmt(util)} vs the workload's own busy {fmt(busy and 100 * busy)} (±{UTIL_TOLERANCE})")
            ok = False
        here = sorted(k for k, ph in fired.items() if name in ph)
        table.append({
            "phase": name, "expected": "/".join(sorted(EXPECTED[name])), "state": state, "samples": len(inside),
            "util": util, "busy_pct": None if busy is None else 100 * busy, "dmon_sm": dmon_sm, "smact": smact,
            "smact_dmon": smact_ref, "alerts": here, "ok": ok, "reason": reason,
        })
    for key, (must, may) in ALERTS.items():
        got = fired.get(key, set())
        for ph in sorted(must - got):
            failures.append(f"alert {key}: did not fire in {ph}")
        for ph in sorted(got - must - may):
            failures.append(f"alert {key}: fired in {ph}, where it must not")
    for key in sorted(set(fired) - set(ALERTS)):
        failures.append(f"alert {key}: fired in {sorted(fired[key])}, not expected anywhere")

    print(f"GPU {uuid} ({gpu.get('name')}), {len(samples)} samples, dmon SM activity column `{smact_col}`")
    print("| phase | expected | state | util (agent) | busy (workload, CUDA events) | util (dmon sm) "
          "| SMACT agent | SMACT dmon | alerts fired | |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in table:
        print(f"| `{r['phase']}` | {r['expected']} | **{r['state']}** | {fmt(r['util'])} | {fmt(r['busy_pct'])} "
              f"| {fmt(r['dmon_sm'])} | {fmt(r['smact'], 2)} | {fmt(r['smact_dmon'], 2)} "
              f"| {', '.join(r['alerts']) or '–'} | {'ok' if r['ok'] else 'FAIL'} |")
    print("events:", [(e["kind"], e.get("message")) for e in events])
    for line in open(f"{out}/agent.log"):
        if "NVML reading cost" in line:
            print("agent:", line.strip()[-260:])
    json.dump({"uuid": uuid, "table": table, "fired": {k: sorted(v) for k, v in fired.items()},
               "events": events, "failures": failures}, open(f"{out}/summary.json", "w"), indent=1)
    write_trace(samples, phases, gpu, f"{out}/trace.jsonl")
    if failures:
        print(f"\n{len(failures)} FAILED:")
        for f in failures:
            print("  " + f)
        return 1
    print("\nall assertions held")
    return 0


def write_trace(samples, phases, gpu, path):
    """The run's samples in the trace format of tests/fixtures/README.md, labelled by phase."""
    with open(path, "w") as f:
        for s in samples:
            label = "before"
            for p in phases:
                if s["ts_ms"] >= p["start_ms"]:
                    label = p["phase"] if s["ts_ms"] < p["end_ms"] else f"after_{p['phase']}"
            line = {"ts_ms": s["ts_ms"], "host": gpu.get("host"), "uuid": s.get("uuid", gpu["uuid"]), "phase": label}
            for k, v in s.items():
                if k in line or k in ("id", "gpu_id", "org_id", "received_ms"):
                    continue
                if k == "processes" and v:
                    v = [{"pid": q["pid"], "used_bytes": q.get("used_bytes"), "sm_pct": q.get("sm_pct")} for q in v]
                line[k] = v
            f.write(json.dumps(line, separators=(",", ":")) + "\n")


if __name__ == "__main__":
    if sys.argv[1] == "setup":
        setup(sys.argv[2], sys.argv[3])
    else:
        sys.exit(check(sys.argv[2], sys.argv[3], sys.argv[4]))
