#!/usr/bin/env bash
# Builds the dashboard into frontend/dist, offline: cargo for wasm32, wasm-bindgen at the exact
# Cargo.lock version, and wasm-opt from the npm package binaryen when available. Idempotent:
# installs what it lacks (the wasm32 target, wasm-bindgen-cli, binaryen) on a fresh machine.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)"
cd "$root"

if ! rustup target list --installed | grep -qx wasm32-unknown-unknown; then
  rustup target add wasm32-unknown-unknown
fi

want="$(awk '/^name = "wasm-bindgen"$/ {getline; gsub(/version = |"/, ""); print; exit}' Cargo.lock)"
tools="$root/.tools"
bindgen="$tools/bin/wasm-bindgen"
if [ ! -x "$bindgen" ] || [ "$("$bindgen" --version | awk '{print $2}')" != "$want" ]; then
  echo "==> installing wasm-bindgen-cli $want into $tools"
  cargo install wasm-bindgen-cli --version "$want" --root "$tools"
fi

# The default profile `wasm-release` is `release` tuned for download size (opt-level z, fat LTO,
# one codegen unit); it is defined here so that the workspace profiles stay as they are.
profile="${FRONTEND_PROFILE:-wasm-release}"
# Leptos' type-erased components: less monomorphised view code (about 8 % off the wasm).
export CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUSTFLAGS="${CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUSTFLAGS:---cfg erase_components}"
cargo build -p fleetlens-frontend --target wasm32-unknown-unknown --profile "$profile" \
  --config 'profile.wasm-release.inherits="release"' \
  --config 'profile.wasm-release.opt-level="z"' \
  --config 'profile.wasm-release.lto="fat"' \
  --config 'profile.wasm-release.codegen-units=1'
profile_dir="$profile"
[ "$profile" = "dev" ] && profile_dir="debug"
out="$here/dist"
rm -rf "$out.tmp" && mkdir -p "$out.tmp"
"$bindgen" --target web --no-typescript --out-dir "$out.tmp" --out-name fleetlens \
  "$root/target/wasm32-unknown-unknown/$profile_dir/fleetlens-frontend.wasm"

# wasm-opt from npm's binaryen (Debian's binaryen 108 produces broken output).
if [ "${FRONTEND_WASM_OPT:-1}" = "1" ] && command -v npm >/dev/null; then
  if [ ! -x "$tools/node_modules/.bin/wasm-opt" ]; then
    npm install --prefix "$tools" --no-audit --no-fund binaryen@132 >/dev/null
  fi
  "$tools/node_modules/.bin/wasm-opt" -Oz --enable-bulk-memory --enable-nontrapping-float-to-int \
    "$out.tmp/fleetlens_bg.wasm" -o "$out.tmp/fleetlens_bg.wasm"
fi

cp "$here/index.html" "$out.tmp/index.html"
if [ -d "$root/style" ]; then cp "$root"/style/*.css "$out.tmp/" 2>/dev/null || true; fi
rm -rf "$out" && mv "$out.tmp" "$out"
echo "==> dashboard built in $out ($(du -sh "$out" | cut -f1))"
