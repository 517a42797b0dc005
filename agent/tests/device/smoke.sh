#!/usr/bin/env bash
# End-to-end smoke test on a real NVIDIA GPU host: the release server on SQLite, the agent
# reading NVML next to a bf16 matmul (PyTorch), then what the API says. Results under $OUT.
#   bash agent/tests/device/smoke.sh target/release/fleetlens-server target/release/fleetlens-agent "$OUT"
set -euo pipefail
server_bin=$1 agent_bin=$2 out=$3
mkdir -p "$out"
tmp=$(mktemp -d)
token="fl_device_smoke_$(date +%s)_0123456789abcdef"
FLEETLENS_ADMIN_TOKEN=$token "$server_bin" --listen 127.0.0.1:18080 --database-url "sqlite://$tmp/db" \
  --static-dir /nonexistent >"$out/server.out" 2>"$out/server.err" &
server=$!
trap 'kill $server ${agent:-} ${load:-} 2>/dev/null || true' EXIT
for _ in $(seq 1 50); do curl -fsS http://127.0.0.1:18080/readyz >/dev/null 2>&1 && break; sleep 0.2; done
# 10 s idle, then 20 s of bf16 matmuls on GPU 0.
"$agent_bin" --server http://127.0.0.1:18080 --api-key "$token" --source nvml --interval 1s \
  --flush-interval 2s --spool-dir "$tmp/spool" 2>"$out/agent.err" &
agent=$!
sleep 10
python3 - >"$out/load.out" 2>&1 <<'PY' &
import time, torch
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
end = time.time() + 20
while time.time() < end:
    b = a @ a
torch.cuda.synchronize()
print("done")
PY
load=$!
wait $load || true
sleep 4
nvidia-smi --query-gpu=index,uuid,name --format=csv >"$out/nvidia-smi.csv"
api() { curl -fsS -H "Authorization: Bearer $token" "http://127.0.0.1:18080$1"; }
api /api/v1/gpus >"$out/gpus.json"
uuid=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); g=d["gpus"] if isinstance(d,dict) else d; print(sorted(g, key=lambda x: x.get("gpu_index") or 0)[0]["uuid"])' "$out/gpus.json")
api "/api/v1/gpus/$uuid/samples?limit=100" >"$out/samples.json"
api /api/v1/events >"$out/events.json"
api /metrics >"$out/metrics.txt"
python3 - "$out/samples.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
s = d["samples"] if isinstance(d, dict) else d
print(f"{len(s)} samples of {s[0]['uuid']} ({s[0].get('name')})")
for x in s:
    print(f"  ts {x['ts_ms']} util {x.get('gpu_util_pct')} smact {x.get('sm_active_pct')} tensor {x.get('tensor_active_pct')} dram {x.get('dram_active_pct')} mem {x.get('mem_used_bytes')}")
PY
echo "events: $(cat "$out/events.json")"
grep -c . "$out/agent.err" || true
