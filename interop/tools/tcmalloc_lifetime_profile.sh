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
#   1. `cargo build` of a stub crate pinned to libtcmalloc-sys (tcmalloc_crate.sh,
#      shared with tcmalloc_preload.sh): its build.rs patches the sources and compiles
#      TCMalloc (+ the Abseil it needs) into libtcmalloc.a;
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

out=${1:?usage: $0 OUT.pb.gz}
here=$(cd "$(dirname "$0")" && pwd)
. "$here/tcmalloc_crate.sh"
tcmalloc_require "command protoc|protoc (Debian: protobuf-compiler)" \
  "file /usr/include/google/protobuf/message.h|protobuf headers (Debian: libprotobuf-dev)"

# 1. TCMalloc from the crate.
tcmalloc_crate_build

# 2. pprof's schema as TCMalloc ships it.
gen=$cache/gen
mkdir -p "$gen"
protoc -I"$tc" --cpp_out="$gen" "$tc/tcmalloc/internal/profile.proto"

# 3. The driver, TCMalloc's profile builder and marshaler.
bin=$cache/tcmalloc_lifetime_driver
flags=("${tcmalloc_flags[@]}" -O1 -g -fno-omit-frame-pointer -I"$gen" -I"$tc" -I"$absl")
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
