#!/usr/bin/env bash
# The agent's device check, run from the repository root on a machine with an NVIDIA GPU:
#   bash agent/tests/device/run.sh PATH/TO/fleetlens-agent OUTDIR
# Runs `fleetlens-agent --source nvml --interval 1s` (debug timing on) next to workload.py, with
# nvidia-smi dmon and nvidia-smi --query-gpu recording alongside, then measures the agent's CPU and
# memory in several configurations. Writes into OUTDIR:
#   info.txt      nvidia-smi, driver, host          batches.jsonl  every batch the agent sent
#   agent.log     the recording agent's log         phases.log     "<unix ms> <phase>" per change
#   smi.csv       nvidia-smi --query-gpu, 1 s       dmon.txt       nvidia-smi dmon -s um -d 1 -o DT
#   overhead.jsonl  CPU ms per poll, % of a core, RSS per configuration
#   misc.log      the other agents' logs, the workload's output, the --once check
set -u
BIN=$1
OUT=$2
D=agent/tests/device
export TZ=UTC PYTHONUNBUFFERED=1
chmod +x "$BIN"
{
  date -u; uname -a; nproc; nvidia-smi
  nvidia-smi --query-gpu=name,uuid,serial,pci.bus_id,driver_version,memory.total,power.limit,clocks.max.sm,mig.mode.current --format=csv
  ldd "$BIN"
} > "$OUT/info.txt" 2>&1

export FLEETLENS_WIRE_FORMAT=json  # receiver.py, the stand-in server, reads gzip JSON
python3 $D/receiver.py 18080 "$OUT/batches.jsonl" & RECV=$!
python3 $D/receiver.py 18081 /tmp/other-batches.jsonl & RECV2=$!
sleep 1

# --once: one reading, delivered, exit 0.
{ echo "== --once"; RUST_LOG=info timeout 30 "$BIN" --source nvml --once --server http://127.0.0.1:18081 \
    --api-key x --host once-check --spool-dir /tmp/spool-once; echo "rc=$?"; } >> "$OUT/misc.log" 2>&1

nvidia-smi dmon -s um -d 1 -o DT > "$OUT/dmon.txt" 2>&1 & DMON=$!
nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used --format=csv -lms 1000 > "$OUT/smi.csv" 2>&1 & SMI=$!
RUST_LOG=info,fleetlens_agent::source::nvml=debug "$BIN" --source nvml --interval 1s --log-format json --server http://127.0.0.1:18080 \
  --api-key device-test --host h100-device --spool-dir /tmp/spool-a 2> "$OUT/agent.log" & A=$!
# A second agent at info level with the defaults: its cost under load, without debug timing.
RUST_LOG=info "$BIN" --source nvml --interval 1s --server http://127.0.0.1:18081 --api-key x --host load-check \
  --spool-dir /tmp/spool-e 2> /tmp/agent-e.log & E=$!
sleep 4
E0=$(python3 $D/overhead.py stat $E)
python3 $D/workload.py "$OUT/phases.log" 8 > /tmp/workload.out 2>&1
sleep 3
E1=$(python3 $D/overhead.py stat $E)
python3 $D/overhead.py diff 1s-defaults-under-workload 1 "$E0" "$E1" >> "$OUT/overhead.jsonl"
kill -TERM $A $E; wait $A $E
kill $DMON $SMI 2>/dev/null

# Idle GPU: several configurations side by side for 60 s.
python3 $D/overhead.py spawn "$BIN" "$OUT/overhead.jsonl" 60 >> "$OUT/misc.log" 2>&1
kill $RECV $RECV2 2>/dev/null
{
  echo "== workload"; cat /tmp/workload.out
  for f in /tmp/agent-e.log /tmp/agent-*.log; do echo "== $f"; cat "$f"; done
  echo "== other batches: $(wc -l < /tmp/other-batches.jsonl)"
} >> "$OUT/misc.log" 2>&1
ls -la "$OUT"
