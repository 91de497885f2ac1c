"""Every package is released at one version, and plugins are bounded to the plugin API."""

import re
import tomllib

from conftest import ROOT

import mtb

CORE = ROOT / "packages" / "mtb-core" / "pyproject.toml"
PLUGINS = sorted((ROOT / "packages").glob("*/pyproject.toml")) + sorted(
    (ROOT / "examples").glob("*/pyproject.toml")
)


def project(path):
    return tomllib.loads(path.read_text())["project"]


def core_version() -> str:
    return project(CORE)["version"]


def test_the_plugin_api_version_is_core_major_minor():
    major, minor, _ = core_version().split(".")
    assert f"{major}.{minor}" == mtb.PLUGIN_API_VERSION


def test_every_package_has_core_version_and_depends_on_the_plugin_api_only():
    major, minor = map(int, mtb.PLUGIN_API_VERSION.split("."))
    bound = f"mtb-core>={major}.{minor},<{major}.{minor + 1}"
    plugins = [p for p in PLUGINS if p != CORE]
    assert len(plugins) >= 5
    for path in plugins:
        meta = project(path)
        assert meta["version"] == core_version(), path
        core_deps = [d for d in meta["dependencies"] if re.match(r"mtb-core\b", d)]
        assert core_deps == [bound], path


def test_the_changelog_has_an_entry_for_the_current_version():
    changelog = (ROOT / "CHANGELOG.md").read_text()
    assert re.search(rf"^## \[{re.escape(core_version())}\] - \d{{4}}-\d\d-\d\d$", changelog, re.M)


#: the torch releases mtb is checked against: 2.11 (the GPU image's) up to the pinned 2.13
TORCH_RANGE = "torch>=2.11,<2.14"


def test_every_package_that_imports_torch_states_the_supported_torch_range():
    for path in PLUGINS:
        if path.parent.parent.name != "packages" or path.parent.name == "mtb-report":
            continue  # the example plugin has torch through core; mtb-report never imports it
        assert TORCH_RANGE in project(path)["dependencies"], path
    pinned = re.search(r"^torch==(\S+)", (ROOT / "constraints.txt").read_text(), re.M)[1]
    assert pinned.startswith("2.13.")
