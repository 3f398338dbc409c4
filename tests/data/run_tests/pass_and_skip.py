"""pass_and_skip.py — input of tests/cli/test_run_tests.sh (not collected by the main run): one test
that passes, one that skips, as a test whose oracle package is missing would."""
import pytest


def test_passes():
    assert sum([1, 2]) == 3


def test_skips():
    pytest.skip("stand-in for a missing oracle")
