#!/usr/bin/env bash
# Records a real TCMalloc lifetime profile (pprof profile.proto, gzipped) with
# TCMalloc's own deallocation profiler and profile builder, from the TCMalloc and
# Abseil sources vendored in the libtcmalloc-sys crate (crates.io).
#
#   interop/tools/tcmalloc_lifetime_profile.sh OUT.pb.gz
#
# Needs: cargo (to fetch and build the crate), g++, protoc and libprotobuf-dev
# (Debian: protobuf-compiler libprotobuf-dev), zlib.  Everything is built under
# ${LIFETIME_CACHE_DIR:-~/.cache/lifetime-models}/tcmalloc; no third-party code
# lands in the repository.  Steps:
#   1. `cargo build` of a stub crate pinned to libtcmalloc-sys: its build.rs
#      patches the sources and compiles TCMalloc (+ the Abseil it needs) into
#      libtcmalloc.a, which overrides malloc/free/new/delete;
#   2. protoc on TCMalloc's tcmalloc/internal/profile.proto (pprof's schema);
#   3. the driver (tcmalloc_lifetime_driver.cc) with TCMalloc's profile builder
#      and marshaler (not in the crate's library: they need protobuf), and
#      tcmalloc.cc compiled again *without* TCMALLOC_INTERNAL_METHODS_ONLY (the crate
#      sets it: Rust calls TCMallocInternal* directly, so its library leaves libc's
#      malloc alone), so that malloc/free/new/delete are TCMalloc's; the rest comes
#      from libtcmalloc.a as needed (its own copy of tcmalloc.cc, malloc_bridge.o, is
#      then never pulled in);
#   4. run it: it profiles its own allocations and writes OUT.
set -euo pipefail

CRATE_VERSION=0.1.14
out=${1:?usage: $0 OUT.pb.gz}
here=$(cd "$(dirname "$0")" && pwd)
cache=${LIFETIME_CACHE_DIR:-$HOME/.cache/lifetime-models}/tcmalloc
cargo=${CARGO:-$(command -v cargo || echo "$HOME/.cargo/bin/cargo")}
jobs=${JOBS:-2}

missing=()
[ -x "$cargo" ] || missing+=("cargo (rustup)")
command -v g++ >/dev/null || missing+=("g++")
command -v protoc >/dev/null || missing+=("protoc (Debian: protobuf-compiler)")
[ -e /usr/include/google/protobuf/message.h ] || missing+=("protobuf headers (Debian: libprotobuf-dev)")
if [ ${#missing[@]} -gt 0 ]; then
  echo "$0: error: missing: ${missing[*]}" >&2
  exit 1
fi

# 1. TCMalloc from the crate.
crate=$cache/crate-$CRATE_VERSION
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

# 2. pprof's schema as TCMalloc ships it.
gen=$cache/gen
mkdir -p "$gen"
protoc -I"$tc" --cpp_out="$gen" "$tc/tcmalloc/internal/profile.proto"

# 3. The driver, TCMalloc's profile builder and marshaler.
bin=$cache/tcmalloc_lifetime_driver
flags=(-std=c++17 -O1 -g -fno-omit-frame-pointer -Wno-attribute-alias -DNOMINMAX -DTCMALLOC_INTERNAL_8K_PAGES
       -DNDEBUG -I"$gen" -I"$tc" -I"$absl")
obj=$cache/obj
mkdir -p "$obj"
if [ ! -e "$obj/tcmalloc.o" ] || [ "$lib" -nt "$obj/tcmalloc.o" ]; then
  nice g++ "${flags[@]}" -O2 -c -o "$obj/tcmalloc.o" "$tc/tcmalloc/tcmalloc.cc"
fi
nice g++ "${flags[@]}" -o "$bin" \
  "$here/tcmalloc_lifetime_driver.cc" \
  "$tc/tcmalloc/internal/profile_builder.cc" \
  "$tc/tcmalloc/profile_marshaler.cc" \
  "$gen/tcmalloc/internal/profile.pb.cc" \
  "$obj/tcmalloc.o" "$lib" -lprotobuf -lz -lpthread

# 4. Record.
"$bin" "$out"
