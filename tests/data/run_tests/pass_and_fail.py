"""pass_and_fail.py — input of tests/cli/test_run_tests.sh: one test passes, one fails."""


def test_passes():
    assert sum([1, 2]) == 3


def test_fails():
    assert sum([1, 2]) == 4
