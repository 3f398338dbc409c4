#!/usr/bin/env bash
# Runs each benchmark given on the command line in turn: compiled ones directly, bench_*.py with
# python3 (PYTHONPATH=python, so they can load the binding).  Every benchmark prints its figures
# as ratios against a baseline it measures in the same run.
set -u
status=0
for b in "$@"; do
    echo "== $b"
    case "$b" in
        *.py) PYTHONPATH=python python3 "$b" || status=1 ;;
        *) "$b" || status=1 ;;
    esac
done
exit $status
