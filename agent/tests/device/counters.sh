#!/usr/bin/env bash
# GPM while another profiler holds the performance counters, and what the agent's change costs.
# Run from the repository root on a machine with an NVIDIA Hopper GPU and Nsight Compute:
#   bash agent/tests/device/counters.sh SERVER_BIN AGENT_BIN OUTDIR
# 1. The server (SQLite) and the agent at its defaults; a 2048² SGEMM loop runs 10 s alone, then
#    ~40 s under `ncu --set full` (every section: many counter passes), then ~40 s under
#    `ncu --metrics sm__cycles_active.avg`, then ~20 s under `nsys profile --gpu-metrics-devices`
#    (where nsys is installed), then 10 s alone again. gpm_probe.py reads GPM through
#    NVML's Python binding once a second alongside (what GPM itself returns: errors, zeros, stale
#    values). Afterwards the API is read back: events, and per second whether SM activity & co.
#    were reported (counters.json, probe.jsonl, agent.log, ncu-*.out).
# 2. Unless COST=0: the agent's CPU per poll with --nvml-util-window off (the instantaneous
#    reading, as before), kernel and both, each alone next to a small GPU process, alternated
#    twice (cost.jsonl; COST_SECS per window, default 40). COST_CONFIGS replaces the list;
#    MODE-gractN adds --nvml-gract-every N (e.g. COST_CONFIGS="off kernel kernel-gract5").
set -u
server_bin=$1 agent_bin=$2 out=$3
D=$(dirname "$0")
source "$D/stack.sh"
stack_setup counters 18490
start_server "$tmp/server.log"
start_agent
cat >"$tmp/loop.py" <<'PY'
import sys, time, torch
x = torch.randn(2048, 2048, device="cuda")
end = time.time() + float(sys.argv[1])
n = 0
while time.time() < end:
    y = x @ x
    n += 1
    if n % 50 == 0:
        torch.cuda.synchronize()
torch.cuda.synchronize()
print("kernels", n)
PY
python3 "$D/gpm_probe.py" "$out/probe.jsonl" 200 & probe=$!
sleep 2
stamp alone
python3 "$tmp/loop.py" 10
stamp ncu_full
timeout 60 ncu --set full python3 "$tmp/loop.py" 40 >"$out/ncu-full.out" 2>&1
echo "ncu --set full rc=$?" >>"$out/marks.txt"
stamp ncu_sm_cycles
timeout 60 ncu --metrics sm__cycles_active.avg python3 "$tmp/loop.py" 40 >"$out/ncu-metric.out" 2>&1
echo "ncu --metrics rc=$?" >>"$out/marks.txt"
# Nsight Systems' GPU metrics sampling reads the same performance monitors system-wide, all
# the time (not kernel by kernel as ncu does); where nsys is installed, it gets its own segment.
# Its output goes after ncu's in ncu-full.out (the run tool brings back at most 8 files).
if command -v nsys >/dev/null 2>&1; then
  stamp nsys_gpu_metrics
  { echo "=== nsys profile --gpu-metrics-devices=0"; nsys --version; } >>"$tmp/nsys.out" 2>&1
  timeout 50 nsys profile --gpu-metrics-devices=0 --gpu-metrics-frequency=10000 -o "$tmp/nsys-report" \
    python3 "$tmp/loop.py" 20 >>"$tmp/nsys.out" 2>&1
  echo "nsys rc=$?" >>"$out/marks.txt"
  cat "$tmp/nsys.out" >>"$out/ncu-full.out"
fi
stamp alone_again
python3 "$tmp/loop.py" 10
stamp end
sleep 7
kill $probe 2>/dev/null
python3 - "$out" "http://127.0.0.1:$port" "$token" <<'PY'
import json, sys
from readback import api, first_gpu, marks as read_marks, phase_at, samples as read_samples
out, url, token = sys.argv[1:]
marks = read_marks(out)
uuid = first_gpu(url, token)["uuid"]
t0, t1 = marks[0][0] - 3000, marks[-1][0] + 3000
samples = read_samples(url, token, uuid, t0, t1)
events = api(url, token, f"/api/v1/events?from={t0}&to={t1 + 60000}")["events"]
rows = [{"ts_ms": s["ts_ms"], "seg": phase_at(marks, s["ts_ms"]), "util": s.get("gpu_util_pct"), "smact": s.get("sm_active_pct"),
         "gract": s.get("gr_engine_active_pct"), "dram": s.get("dram_active_pct")} for s in samples]
states = {}
for (a, n), (b, _) in zip(marks, marks[1:]):
    w = max(1, (b - a - 4000) // 1000)
    st = api(url, token, f"/api/v1/gpus/{uuid}/states?from={a + 4000}&to={a + 4000 + w * 1000}&window_s={w}")
    states[n] = [(x["state"], x.get("note"), x.get("reason")) for x in st]
json.dump({"marks": marks, "samples": rows, "events": events, "states": states}, open(f"{out}/counters.json", "w"), indent=1)
print("events:", [(e["kind"], e["time"], e.get("message")) for e in events])
by = {}
for r in rows:
    d = by.setdefault(r["seg"], {"n": 0, "smact_null": 0, "util": []})
    d["n"] += 1; d["smact_null"] += r["smact"] is None; d["util"].append(r["util"])
for k, d in by.items():
    u = [x for x in d["util"] if x is not None]
    print(f"{k}: {d['n']} samples, SM activity absent in {d['smact_null']}, util mean {sum(u)/max(1,len(u)):.1f}, states {states.get(k)}")
PY
kill -TERM $agent; wait $agent
kill $server
grep -E "GPM|gpm" "$out/agent.log" | tail -20

if [ "${COST:-1}" = 1 ]; then
  # Each utilization mode alone (off = the instantaneous reading, as before the interval mean),
  # next to a small GPU process, alternated twice.
  export FLEETLENS_WIRE_FORMAT=json  # receiver.py, the stand-in server, reads gzip JSON
  python3 "$D/receiver.py" 18491 "$tmp/batches.jsonl" & recv=$!
  python3 "$D/holder.py" & holder=$!
  sleep 6
  for round in 1 2; do
    for mode in ${COST_CONFIGS:-off kernel both}; do
      case $mode in
        *-gract*) flags="--nvml-util-window ${mode%%-gract*} --nvml-gract-every ${mode##*-gract}" ;;
        *) flags="--nvml-util-window $mode" ;;
      esac
      RUST_LOG=info "$agent_bin" --server http://127.0.0.1:18491 --api-key x --host "cost-$mode" \
        $flags --spool-dir "$tmp/spool-$mode-$round" 2>>"$out/cost-agents.log" & a=$!
      sleep 5
      s0=$(python3 "$D/overhead.py" stat $a)
      sleep "${COST_SECS:-40}"
      s1=$(python3 "$D/overhead.py" stat $a)
      python3 "$D/overhead.py" diff "util-window-$mode-round$round" 1 "$s0" "$s1" | tee -a "$out/cost.jsonl"
      kill -TERM $a; wait $a
    done
  done
  kill $holder $recv
fi
