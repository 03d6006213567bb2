# Sourced (not run) by the interop/tools/tcmalloc_*.sh scripts: Google's TCMalloc and
# the Abseil it needs, from the sources the libtcmalloc-sys crate (crates.io) vendors.
#
#   tcmalloc_require TOOL...   one-line error and exit 1 unless cargo, g++ and the
#                              extra "test -e PATH|command NAME|hint" entries exist
#   tcmalloc_crate_build       `cargo build` of a stub crate pinned to the crate: its
#                              build.rs patches the sources and compiles them into
#                              libtcmalloc.a (with TCMALLOC_INTERNAL_METHODS_ONLY, so that
#                              library leaves libc's malloc alone); sets lib (the archive),
#                              src, tc (TCMalloc's tree) and absl (Abseil's)
#
# Everything lands under ${LIFETIME_CACHE_DIR:-~/.cache/lifetime-models}/tcmalloc.

CRATE_VERSION=0.1.14
cache=${LIFETIME_CACHE_DIR:-$HOME/.cache/lifetime-models}/tcmalloc
cargo=${CARGO:-$(command -v cargo || echo "$HOME/.cargo/bin/cargo")}
jobs=${JOBS:-2}
# What the crate's build.rs defines too; a tcmalloc.cc compiled again must agree.
tcmalloc_flags=(-std=c++17 -Wno-attribute-alias -DNOMINMAX -DTCMALLOC_INTERNAL_8K_PAGES -DNDEBUG)

# tcmalloc_require ["command NAME|HINT" | "file PATH|HINT"]...
tcmalloc_require() {
  local missing=() want kind what hint
  [ -x "$cargo" ] || missing+=("cargo (rustup)")
  command -v g++ >/dev/null || missing+=("g++")
  for want in "$@"; do
    kind=${want%% *}; what=${want#* }; hint=${what#*|}; what=${what%%|*}
    case $kind in
      command) command -v "$what" >/dev/null || missing+=("$hint") ;;
      file) [ -e "$what" ] || missing+=("$hint") ;;
    esac
  done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "$0: error: missing: ${missing[*]}" >&2
    exit 1
  fi
}

tcmalloc_crate_build() {
  local crate=$cache/crate-$CRATE_VERSION
  mkdir -p "$crate/src"
  cat > "$crate/Cargo.toml" <<TOML
[package]
name = "tcmalloc-build"
version = "0.0.0"
edition = "2021"

[dependencies]
libtcmalloc-sys = { version = "=$CRATE_VERSION", features = ["extension"] }
TOML
  echo 'fn main() {}' > "$crate/src/main.rs"
  (cd "$crate" && nice "$cargo" build --release -j "$jobs" --quiet)
  lib=$(ls -t "$crate"/target/release/build/libtcmalloc-sys-*/out/libtcmalloc.a | head -1)
  src=$(dirname "$lib")/patched_deps/c_src
  tc=$src/tcmalloc
  absl=$src/abseil-cpp
}
