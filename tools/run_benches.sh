#!/usr/bin/env bash
# Runs each benchmark binary given on the command line in turn and keeps their reports.
# Every benchmark prints its figures as ratios against a baseline it measures in the same run.
set -u
status=0
for b in "$@"; do
    echo "== $b"
    "$b" || status=1
done
exit $status
