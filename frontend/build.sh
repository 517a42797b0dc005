#!/usr/bin/env bash
# Builds the dashboard into frontend/dist, offline: cargo for wasm32, wasm-split (the pages are
# lazily loaded routes, each split off into its own wasm module), wasm-bindgen at the exact
# Cargo.lock version, and wasm-opt from the npm package binaryen when available. Idempotent:
# installs what it lacks (the wasm32 target, wasm-bindgen-cli, wasm-split, binaryen) on a fresh
# machine.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)"
cd "$root"

if ! rustup target list --installed | grep -qx wasm32-unknown-unknown; then
  rustup target add wasm32-unknown-unknown
fi
# The standard library is rebuilt for the dashboard (below), from the toolchain's own sources.
if ! rustup component list --installed | grep -q '^rust-src'; then
  rustup component add rust-src
fi

want="$(awk '/^name = "wasm-bindgen"$/ {getline; gsub(/version = |"/, ""); print; exit}' Cargo.lock)"
tools="$root/.tools"
bindgen="$tools/bin/wasm-bindgen"
if [ ! -x "$bindgen" ] || [ "$("$bindgen" --version | awk '{print $2}')" != "$want" ]; then
  echo "==> installing wasm-bindgen-cli $want into $tools"
  cargo install wasm-bindgen-cli --version "$want" --root "$tools"
fi

# wasm-split, the post-processing step of cargo-leptos' `--split`, as a pinned CLI: it cuts the
# wasm at the `#[lazy_route]` split points (frontend/src/app.rs) into a main module and one
# module per page (plus chunks of code that several pages share).
split_version="0.2.4"
splitter="$tools/bin/wasm-split-cli"
if [ ! -x "$splitter" ] || [ "$(cat "$tools/wasm-split-cli.version" 2>/dev/null)" != "$split_version" ]; then
  echo "==> installing wasm_split_cli_support $split_version (wasm-split-cli) into $tools"
  cargo install wasm_split_cli_support --version "$split_version" --features build-binary --locked --root "$tools"
  echo "$split_version" >"$tools/wasm-split-cli.version"
fi

# The default profile `wasm-release` is `release` tuned for download size (opt-level z, fat LTO,
# one codegen unit); it is defined here so that the workspace profiles stay as they are.
profile="${FRONTEND_PROFILE:-wasm-release}"
# Leptos' type-erased components: less monomorphised view code (about 8 % off the wasm).
# wasm-split needs the linker's relocations (`--emit-relocs`) to move code between modules.
# The standard library is rebuilt with `panic=immediate-abort` (a panic traps at once: no
# message formatting, no locations) and size-optimised algorithms: 11 % off the main module
# (docs/BENCHMARKS.md). Both are unstable flags of the pinned stable toolchain, enabled for this
# one build with RUSTC_BOOTSTRAP, as the Linux kernel and Firefox build their Rust; a browser
# that hits a panic shows it as a wasm `unreachable` trap in the console either way.
# `-Zfmt-debug=none` makes `{:?}` print nothing and `-Zlocation-detail=none` drops source
# locations (which an aborting panic never prints): 3 KB gzipped off the main module, so off
# every page. The dashboard shows no `Debug` output: its messages are `Display` and its own text
# (the one place a user could meet `Debug` text is serde's "invalid type: string …, expected …"
# for an answer the server should never send, which then names the type without the value).
export CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUSTFLAGS="${CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUSTFLAGS:---cfg erase_components} -C link-arg=--emit-relocs -Zunstable-options -Cpanic=immediate-abort -Zfmt-debug=none -Zlocation-detail=none"
RUSTC_BOOTSTRAP=1 cargo build -p fleetlens-frontend --target wasm32-unknown-unknown --profile "$profile" \
  -Zbuild-std=std,panic_abort -Zbuild-std-features=optimize_for_size \
  --config 'profile.wasm-release.inherits="release"' \
  --config 'profile.wasm-release.opt-level="z"' \
  --config 'profile.wasm-release.lto="fat"' \
  --config 'profile.wasm-release.codegen-units=1'
profile_dir="$profile"
[ "$profile" = "dev" ] && profile_dir="debug"
out="$here/dist"
rm -rf "$out.tmp" && mkdir -p "$out.tmp"
# Split first (wasm-bindgen would drop the relocations): the main module goes to wasm-bindgen, the
# page modules and their loader `__wasm_split.js` (which imports `initSync` from ./fleetlens.js)
# go to dist as they are.
split="$root/target/frontend-split"
rm -rf "$split" && mkdir -p "$split"
"$splitter" --target web --out-name fleetlens \
  "$root/target/wasm32-unknown-unknown/$profile_dir/fleetlens-frontend.wasm" "$split"
mv "$split/fleetlens.wasm" "$split/main.wasm"
cp "$split"/*.wasm "$split/__wasm_split.js" "$out.tmp/"
rm "$out.tmp/main.wasm"
# --keep-lld-exports: the page modules import the main module's functions through those exports.
"$bindgen" --target web --no-typescript --keep-lld-exports --out-dir "$out.tmp" --out-name fleetlens \
  "$split/main.wasm"

# wasm-opt from npm's binaryen (Debian's binaryen 108 produces broken output).
if [ "${FRONTEND_WASM_OPT:-1}" = "1" ] && command -v npm >/dev/null; then
  if [ ! -x "$tools/node_modules/.bin/wasm-opt" ]; then
    npm install --prefix "$tools" --no-audit --no-fund binaryen@132 >/dev/null
  fi
  for w in "$out.tmp"/*.wasm; do
    "$tools/node_modules/.bin/wasm-opt" -Oz --strip-producers --strip-target-features \
      --enable-bulk-memory --enable-nontrapping-float-to-int "$w" -o "$w"
  done
fi

cp "$here/index.html" "$here/boot.js" "$out.tmp/"
if [ -d "$root/style" ]; then cp "$root"/style/*.css "$out.tmp/" 2>/dev/null || true; fi

# Precompressed copies (`.gz`), served as they are (the server's ServeDir picks `x.gz` for a
# client that accepts gzip): compressed once with zopfli, 4-5 % smaller than `gzip -9` and
# 6-8 % smaller than what compressing on the fly would send. Without zopfli (and no apt to
# install it), `gzip -9`.
if ! command -v zopfli >/dev/null && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends zopfli >/dev/null 2>&1 \
    || { apt-get update >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends zopfli >/dev/null; } \
    || true
fi
if command -v zopfli >/dev/null; then
  compress='zopfli --gzip -c "$1" >"$1.gz"'
else
  compress='gzip -9 -n -c "$1" >"$1.gz"'
fi
find "$out.tmp" -type f \( -name '*.wasm' -o -name '*.js' -o -name '*.css' -o -name '*.html' \) -print0 \
  | xargs -0 -P "$(nproc)" -I{} sh -c "$compress" sh {}
rm -rf "$out" && mv "$out.tmp" "$out"
echo "==> dashboard built in $out ($(du -sh "$out" | cut -f1))"
