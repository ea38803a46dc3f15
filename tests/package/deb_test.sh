#!/usr/bin/env bash
# `cpack -G DEB` on a kvtier build makes a Debian package with the libraries,
# headers, CMake and pkg-config files, the command and the Python package
# under /usr, and shared-library dependencies filled in by dpkg-shlibdeps.
# (Installing it with dpkg -i changes the machine, so the test does not;
# docs/python.md shows that check.)
# Usage: deb_test.sh BUILD_DIR   (run by ctest as `package_deb`)
set -euo pipefail
build=$(cd "$1" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/kvtier-deb-XXXXXX")
trap 'rm -rf "$work"' EXIT
fail() { echo "deb_test: $*" >&2; exit 1; }

(cd "$work" && cpack -G DEB --config "$build/CPackConfig.cmake" -B "$work/out" >"$work/cpack.log" 2>&1) ||
  { cat "$work/cpack.log"; fail "cpack failed"; }
deb=$(find "$work/out" -maxdepth 1 -name 'kvtier_*.deb' -print -quit)
[ -n "$deb" ] || fail "no kvtier_*.deb in $(ls "$work/out")"
[ "$(dpkg-deb -f "$deb" Package)" = kvtier ] || fail "package name"
depends=$(dpkg-deb -f "$deb" Depends)
for dep in libc6 libstdc++6 libssl3 libsqlite3-0 libxxhash0 libhiredis python3-numpy; do
  grep -q "$dep" <<<"$depends" || fail "Depends lacks $dep: $depends"
done
listing=$(dpkg-deb -c "$deb")
contents=$(echo "$listing" | awk '{print $6}')
for f in ./usr/bin/kvtier ./usr/include/kvtier/kvtier_c.h ./usr/include/kvtier/tiered_cache.h \
         ./usr/lib/libkvtier.a ./usr/lib/cmake/kvtier/kvtierConfig.cmake \
         ./usr/lib/cmake/kvtier/kvtierTargets.cmake ./usr/lib/pkgconfig/kvtier.pc \
         ./usr/lib/python3/dist-packages/kvtier/__init__.py \
         ./usr/lib/python3/dist-packages/kvtier/integrations/sglang.py \
         ./usr/lib/python3/dist-packages/kvtier/integrations/vllm/__init__.py \
         ./usr/lib/python3/dist-packages/kvtier/integrations/vllm/_offload_route.py; do
  grep -qx "$f" <<<"$contents" || fail "$deb lacks $f"
done
for pattern in '^./usr/lib/libkvtier.so.0.1.0$' '^./usr/lib/libkvtier_c.so.0.1.0$' \
               '^./usr/lib/python3/dist-packages/kvtier/_kvtier\..*\.so$'; do
  grep -q "$pattern" <<<"$contents" || fail "$deb lacks $pattern"
done
# The symlinks a linker and the loader look for.
grep -q './usr/lib/libkvtier_c.so -> libkvtier_c.so.0' <<<"$listing" || fail "no libkvtier_c.so link"
echo "deb_test: $(basename "$deb") ok ($(du -h "$deb" | cut -f1)), Depends: $depends"
