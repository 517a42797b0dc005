#!/usr/bin/env bash
# Builds the dashboard into frontend/dist on the stable toolchain alone: cargo for wasm32,
# wasm-bindgen at the exact Cargo.lock version, and wasm-opt from the npm package binaryen.
# Idempotent: installs what it lacks (the wasm32 target, wasm-bindgen-cli, binaryen) on a fresh
# machine, into .tools/ of the checkout.
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
  cargo install --quiet wasm-bindgen-cli --version "$want" --root "$tools"
fi

# The default profile `wasm-release` is `release` tuned for download size (opt-level z, fat LTO,
# one codegen unit); it is defined here so that the workspace profiles stay as they are.
# FRONTEND_PROFILE=dev builds unoptimised (quick, large) for debugging.
profile="${FRONTEND_PROFILE:-wasm-release}"
# FRONTEND_OPT_LEVEL picks rustc's and wasm-opt's optimisation level: z (smallest, the default),
# s, or 1-3 (faster code, a larger download).
opt_level="${FRONTEND_OPT_LEVEL:-z}"
case "$opt_level" in
  [0-3]) opt_toml="$opt_level" ;;
  s | z) opt_toml="\"$opt_level\"" ;;
  *) echo "FRONTEND_OPT_LEVEL must be z, s or 0-3, not '$opt_level'" >&2; exit 2 ;;
esac
# `erase_components` is a plain cfg of Leptos (stable): type-erased component views, which
# compile faster and give a smaller wasm.
export CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUSTFLAGS="${CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUSTFLAGS:---cfg erase_components}"
cargo build --quiet -p fleetlens-frontend --target wasm32-unknown-unknown --profile "$profile" \
  --config 'profile.wasm-release.inherits="release"' \
  --config "profile.wasm-release.opt-level=$opt_toml" \
  --config 'profile.wasm-release.lto="fat"' \
  --config 'profile.wasm-release.codegen-units=1'
profile_dir="$profile"
[ "$profile" = "dev" ] && profile_dir="debug"
out="$here/dist"
rm -rf "$out.tmp" && mkdir -p "$out.tmp"
"$bindgen" --target web --no-typescript --out-dir "$out.tmp" --out-name fleetlens \
  "${CARGO_TARGET_DIR:-$root/target}/wasm32-unknown-unknown/$profile_dir/fleetlens-frontend.wasm"

# wasm-opt from npm's binaryen (Debian's binaryen 108 produces broken output). The features are
# those rustc enables by default for wasm32 (bulk memory, non-trapping float-to-int, sign-ext,
# multivalue, reference types).
if [ "${FRONTEND_WASM_OPT:-1}" = "1" ]; then
  binaryen_version="132.0.0"
  if [ "$("$tools/node_modules/.bin/wasm-opt" --version 2>/dev/null | awk '{print $3}')" != "${binaryen_version%%.*}" ]; then
    echo "==> installing binaryen $binaryen_version (npm) into $tools"
    npm install --silent --prefix "$tools" --no-audit --no-fund --no-save "binaryen@$binaryen_version" >/dev/null
  fi
  "$tools/node_modules/.bin/wasm-opt" "-O$opt_level" --strip-debug --strip-producers --strip-target-features \
    --enable-bulk-memory --enable-nontrapping-float-to-int --enable-sign-ext --enable-multivalue \
    --enable-reference-types "$out.tmp/fleetlens_bg.wasm" -o "$out.tmp/fleetlens_bg.wasm"
fi

cp "$here/index.html" "$here/boot.js" "$out.tmp/"
if [ -d "$root/style" ]; then cp "$root"/style/*.css "$out.tmp/" 2>/dev/null || true; fi

# Precompressed copies (`.gz`), served as they are (the server's ServeDir picks `x.gz` for a
# client that accepts gzip): zopfli where installed (4-5 % smaller than `gzip -9`), else gzip -9.
if command -v zopfli >/dev/null; then
  compress='zopfli --gzip -c "$1" >"$1.gz"'
else
  compress='gzip -9 -n -c "$1" >"$1.gz"'
fi
find "$out.tmp" -type f \( -name '*.wasm' -o -name '*.js' -o -name '*.css' -o -name '*.html' \) -print0 \
  | xargs -0 -P "$(nproc)" -I{} sh -c "$compress" sh {}
rm -rf "$out" && mv "$out.tmp" "$out"
echo "==> dashboard built in $out ($(du -sh "$out" | cut -f1))"
