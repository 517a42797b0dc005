# Sourced (from the repository root) by the scripts that start fleetlens-server on port 0.

# server_url OUT_FILE: the URL, without a trailing slash, that the server announces on its
# stdout (OUT_FILE) once it listens; empty when it has not within 10 s.
server_url() {
  local url=""
  for _ in $(seq 1 100); do
    url="$(sed -n 's/^fleetlens-server listening on \(http[^ ]*\)$/\1/p' "$1" | head -1)"
    [ -n "$url" ] && break
    sleep 0.1
  done
  printf '%s' "${url%/}"
}
