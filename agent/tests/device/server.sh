# Sourced by the device scripts (counters.sh, hmma.sh, truth.sh): the server they test against.

# start_server SERVER_BIN PORT TOKEN LOG: starts the server on 127.0.0.1:PORT on an SQLite
# database under $tmp, with TOKEN as its admin key (stdout to $tmp/server.out, stderr to LOG);
# sets $server to its pid and returns once it is ready (10 s at most).
start_server() {
  FLEETLENS_ADMIN_TOKEN=$3 "$1" --listen "127.0.0.1:$2" --database-url "sqlite://$tmp/db" \
    --static-dir /nonexistent >"$tmp/server.out" 2>"$4" &
  server=$!
  for _ in $(seq 1 100); do curl -fsS "http://127.0.0.1:$2/readyz" >/dev/null 2>&1 && break; sleep 0.1; done
}
