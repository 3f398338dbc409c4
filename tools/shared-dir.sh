#!/usr/bin/env bash
# Prints the directory of the project's shared data (specs, golden sets, recipe data), which lives
# outside the repository; the tests and benchmarks read it.  Looked for in this order:
#   1. $SHARED_DIR, when set;
#   2. ../shared beside this checkout (the layout of the project's machines and of CI);
#   3. ../shared beside the repository this checkout was cloned from, when that is a local path
#      (a clean clone made elsewhere to try CI, e.g. git clone -q . /tmp/ci-clone).
# Fails with the places it looked when none holds golden-v41/, so a test run stops with that
# cause instead of failing every test that reads the data.
set -u
cd "$(dirname "$0")/.."
tried=()
check() { # directory
    tried+=("$1")
    if [ -d "$1/golden-v41" ]; then (cd "$1" && pwd); exit 0; fi
}
if [ -n "${SHARED_DIR:-}" ]; then
    check "$SHARED_DIR"
    echo "shared-dir: SHARED_DIR=$SHARED_DIR has no golden-v41/ (is it the project's shared data?)" >&2
    exit 1
fi
check "$(cd .. && pwd)/shared"
origin=$(git config --get remote.origin.url 2>/dev/null || true)
origin=${origin#file://}
case "$origin" in /*) # a local path, perhaps ending in /. (git clone . DIR)
    origin=$(cd "$origin" 2>/dev/null && pwd) && check "$(dirname "$origin")/shared" ;;
esac
echo "shared-dir: the project's shared data (a folder holding golden-v41/) was not found; looked in:" >&2
for d in "${tried[@]}"; do echo "  $d" >&2; done
echo "set SHARED_DIR to it, e.g. make test SHARED_DIR=/path/to/shared" >&2
exit 1
