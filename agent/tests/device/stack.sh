# Sourced by the device scripts that run the server and the agent together (counters.sh, hmma.sh,
# truth.sh) once they have set server_bin, agent_bin, out and D (their own folder).

# stack_setup NAME PORT: UTC times; unbuffered Python that imports this folder's modules
# (readback.py); OUTDIR made; $tmp a new folder; $port; $token, the server's admin key, named
# after the script; the binaries executable; and what the script starts stopped when it exits.
stack_setup() {
  export TZ=UTC PYTHONUNBUFFERED=1 PYTHONPATH="$D"
  mkdir -p "$out"
  tmp=$(mktemp -d)
  port=$2
  token="fl_$1_$(date +%s)_0123456789abcdef0123"
  chmod +x "$server_bin" "$agent_bin"
  trap 'kill ${server:-} ${agent:-} ${dmon:-} ${probe:-} 2>/dev/null || true' EXIT
}

# start_server LOG: the server on 127.0.0.1:$port on an SQLite database under $tmp, with $token
# as its admin key (stdout to $tmp/server.out, stderr to LOG); sets $server to its pid and
# returns once it is ready (10 s at most).
start_server() {
  FLEETLENS_ADMIN_TOKEN=$token "$server_bin" --listen "127.0.0.1:$port" --database-url "sqlite://$tmp/db" \
    --static-dir /nonexistent >"$tmp/server.out" 2>"$1" &
  server=$!
  for _ in $(seq 1 100); do curl -fsS "http://127.0.0.1:$port/readyz" >/dev/null 2>&1 && break; sleep 0.1; done
}

# start_agent: the agent at its defaults (NVML, 1-s polls, a batch every 5 s) at info level,
# pushing to the server; its log in OUTDIR/agent.log; sets $agent to its pid.
start_agent() {
  RUST_LOG=info "$agent_bin" --server "http://127.0.0.1:$port" --api-key "$token" \
    --spool-dir "$tmp/spool" 2>"$out/agent.log" &
  agent=$!
}

# stamp NAME: the start of phase NAME, as "<unix ms> NAME" in OUTDIR/marks.txt
# (readback.marks reads it back).
stamp() { echo "$(date +%s%3N) $1" >>"$out/marks.txt"; }
