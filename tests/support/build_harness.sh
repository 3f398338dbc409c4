#!/usr/bin/env bash
# Builds the server test harness (tests/support/*.c, the fake backend) against the library
# at $BUILD (default build): $BUILD/tests-support/server_harness.  Rebuilds when stale.
set -eu
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
out="$BUILD/tests-support/server_harness"
lib="$BUILD/libdeepinfer.a"
[ -f "$lib" ] || { echo "build_harness: $lib missing (run make first)" >&2; exit 1; }
if [ -x "$out" ] && [ "$out" -nt "$lib" ] && [ -z "$(find tests/support -newer "$out" -name '*.[ch]')" ]; then
    echo "$out"; exit 0
fi
mkdir -p "$(dirname "$out")"
${CC:-gcc} -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -O2 -g -pthread -Iinclude -Isrc -Itests/support \
    ${HARNESS_CFLAGS:-} -o "$out" tests/support/fake_backend.c tests/support/server_harness.c "$lib" \
    -ljansson -lpcre2-8 -lutf8proc -lxxhash -lmicrohttpd -lm -lpthread
echo "$out"
