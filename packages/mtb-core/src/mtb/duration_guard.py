"""A pytest plugin that fails a test running longer than the suite allows without saying why.

The suite has a wall-clock budget on a 2-core CI machine (docs/testing.md); a
test that grows past ``duration_guard_s`` seconds (60 by default) fails unless
it carries ``@pytest.mark.slow(reason="...")`` naming why it needs the time,
so a slow test is a decision someone wrote down, never an accident. Each
package's pytest configuration loads it with ``-p mtb.duration_guard``.
"""

import pytest

DEFAULT_LIMIT_S = 60.0


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini(
        "duration_guard_s",
        "seconds a test may run without @pytest.mark.slow(reason=...) (0: no guard)",
        default=str(DEFAULT_LIMIT_S),
    )


def slow_reason(item: pytest.Item) -> str:
    """The reason of the test's ``slow`` mark, empty when it has none."""
    marker = item.get_closest_marker("slow")
    if marker is None:
        return ""
    return str(marker.kwargs.get("reason") or (marker.args[0] if marker.args else ""))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    report = yield
    limit = float(item.config.getini("duration_guard_s"))
    if call.when != "call" or not limit or report.duration <= limit or slow_reason(item):
        return report
    report.outcome = "failed"
    report.longrepr = (
        f"{item.nodeid} took {report.duration:.1f} s, over the {limit:g} s a test may take "
        'without @pytest.mark.slow(reason="why it needs the time"); make it faster '
        "(docs/testing.md) or mark it"
    )
    return report
