#!/usr/bin/env bash
# Builds the server test programs from tests/support against the library at $BUILD (default
# build): $BUILD/tests-support/server_harness (the HTTP server over the fake backend) and
# $BUILD/tests-support/api_tool (the protocol conversion driver of the oracle tests).
# Rebuilds when stale; prints the harness path.
set -eu
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
dir="$BUILD/tests-support"
lib="$BUILD/libdeepinfer.a"
[ -f "$lib" ] || { echo "build_harness: $lib missing (run make first)" >&2; exit 1; }
mkdir -p "$dir"
build() { # output, sources...
    local out=$1; shift
    if [ -x "$out" ] && [ "$out" -nt "$lib" ] && [ -z "$(find tests/support -newer "$out" -name '*.[ch]')" ]; then
        return 0
    fi
    ${CC:-gcc} -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -O2 -g -pthread -Iinclude -Isrc -Itests/support \
        ${HARNESS_CFLAGS:-} -o "$out" "$@" "$lib" -ljansson -lutf8proc -lxxhash -lisal -lmicrohttpd -lucp -lucs -lcrypto -lm -lpthread
}
build "$dir/server_harness" tests/support/fake_backend.c tests/support/server_harness.c
build "$dir/api_tool" tests/support/api_tool.c
echo "$dir/server_harness"
