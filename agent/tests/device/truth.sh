#!/usr/bin/env bash
# The truth suite, run from the repository root on a machine with an NVIDIA Hopper GPU (Python
# with PyTorch, torchvision and CuPy; nvidia-smi):
#   bash agent/tests/device/truth.sh SERVER_BIN AGENT_BIN OUTDIR [PHASE_S]
# Starts the server (SQLite) and the agent at its defaults, nvidia-smi dmon with GPM metrics as
# the reference reader, and truth_workload.py (11 phases of PHASE_S s, default 40: about 8 min);
# then truth_check.py asserts each phase's state, SM activity against dmon, the sawtooth's
# utilization against the workload's own busy fraction and which alerts fired where, prints the
# table and writes the trace (OUTDIR/trace.jsonl, the format of tests/fixtures/README.md).
# Exit status: truth_check.py's (0 = every assertion held).
set -u
server_bin=$1 agent_bin=$2 out=$3 phase_s=${4:-40}
D=$(dirname "$0")
source "$D/stack.sh"
stack_setup truth 18480
start_server "$out/server.log"
python3 "$D/truth_check.py" setup "http://127.0.0.1:$port" "$token" || exit 1
nvidia-smi dmon --gpm-metrics 1,2,3,5,10 -s u -d 1 -o DT >"$out/dmon.txt" 2>&1 &
dmon=$!
start_agent
sleep 3
python3 "$D/truth_workload.py" "$out/phases.json" "$phase_s" >"$out/workload.log" 2>&1
echo "workload exit $?" >>"$out/workload.log"
# The last batch: one flush interval and a little.
sleep 7
python3 "$D/truth_check.py" check "http://127.0.0.1:$port" "$token" "$out"
rc=$?
kill -TERM $agent $dmon 2>/dev/null
wait $agent 2>/dev/null
exit $rc
