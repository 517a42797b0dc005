#!/usr/bin/env bash
# Two checks on the device machine: the agent as an unprivileged user (nobody) sees the GPU and
# the processes on it; and where its resident memory is (anonymous vs. mapped files such as
# libnvidia-ml.so). Usage: bash agent/tests/device/nonroot-rss.sh PATH/TO/fleetlens-agent OUTDIR
set -u
BIN=$1
OUT=$2
D=agent/tests/device
chmod 755 "$BIN"
cp "$BIN" /tmp/fleetlens-agent && chmod 755 /tmp/fleetlens-agent
export FLEETLENS_WIRE_FORMAT=json  # receiver.py, the stand-in server, reads gzip JSON
python3 $D/receiver.py 18081 /tmp/nonroot-batches.jsonl & RECV=$!
python3 $D/holder.py & H=$!
sleep 6
{
  echo "== as nobody: --once"
  id nobody
  ls -la /dev/nvidia* | head -5
  mkdir -p /tmp/spool-nobody && chmod 777 /tmp/spool-nobody
  RUST_LOG=info setpriv --reuid=65534 --regid=65534 --clear-groups /tmp/fleetlens-agent --source nvml --once \
    --server http://127.0.0.1:18081 --api-key x --host nobody-check --spool-dir /tmp/spool-nobody 2>&1
  echo "rc=$?"
  python3 -c "import json; b=[json.loads(l) for l in open('/tmp/nonroot-batches.jsonl')][-1]; s=b['samples'][0]; print(json.dumps({k: s.get(k) for k in ['uuid','gpu_util_pct','sm_active_pct','mem_used_bytes','energy_j','processes']}))"
  echo "== memory of a running agent (1 s, defaults) after 20 s"
  RUST_LOG=warn /tmp/fleetlens-agent --source nvml --server http://127.0.0.1:18081 --api-key x --host rss-check \
    --spool-dir /tmp/spool-rss & A=$!
  sleep 20
  grep -E "^(VmRSS|VmHWM|RssAnon|RssFile|RssShmem|Threads)" /proc/$A/status
  echo "-- largest mappings (Rss kB)"
  awk '/^[0-9a-f]+-[0-9a-f]+ /{name=$6} /^Rss:/{rss[name]+=$2} END{for(n in rss) print rss[n], n}' /proc/$A/smaps | sort -rn | head -8
  kill $A
} > "$OUT/nonroot-rss.txt" 2>&1
kill $H $RECV
cat "$OUT/nonroot-rss.txt"
