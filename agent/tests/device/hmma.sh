#!/usr/bin/env bash
# The new signal tensor_hmma_active_pct (GPM HMMA_TENSOR_UTIL) end to end on a Hopper GPU, run
# from the repository root (Python with PyTorch; nvidia-smi):
#   bash agent/tests/device/hmma.sh AGENT_BIN SERVER_BIN OUTDIR [MATMUL_S]
# Starts the server (SQLite; its migrations add the column) and the agent at its defaults (NVML,
# 1 s polls), and NVIDIA's reference reader `nvidia-smi dmon --gpm-metrics 5,7 -d 1` (5 = any
# tensor pipe, 7 = HMMA tensor pipe); then 6 s idle, a bf16 8192³ matmul loop for MATMUL_S s
# (default 20), 6 s idle. Afterwards the samples are read back through the API and printed per
# second next to dmon's (hmma.txt; raw dmon in dmon.txt, the agent's log in agent.log).
# Exit status 0 when the check holds: during the matmul the stored HMMA value is present in most
# samples, above 20 % on the median and within 10 points of dmon's on the median; idle it is
# below 5 %; and it never exceeds the any-tensor value by more than 1 point.
set -u
agent_bin=$1 server_bin=$2 out=$3 matmul_s=${4:-20}
D=$(dirname "$0")
source "$D/stack.sh"
stack_setup hmma 18495
start_server "$out/server.log"
nvidia-smi dmon --gpm-metrics 5,7 -d 1 -o DT >"$out/dmon.txt" 2>&1 &
dmon=$!
start_agent
sleep 3
stamp idle
sleep 6
stamp matmul_bf16
python3 - "$matmul_s" <<'PY'
import sys, time, torch
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
end = time.time() + float(sys.argv[1])
n = 0
while time.time() < end:
    c = a @ b
    n += 1
    if n % 10 == 0:
        torch.cuda.synchronize()
torch.cuda.synchronize()
print("matmuls", n, "of 8192^3 bf16")
PY
stamp idle_end
sleep 6
stamp end
# The last batch: one flush interval and a little.
sleep 7
kill -TERM $dmon 2>/dev/null
python3 - "$out" "http://127.0.0.1:$port" "$token" <<'PY' | tee "$out/hmma.txt"
import statistics, sys
from datetime import datetime, timezone
from readback import first_gpu, marks as read_marks, parse_dmon, phase_at, samples as read_samples
out, url, token = sys.argv[1:]
marks = read_marks(out)
# dmon prints its default columns (pwr, gtemp, sm, …) first, then the GPM metrics in the order
# asked: the last two columns (named mmaact and hmmat by driver 580) are metrics 5 (any tensor
# pipe) and 7 (HMMA).
dmon = {sec: list(row.values())[-2:] for sec, row in parse_dmon(f"{out}/dmon.txt").items()}
header = next((l.rstrip() for l in open(f"{out}/dmon.txt") if l.startswith("#Date")), None)
print("dmon header:", header)
uuid = first_gpu(url, token)["uuid"]
t0, t1 = marks[0][0] - 3000, marks[-1][0] + 1000
samples = read_samples(url, token, uuid, t0, t1)
def fmt(v):
    return "   -  " if v is None else f"{v:6.2f}"
print(f"GPU {uuid}; agent = what the server stored (tensor_active_pct, tensor_hmma_active_pct); "
      "dmon = nvidia-smi dmon --gpm-metrics 5,7 of the same second (a 1-s window ending then)")
print(f"{'time (UTC)':>12} {'phase':>12} | {'agent any':>9} {'agent HMMA':>10} | {'dmon 5':>6} {'dmon 7':>6}")
by = {}
for s in samples:
    sec = s["ts_ms"] // 1000
    d = dmon.get(sec, [None, None]) + [None, None]
    any_t, hmma = s.get("tensor_active_pct"), s.get("tensor_hmma_active_pct")
    ph = phase_at(marks, s["ts_ms"])
    by.setdefault(ph, []).append((any_t, hmma, d[1]))
    t = datetime.fromtimestamp(s["ts_ms"] / 1000, timezone.utc).strftime("%H:%M:%S.%f")[:-3]
    print(f"{t:>12} {ph:>12} | {fmt(any_t):>9} {fmt(hmma):>10} | {fmt(d[0])} {fmt(d[1])}")
ok = True
def check(cond, what):
    global ok
    print(("PASS " if cond else "FAIL ") + what)
    ok = ok and cond
def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None
for ph, rows in by.items():
    print(f"{ph}: {len(rows)} samples, HMMA present in {sum(r[1] is not None for r in rows)}, "
          f"median agent HMMA {med([r[1] for r in rows])}, median dmon 7 {med([r[2] for r in rows])}")
# The first and last second of the loop straddle its edges: leave them out of the medians.
mm = by.get("matmul_bf16", [])[2:-2]
check(len(mm) >= 5 and sum(r[1] is not None for r in mm) >= 0.8 * len(mm), "HMMA present during the matmul")
m_agent, m_dmon = med([r[1] for r in mm]), med([r[2] for r in mm])
check(m_agent is not None and m_agent > 20, f"matmul median HMMA {m_agent} > 20 %")
check(m_agent is not None and m_dmon is not None and abs(m_agent - m_dmon) <= 10,
      f"matmul median HMMA {m_agent} within 10 points of dmon's {m_dmon}")
idle = [r[1] for ph in ("idle", "idle_end") for r in by.get(ph, [])[2:]]
check(all(v is None or v < 5 for v in idle), f"idle HMMA below 5 % ({med(idle)} median)")
check(all(h is None or a is None or h <= a + 1 for rows in by.values() for a, h, _ in rows),
      "HMMA never above any-tensor + 1 point")
sys.exit(0 if ok else 1)
PY
rc=${PIPESTATUS[0]}
kill -TERM $agent 2>/dev/null
wait $agent 2>/dev/null
grep -iE "hmma|GPM" "$out/agent.log" | tail -10
exit $rc
