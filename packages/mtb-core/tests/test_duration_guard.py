"""The duration guard: a test over the limit fails unless a slow mark says why."""

import pytest

pytest_plugins = ["pytester"]

INNER = """
import time
import pytest

def test_quick():
    pass

def test_long_unmarked():
    time.sleep(0.3)

@pytest.mark.slow
def test_long_marked_without_reason():
    time.sleep(0.3)

@pytest.mark.slow(reason="trains twice to compare")
def test_long_marked_with_reason():
    time.sleep(0.3)
"""


@pytest.fixture
def outcome(pytester):
    pytester.makeini("[pytest]\nduration_guard_s = 0.2\nmarkers =\n    slow: slow\n")
    pytester.makepyfile(test_inner=INNER)
    return pytester.runpytest_inprocess("-p", "mtb.duration_guard", "-rA")


def test_only_the_tests_over_the_limit_without_a_reason_fail(outcome):
    outcome.assert_outcomes(passed=2, failed=2)
    text = outcome.stdout.str()
    for name in ("test_long_unmarked", "test_long_marked_without_reason"):
        assert f"FAILED test_inner.py::{name}" in text
    assert "PASSED test_inner.py::test_long_marked_with_reason" in text
    assert "over the 0.2 s a test may take" in text  # the limit as configured
    assert 'without @pytest.mark.slow(reason="why it needs the time")' in text


def test_a_limit_of_zero_turns_the_guard_off(pytester):
    pytester.makeini("[pytest]\nduration_guard_s = 0\n")
    pytester.makepyfile(test_inner="import time\ndef test_long():\n    time.sleep(0.3)\n")
    pytester.runpytest_inprocess("-p", "mtb.duration_guard").assert_outcomes(passed=1)
