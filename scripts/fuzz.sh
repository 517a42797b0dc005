#!/usr/bin/env bash
# Fuzz the two parsers that take untrusted text for a bounded time, on the stable toolchain:
# the ingest decoder (gzip + JSON + batch validation) and the alert-rule condition parser.
# See crates/server/examples/fuzz.rs for the method and the properties checked.
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET (default 60)] [SEED]
#   FUZZ_PROFILE=release scripts/fuzz.sh 300     # optimised build: more executions per second
#
# Prints one line per target (executions, executions/s, corpus, outcome classes, findings);
# exits 1 if any target found a panic or a broken property (inputs saved under
# target/fuzz-findings/).
set -euo pipefail
cd "$(dirname "$0")/.."
secs="${1:-60}"
seed="${2:-$(date +%s)}"
profile="${FUZZ_PROFILE:-dev}"
cargo build --quiet --profile "$profile" -p fleetlens-server --example fuzz
dir=$([ "$profile" = dev ] && echo debug || echo "$profile")
bin="target/$dir/examples/fuzz"
status=0
for target in ingest condition; do
  "$bin" "$target" "$secs" "$seed" target/fuzz-findings || status=1
done
echo "seed=$seed profile=$profile"
exit $status
