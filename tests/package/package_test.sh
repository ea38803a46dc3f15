#!/usr/bin/env bash
# Installs a kvtier build into an empty prefix and uses it from outside the
# tree, as an engine would:
#   1. find_package(kvtier CONFIG REQUIRED): kvtier::kvtier (shared),
#      kvtier::kvtier_static and kvtier::kvtier_c consumers build and run;
#   2. pkg-config: the same C++ and C consumers against kvtier.pc/kvtier_c.pc;
#   3. the installed Python package imports and `python3 -m kvtier` reaches the
#      installed command;
# and every consumer prints the keys the installed `kvtier key` prints.
# Usage: package_test.sh BUILD_DIR SOURCE_DIR   (run by ctest as `package`)
set -euo pipefail
build=$(cd "$1" && pwd)
src=$(cd "$2" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/kvtier-package-XXXXXX")
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix
fail() { echo "package_test: $*" >&2; exit 1; }

cmake --install "$build" --prefix "$prefix" >/dev/null
for f in include/kvtier/kvtier_c.h include/kvtier/tiered_cache.h bin/kvtier; do
  [ -e "$prefix/$f" ] || fail "not installed: $f"
done
libdir=$(dirname "$(find "$prefix" -name libkvtier_c.so -print -quit)")
[ -n "$libdir" ] || fail "libkvtier_c.so not installed"
for f in libkvtier.so libkvtier.a cmake/kvtier/kvtierConfig.cmake pkgconfig/kvtier.pc \
         pkgconfig/kvtier_c.pc; do
  [ -e "$libdir/$f" ] || fail "not installed: $libdir/$f"
done

# What every consumer must print.
want=$("$prefix/bin/kvtier" key --model pkg --layout tiny --tokens "$(seq -s, 0 31)" --json |
       "${KVTIER_PYTHON:-/usr/bin/python3}" -c 'import json,sys; print("\n".join(json.load(sys.stdin)["keys"]))')
[ "$(echo "$want" | wc -l)" = 2 ] || fail "kvtier key printed: $want"
check() {  # NAME OUTPUT
  [ "$2" = "$want" ] || fail "$1 printed '$2', want '$want'"
  echo "package_test: $1 ok"
}

# 1. find_package.
cmake -S "$src/tests/package/consumer" -B "$work/consumer" -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_C_COMPILER="${KVTIER_C_COMPILER:-cc}" -DCMAKE_CXX_COMPILER="${KVTIER_CXX_COMPILER:-c++}" \
  -DCMAKE_BUILD_TYPE=Debug >"$work/configure.log" 2>&1 || { cat "$work/configure.log"; fail "configure"; }
grep -q "kvtier_DIR=$prefix/" "$work/configure.log" || fail "find_package did not find $prefix"
cmake --build "$work/consumer" -j 2 >"$work/build.log" 2>&1 || { cat "$work/build.log"; fail "build"; }
for exe in consumer_shared consumer_static consumer_c; do
  check "find_package $exe" "$("$work/consumer/$exe")"
done
# The shared consumer really uses the installed libkvtier.so.
grep -q "$libdir/libkvtier.so" <<<"$(ldd "$work/consumer/consumer_shared")" || fail "consumer_shared: not linked to $libdir/libkvtier.so"

# 2. pkg-config.
export PKG_CONFIG_PATH="$libdir/pkgconfig"
cxx_flags=$(pkg-config --cflags --libs kvtier)
c_flags=$(pkg-config --cflags --libs kvtier_c)
# shellcheck disable=SC2086 # word splitting of the flags is intended
"${KVTIER_CXX_COMPILER:-c++}" -std=c++20 "$src/tests/package/consumer/consumer.cc" -o "$work/pc_cxx" \
  $cxx_flags -Wl,-rpath,"$libdir"
# shellcheck disable=SC2086
"${KVTIER_C_COMPILER:-cc}" -std=c11 -Wall -Wextra -Werror "$src/tests/package/consumer/consumer_c.c" \
  -o "$work/pc_c" $c_flags -Wl,-rpath,"$libdir"
check "pkg-config kvtier" "$("$work/pc_cxx")"
check "pkg-config kvtier_c" "$("$work/pc_c")"

# 3. Python from the prefix.
pydir=$(find "$prefix" -path '*/kvtier/__init__.py' -printf '%h\n' -quit)
[ -n "$pydir" ] || fail "Python package not installed"
# A sanitizer build's module needs its runtime preloaded (KVTIER_PY_PRELOAD).
py() { env ${KVTIER_PY_PRELOAD:+LD_PRELOAD="$KVTIER_PY_PRELOAD" ASAN_OPTIONS=detect_leaks=0} \
         PYTHONPATH="$(dirname "$pydir")" "${KVTIER_PYTHON:-/usr/bin/python3}" "$@"; }
got=$(py -c '
import kvtier
sig = kvtier.layout_signature("tiny")
print("\n".join(k.hex() for k in kvtier.block_keys("pkg", sig, 16, range(32))))')
check "python kvtier" "$got"
help=$(cd "$work" && PATH=/usr/bin:/bin KVTIER_CLI='' py -m kvtier --help)
grep -q "synth" <<<"$help" || fail "python3 -m kvtier --help did not reach the installed command"
echo "package_test: python3 -m kvtier ok"
echo "package_test: all ok"
