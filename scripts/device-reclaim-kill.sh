#!/bin/bash
# Device run (a machine with an NVIDIA GPU): the agent's opt-in kill path next to a real CUDA
# process (docs/ACTIONS.md). A CUDA context holding 1 GiB with no kernels is idle-held; an
# `agent_kill` policy (5 s + 5 s grace) has the agent, started with --allow-reclaim-kill on the
# NVML source, SIGTERM it; a CUDA-free process of the same user survives. Results in $OUT.
#   BIN=target/debug OUT=/tmp/out scripts/device-reclaim-kill.sh
set -u
BIN=${BIN:-target/debug}
OUT=${OUT:-/tmp/fleetlens-device-out}
mkdir -p "$OUT"
cd "$BIN"
T=fl_test_admin_token_0123456789abcdef
export FLEETLENS_ADMIN_TOKEN=$T
nvidia-smi -L > "$OUT/gpu.txt" 2>&1
./fleetlens-server --listen 127.0.0.1:18080 --database-url sqlite:///tmp/fl.db --static-dir /nonexistent \
  --job-scan-interval 500ms > "$OUT/server.log" 2>&1 &
sleep 3
# A real CUDA context holding 1 GiB with no kernels: idle-held.
python3 -u - > "$OUT/cuda.log" 2>&1 <<'PY' &
import ctypes, os, time
cuda = ctypes.CDLL("libcuda.so.1")
assert cuda.cuInit(0) == 0
dev = ctypes.c_int(); assert cuda.cuDeviceGet(ctypes.byref(dev), 0) == 0
ctx = ctypes.c_void_p(); assert cuda.cuCtxCreate_v2(ctypes.byref(ctx), 0, dev) == 0
ptr = ctypes.c_uint64(); assert cuda.cuMemAlloc_v2(ctypes.byref(ptr), 1 << 30) == 0
print("cuda context up, pid", os.getpid())
time.sleep(600)
PY
CUDA_PID=$!
# A bystander CUDA-free process of the same user: must survive.
sleep 600 & BYSTANDER=$!
curl -s -H "Authorization: Bearer $T" -H 'Content-Type: application/json' -X POST http://127.0.0.1:18080/api/v1/reclaim-policies \
  -d '{"name":"kill idle","state":"idle_held","for_s":5,"grace_s":5,"action":"agent_kill"}' > "$OUT/policy.json"
./fleetlens-agent --server http://127.0.0.1:18080 --api-key $T --source nvml --interval 1s --flush-interval 1s \
  --allow-reclaim-kill --reclaim-poll-interval 1s --spool-dir /tmp/spool > "$OUT/agent.log" 2>&1 &
AGENT=$!
sleep 8; nvidia-smi > "$OUT/nvidia-smi-before.txt" 2>&1
START=$(date +%s)
while kill -0 $CUDA_PID 2>/dev/null && [ $(( $(date +%s) - START )) -lt 90 ]; do sleep 1; done
wait $CUDA_PID; echo "cuda process exit status: $? (143 = SIGTERM)" > "$OUT/result.txt"
echo "seconds after nvidia-smi: $(( $(date +%s) - START ))" >> "$OUT/result.txt"
kill -0 $BYSTANDER && echo "bystander alive" >> "$OUT/result.txt"
sleep 2
curl -s -H "Authorization: Bearer $T" http://127.0.0.1:18080/api/v1/reclaims > "$OUT/reclaims.json"
curl -s -H "Authorization: Bearer $T" "http://127.0.0.1:18080/api/v1/gpus" > "$OUT/gpus.json"
kill $AGENT $BYSTANDER; kill %1 2>/dev/null
cat "$OUT/result.txt"
