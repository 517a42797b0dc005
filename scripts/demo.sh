#!/usr/bin/env bash
# Runs the product on this machine: builds the server, the agent and the dashboard, starts the
# server on embedded SQLite, and a simulated fleet of 16 GPUs pushing to it. Ctrl-C stops both.
# Prints the dashboard's URL and the admin's email and password to log in with.
#   FLEETLENS_LISTEN         (default 127.0.0.1:8080)
#   FLEETLENS_DATA_DIR       (default ./data)
#   FLEETLENS_ADMIN_EMAIL    (default admin@example.com)
#   FLEETLENS_ADMIN_PASSWORD (default: generated once, kept in $FLEETLENS_DATA_DIR/admin-password)
#   FLEETLENS_WEBHOOK_ALLOW_CIDRS (default 127.0.0.0/8: notification channels may point at
#                            receivers on this machine; docs/SECURITY.md)
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
admin_email="${FLEETLENS_ADMIN_EMAIL:-admin@example.com}"
password_file="$data_dir/admin-password"
if [ -z "${FLEETLENS_ADMIN_PASSWORD:-}" ] && [ ! -s "$password_file" ]; then
  head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$password_file"
  chmod 600 "$password_file"
fi
admin_password="${FLEETLENS_ADMIN_PASSWORD:-$(cat "$password_file")}"
# Session cookies are Secure; browsers accept that over plain http only on loopback.
cookie_secure=true
case "$listen" in 127.*|localhost:*|"[::1]":*) ;; *) cookie_secure=false ;; esac

cleanup() { kill "${agent_pid:-}" "${server_pid:-}" 2>/dev/null || true; wait 2>/dev/null || true; }
trap cleanup EXIT INT TERM

FLEETLENS_ADMIN_TOKEN="$token" FLEETLENS_ADMIN_EMAIL="$admin_email" FLEETLENS_ADMIN_PASSWORD="$admin_password" \
  ./target/release/fleetlens-server --cookie-secure "$cookie_secure" \
  --webhook-allow-cidrs "${FLEETLENS_WEBHOOK_ALLOW_CIDRS:-127.0.0.0/8}" \
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

# The agents get an `ingest` key of their own, minted through the API, not the admin token.
# No secret goes on a command line (visible in `ps`): curl reads its header from stdin, the
# agent its key from FLEETLENS_API_KEY.
api() { printf 'header = "Authorization: Bearer %s"\n' "$1" | curl -sS --config - "${@:2}"; }
agent_key_file="$data_dir/agent-key"
if [ ! -s "$agent_key_file" ] || [ "$(api "$(cat "$agent_key_file")" -o /dev/null -w '%{http_code}' "${url}api/v1/auth/me")" != 200 ]; then
  api "$token" -H 'content-type: application/json' -d '{"name":"demo agents","scopes":["ingest"]}' \
    "${url}api/v1/api-keys" | sed -n 's/.*"key":"\([^"]*\)".*/\1/p' >"$agent_key_file"
  chmod 600 "$agent_key_file"
  [ -s "$agent_key_file" ] || { echo "could not mint the agents' ingest key; see $data_dir/server.log"; exit 1; }
fi
FLEETLENS_API_KEY="$(cat "$agent_key_file")" ./target/release/fleetlens-agent --server "${url%/}" --source simulate:16 \
  --spool-dir "$data_dir/spool" 2>"$data_dir/agent.log" &
agent_pid=$!

cat <<MSG

  Fleetlens is running: a server on embedded SQLite and a simulated fleet of 16 GPUs.

  Dashboard:  $url
  Log in as:  $admin_email
  Password:   $admin_password   (also in $password_file unless set by FLEETLENS_ADMIN_PASSWORD;
              a password changed in the dashboard is kept across restarts)
  API key:    in $token_file   (admin, for scripts; the agents use an ingest key, $agent_key_file)
  Try:        curl -s -H "Authorization: Bearer \$(cat $token_file)" ${url}api/v1/gpus
  Logs:       $data_dir/server.log, $data_dir/agent.log

  Ctrl-C stops both.
MSG
wait "$server_pid"
