#!/usr/bin/env bash
# Runs the product on this machine: builds the server, the agent and the dashboard, starts the
# server on embedded SQLite, and a simulated fleet of 16 GPUs pushing to it. Ctrl-C stops both.
#   FLEETLENS_LISTEN   (default 127.0.0.1:8080)
#   FLEETLENS_DATA_DIR (default ./data)
set -euo pipefail
cd "$(dirname "$0")/.."

listen="${FLEETLENS_LISTEN:-127.0.0.1:8080}"
data_dir="${FLEETLENS_DATA_DIR:-./data}"
mkdir -p "$data_dir"

echo "==> building server and agent (release)"
cargo build --release -p fleetlens-server -p fleetlens-agent

echo "==> building the dashboard"
./frontend/build.sh

token_file="$data_dir/admin-token"
if [ ! -s "$token_file" ]; then
  head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' | sed 's/^/fl_/' >"$token_file"
  chmod 600 "$token_file"
fi
token="$(cat "$token_file")"

cleanup() { kill "${agent_pid:-}" "${server_pid:-}" 2>/dev/null || true; wait 2>/dev/null || true; }
trap cleanup EXIT INT TERM

FLEETLENS_ADMIN_TOKEN="$token" ./target/release/fleetlens-server \
  --listen "$listen" --database-url "sqlite://$data_dir/fleetlens.db" --static-dir frontend/dist \
  >"$data_dir/server.out" 2>"$data_dir/server.log" &
server_pid=$!
url=""
for _ in $(seq 1 100); do
  url="$(grep -o 'http://[^ ]*' "$data_dir/server.out" | head -n1 || true)"
  [ -n "$url" ] && break
  kill -0 "$server_pid" 2>/dev/null || { cat "$data_dir/server.log"; exit 1; }
  sleep 0.1
done
[ -n "$url" ] || { echo "server did not start; see $data_dir/server.log"; exit 1; }

./target/release/fleetlens-agent --server "${url%/}" --api-key "$token" --source simulate:16 \
  --spool-dir "$data_dir/spool" 2>"$data_dir/agent.log" &
agent_pid=$!

cat <<MSG

  Fleetlens is running: a server on embedded SQLite and a simulated fleet of 16 GPUs.

  Dashboard:  $url
  API key:    $token   (admin; also in $token_file)
  Try:        curl -s -H "Authorization: Bearer $token" ${url}api/v1/gpus
  Logs:       $data_dir/server.log, $data_dir/agent.log

  Ctrl-C stops both.
MSG
wait "$server_pid"
