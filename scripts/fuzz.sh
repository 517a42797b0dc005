#!/usr/bin/env bash
# Fuzz the parsers that take untrusted input for a bounded time, on the stable toolchain: the
# ingest decoder (gzip + JSON + batch validation; zstd + protobuf + the same) and the alert-rule
# condition parser.
# See crates/server/examples/fuzz.rs for the method and the properties checked.
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET (default 60)] [SEED]
#   FUZZ_PROFILE=release scripts/fuzz.sh 300     # optimised build: more executions per second
#
# Prints one line per target (executions, executions/s, corpus, outcome classes, findings), then
# runs the coverage-guided libFuzzer targets of fuzz/ as long if cargo-fuzz is installed; exits 1
# if any target found a panic or a broken property (inputs saved under target/fuzz-findings/ and
# fuzz/artifacts/).
set -euo pipefail
cd "$(dirname "$0")/.."
secs="${1:-60}"
seed="${2:-$(date +%s)}"
profile="${FUZZ_PROFILE:-dev}"
cargo build --quiet --profile "$profile" -p fleetlens-server --example fuzz
dir=$([ "$profile" = dev ] && echo debug || echo "$profile")
bin="target/$dir/examples/fuzz"
status=0
for target in ingest ingest-protobuf condition; do
  "$bin" "$target" "$secs" "$seed" target/fuzz-findings || status=1
done
echo "seed=$seed profile=$profile"

# Coverage-guided libFuzzer targets (fuzz/): cargo-fuzz passes nightly-only flags, and the project
# builds on the stable toolchain alone, so they run only where a developer has installed a nightly
# toolchain and cargo-fuzz themselves (`rustup toolchain install nightly`, `cargo install
# cargo-fuzz`); CI and the builds never need them. FUZZ_LIBFUZZER=0 skips them.
if [ "${FUZZ_LIBFUZZER:-1}" = 1 ] && cargo +nightly fuzz --version >/dev/null 2>&1; then
  for target in ingest_batch condition; do
    log=$(mktemp)
    if (cd fuzz && cargo +nightly fuzz run "$target" -- -max_total_time="$secs" -seed="$seed" >"$log" 2>&1); then
      echo "libfuzzer target=$target $(grep -E '^#[0-9]+[[:space:]]+DONE' "$log" | sed -E 's/^#([0-9]+)[[:space:]]+DONE[[:space:]]+/execs=\1 /') findings=0"
    else
      status=1
      echo "libfuzzer target=$target FINDING (fuzz/artifacts/$target/):"
      grep -E 'panicked|SUMMARY|Test unit written' "$log" | head -5
    fi
    rm -f "$log"
  done
else
  echo "cargo-fuzz not installed: libFuzzer targets in fuzz/ skipped (cargo install cargo-fuzz)"
fi
exit $status
