# cli_test.sh — the shared start of the CLI tests (sourced from the repository root): the binary,
# quiet logs, the pass/fail counters and a scratch directory removed at exit that also holds the
# tiny model's cache (XDG_CACHE_HOME), so every test generates its own.  A test that needs more at
# exit sets its own trap after sourcing this.
BIN=build/deepinfer
export DEEPINFER_LOG_LEVEL=warn
passed=0
failed=0
ok() { passed=$((passed + 1)); }
bad() { failed=$((failed + 1)); echo "FAIL: $*"; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
export XDG_CACHE_HOME="$tmp/cache"
