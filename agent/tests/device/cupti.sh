#!/usr/bin/env bash
# The agent (defaults) and gpm_probe.py while PyTorch's profiler collects CUPTI metrics
# (`_ExperimentalConfig(profiler_metrics=...)`, CUPTI's range profiler, which takes the
# performance monitors) over 40 s of a matmul loop; what the agent sent (a stand-in server), what
# GPM returned alongside, and the agent's GPM log lines. Run from the repository root:
#   bash agent/tests/device/cupti.sh AGENT_BIN OUTDIR      (~75 s)
set -u
agent_bin=$1 out=$2; D=$(dirname "$0")
chmod +x "$agent_bin"
export FLEETLENS_WIRE_FORMAT=json  # receiver.py, the stand-in server, reads gzip JSON
python3 "$D/receiver.py" 18491 /tmp/b.jsonl & r=$!
RUST_LOG=info "$agent_bin" --server http://127.0.0.1:18491 --api-key x --spool-dir /tmp/sp 2>"$out/agent.log" & a=$!
python3 "$D/gpm_probe.py" "$out/probe.jsonl" 70 & p=$!
sleep 8
echo "$(date +%s%3N) cupti_start" >"$out/marks.txt"
timeout 90 python3 - >"$out/cupti.out" 2>&1 <<'PY'
import time, torch
from torch.profiler import profile, ProfilerActivity, _ExperimentalConfig
print(torch.__version__)
x = torch.randn(4096, 4096, device="cuda")
cfg = _ExperimentalConfig(profiler_metrics=["kineto__tensor_core_insts", "dram__bytes_read.sum",
                                            "sm__cycles_active.avg"], profiler_measure_per_kernel=False)
end = time.time() + 40
with profile(activities=[ProfilerActivity.CUDA], experimental_config=cfg) as prof:
    while time.time() < end:
        for _ in range(20):
            y = x @ x
        torch.cuda.synchronize()
print("profiled")
print(prof.key_averages().table(row_limit=4))
PY
echo "rc=$?" >>"$out/cupti.out"
echo "$(date +%s%3N) cupti_end" >>"$out/marks.txt"
sleep 14
kill $p; kill -TERM $a; wait $a; kill $r
python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
marks = [l.split() for l in open(f"{out}/marks.txt")]
t0, t1 = int(marks[0][0]), int(marks[1][0])
rows, events = [], []
for l in open("/tmp/b.jsonl"):
    b = json.loads(l)
    events += b.get("events", [])
    for s in b["samples"]:
        seg = "before" if s["ts_ms"] < t0 else ("cupti" if s["ts_ms"] < t1 else "after")
        rows.append((seg, s["ts_ms"], s.get("gpu_util_pct"), s.get("sm_active_pct"), s.get("gr_engine_active_pct")))
with open(f"{out}/samples.jsonl", "w") as f:
    for r in rows:
        f.write(json.dumps(r) + "\n")
print("events", events)
for seg in ("before", "cupti", "after"):
    rs = [r for r in rows if r[0] == seg]
    print(seg, len(rs), "samples; SMACT absent in", sum(r[3] is None for r in rs),
          "; util", [round(r[2]) for r in rs if r[2] is not None][:50], "; smact", [round(r[3], 1) for r in rs if r[3] is not None][:50])
PY
grep -iE "gpm" "$out/agent.log" | tail -5
grep -v '"util"' "$out/probe.jsonl" | head -3; python3 -c "
import json; rs=[json.loads(l) for l in open('$out/probe.jsonl')]
print('probe lines', len(rs), 'with errors', sum(1 for r in rs if any('error' in k for k in r)))
print(rs[len(rs)//2])"
tail -12 "$out/cupti.out"
