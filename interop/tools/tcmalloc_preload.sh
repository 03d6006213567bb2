#!/usr/bin/env bash
# Builds Google's TCMalloc (hugepage-aware) as an LD_PRELOAD-able shared library,
# libtcmalloc_google.so, from the TCMalloc and Abseil sources vendored in the
# libtcmalloc-sys crate (crates.io), and prints its path as the last line:
#
#   interop/tools/tcmalloc_preload.sh [OUT_DIR]
#   interop/tools/tcmalloc_preload.sh --cached   # the path if already built, else exit 3
#   LD_PRELOAD=$(interop/tools/tcmalloc_preload.sh | tail -1) CMD ARGS...
#
# Needs: cargo (to fetch and build the crate), g++.  Built under
# ${LIFETIME_CACHE_DIR:-~/.cache/lifetime-models}/tcmalloc/preload-VERSION-HASH (the
# crate version and a hash of these sources: a second run only prints the path), with
# a link libtcmalloc_google.so beside it; OUT_DIR, if given, gets a copy (and its path
# is printed).  Steps:
#   1. libtcmalloc.a from the crate (tcmalloc_crate.sh; compiled with -fPIC);
#   2. tcmalloc.cc compiled again without TCMALLOC_INTERNAL_METHODS_ONLY, so that it
#      defines malloc, free, calloc, realloc, memalign, posix_memalign, aligned_alloc,
#      valloc, pvalloc, malloc_usable_size, __libc_* and every operator new/delete;
#      tcmalloc_preload_background.cc, which starts TCMalloc's background thread, and
#      that thread's loop (background.cc) patched so that fork() waits for it to sleep;
#   3. one shared object: these, the rest of libtcmalloc.a, libstdc++ and libgcc linked
#      in statically (a C program then loads no C++ runtime), and a version script that
#      exports only the allocator's entry points and TCMalloc's extension API (Abseil's
#      and libstdc++'s symbols must not interpose a program's own).
#
# Hugepage-aware allocation (HugePageAwareAllocator, regions madvise(MADV_HUGEPAGE)d by
# the crate's patch) is the default and needs no knob.  Runtime knobs:
#   TCMALLOC_PRELOAD_BACKGROUND=0        no background thread (no cache reclaim/resize,
#                                        nothing released in the background)
#   TCMALLOC_PRELOAD_RELEASE_RATE=BYTES  constant background release rate per second
#                                        (TCMalloc's open-source default: 0)
#   GLIBC_TUNABLES=glibc.pthread.rseq=0  lets TCMalloc register rseq and use its per-CPU
#                                        caches (glibc >= 2.35 registers rseq first, and
#                                        TCMalloc then uses per-thread caches)
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
. "$here/tcmalloc_crate.sh"

# --cached: only look (`lifetime run --allocator tcmalloc` never builds: that takes minutes).
cached_only=
if [ "${1:-}" = --cached ]; then cached_only=1; shift; fi
out_dir=${1:-}
name=libtcmalloc_google.so
key=$(cat "$0" "$here/tcmalloc_crate.sh" "$here/tcmalloc_preload_background.cc" | sha256sum | cut -c1-12)
dir=$cache/preload-$CRATE_VERSION-$key
so=$dir/$name

finish() {
  ln -sfn "$(basename "$dir")/$name" "$cache/$name"
  if [ -n "$out_dir" ]; then
    mkdir -p "$out_dir"
    cp "$so" "$out_dir/$name"
    echo "$(cd "$out_dir" && pwd)/$name"
  else
    echo "$so"
  fi
}
if [ -e "$so" ]; then
  finish
  exit 0
fi
if [ -n "$cached_only" ]; then
  echo "$0: Google's TCMalloc is not built for these sources ($so)" >&2
  exit 3
fi

tcmalloc_require

# 1. TCMalloc from the crate.
tcmalloc_crate_build

# 2. The allocator's entry points and the background thread, as position-independent code.
tmp=$dir.tmp.$$
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp"
flags=("${tcmalloc_flags[@]}" -O3 -fPIC -fno-omit-frame-pointer -fstack-protector -I"$tc" -I"$absl")
nice g++ "${flags[@]}" -c -o "$tmp/tcmalloc.o" "$tc/tcmalloc/tcmalloc.cc"
nice g++ "${flags[@]}" -c -o "$tmp/preload_background.o" "$here/tcmalloc_preload_background.cc"
# The background loop, each round bracketed so that fork() can wait for it to sleep
# (tcmalloc_preload_background.cc says why).
sed -e '/^void MallocExtension_Internal_ProcessBackgroundActions() {$/i extern "C" void tcmalloc_preload_background_busy(), tcmalloc_preload_background_idle();' \
    -e '/^  while (tcmalloc::MallocExtension::GetBackgroundProcessActionsEnabled()) {$/a tcmalloc_preload_background_busy();' \
    -e 's/^    absl::SleepFor(sleep_time);$/    tcmalloc_preload_background_idle();\n&/' \
    "$tc/tcmalloc/background.cc" > "$tmp/background.cc"
if [ "$(grep -c 'tcmalloc_preload_background_\(busy\|idle\)()' "$tmp/background.cc")" != 3 ]; then
  echo "$0: error: tcmalloc/background.cc is not the one this script patches (crate $CRATE_VERSION)" >&2
  exit 1
fi
nice g++ "${flags[@]}" -c -o "$tmp/background.o" "$tmp/background.cc"

# 3. The shared object.  All of libtcmalloc.a but the crate's Rust bridges
# (malloc_bridge.o is a second tcmalloc.cc) and the unpatched background loop, as
# TCMalloc's own build links its library (alwayslink): members reached only through
# weak references (the background loop, the per-CPU cache's extension calls) would
# otherwise be left out.
cp "$lib" "$tmp/libtcmalloc.a"
ar d "$tmp/libtcmalloc.a" $(ar t "$tmp/libtcmalloc.a" | grep -E -- '-(malloc(_extension)?_bridge|background)\.o$')
cat > "$tmp/exports.map" <<'MAP'
{
  global:
    malloc; free; cfree; calloc; realloc; reallocarray; memalign; aligned_alloc;
    valloc; pvalloc; posix_memalign; malloc_usable_size; malloc_size; free_sized;
    free_aligned_sized; sdallocx; malloc_stats; malloc_trim; mallopt; mallinfo;
    mallinfo2; malloc_info; __libc_*; __posix_memalign;
    _Znwm*; _Znam*; _ZdlPv*; _ZdaPv*; __size_returning_new*;
    TCMalloc*; MallocExtension_*;
  local: *;
};
MAP
nice g++ -shared -o "$tmp/$name" "$tmp/tcmalloc.o" "$tmp/preload_background.o" "$tmp/background.o" \
  -Wl,--whole-archive "$tmp/libtcmalloc.a" -Wl,--no-whole-archive \
  -static-libstdc++ -static-libgcc -Wl,--version-script="$tmp/exports.map" \
  -Wl,-z,defs -Wl,--as-needed -lpthread
rm -rf "$dir"
mkdir -p "$dir"
mv "$tmp/$name" "$so"
finish
