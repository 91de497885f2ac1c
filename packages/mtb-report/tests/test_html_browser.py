"""The HTML report in real headless chromium: no console errors, plots drawn with a size."""

import json
import re
import shutil
import subprocess

import pytest
from report_fixtures import RUNS

CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--virtual-time-budget=10000",
    "--dump-dom",
)
# Runs first in <head>: records console errors and uncaught errors, then, once the
# page has loaded, each plot's rendered size, into the body's data-check attribute.
PROBE = """<script>
var errors = [];
var original = console.error;
console.error = function () {
  errors.push([].join.call(arguments, " "));
  original.apply(console, arguments);
};
window.addEventListener("error", function (e) { errors.push(String(e.message || e.type)); }, true);
window.addEventListener("load", function () {
  var sizes = [].map.call(document.querySelectorAll("img.plot"), function (img) {
    var box = img.getBoundingClientRect();
    var drawn = img.complete && img.naturalWidth > 0;
    return drawn ? Math.round(box.width) + "x" + Math.round(box.height) : "0x0";
  });
  document.body.setAttribute("data-check", JSON.stringify({errors: errors, plots: sizes}));
});
</script>"""


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        pytest.skip("chromium is not installed (nox installs Debian's chromium package)")
    return found


def test_html_report_loads_cleanly_with_sized_plots(invoke, tmp_path):
    report = tmp_path / "report.html"
    assert invoke("report", RUNS, "-o", report).exit_code == 0
    page = tmp_path / "probe.html"
    page.write_text(report.read_text().replace("<head>", "<head>" + PROBE, 1))
    done = subprocess.run(
        [chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}", page.as_uri()],
        capture_output=True,
        text=True,
        timeout=90,
    )
    match = re.search(r"data-check=\"([^\"]*)\"", done.stdout)
    assert match, f"page did not finish loading: {done.stderr[-2000:]}"
    check = json.loads(match.group(1).replace("&quot;", '"'))
    assert check["errors"] == []
    assert len(check["plots"]) == 3, check
    for size in check["plots"]:
        width, height = map(int, size.split("x"))
        assert width > 0 and height > 0, check
