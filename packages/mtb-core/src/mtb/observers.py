"""The observer hooks of a run, each plugin's implementation called on its own.

``mtb_trial_start``, ``mtb_step_end`` and ``mtb_checkpoint_saved`` run inside
training. An implementation that raises is recorded with its plugin, hook,
rank and error, and that plugin's observer hooks are skipped on this rank for
the rest of the run: the measured steps are never lost to an observer. Rank 0
puts every rank's failures in the result (``plugin_failures``), prints one
line per plugin and hook, and the run exits 1 with the result kept, as for
``mtb_run_end``. Implementations are called plainly, one at a time: a
``wrapper``/``hookwrapper`` implementation is recorded as failed, never silently
left uncalled.
"""

from typing import Any

import attrs

from mtb.errors import Interrupted, one_line
from mtb.launch import LaunchTimeout
from mtb.registry import call_with


@attrs.define
class Observers:
    """This rank's calls of the observer hooks and what failed in them."""

    pm: Any
    rank: int = 0
    failures: list[dict] = attrs.Factory(list)

    def call(self, hook: str, **arguments) -> None:
        """Each implementation of ``hook`` in pluggy's order; one that raises is recorded."""
        skipped = {failure["plugin"] for failure in self.failures}
        for impl in reversed(getattr(self.pm.hook, hook).get_hookimpls()):
            if impl.plugin_name in skipped:
                continue
            try:
                if impl.hookwrapper or impl.wrapper:
                    raise TypeError("an observer hook cannot be a wrapper: implement it plainly")
                call_with(impl, **arguments)
            except (Interrupted, LaunchTimeout):  # a signal or the deadline, not the plugin
                raise
            except Exception as error:
                self.failures.append(
                    {
                        "plugin": impl.plugin_name,
                        "hook": hook,
                        "rank": self.rank,
                        "error": one_line(error),
                    }
                )


def merged(per_rank: list[list[dict]]) -> list[dict]:
    """Every rank's failures, one entry per plugin, hook and error with the ranks it hit."""
    found: dict[tuple, dict] = {}
    for failures in per_rank:
        for failure in failures:
            key = (failure["plugin"], failure["hook"], failure["error"])
            entry = found.setdefault(key, {**failure, "ranks": []})
            entry.pop("rank", None)
            entry["ranks"].append(failure["rank"])
    return list(found.values())


def lines(failures: list[dict]) -> list[str]:
    """One line per failure for the user, naming plugin, hook, ranks and error."""
    return [
        f"{failure['hook']} of plugin {failure['plugin']} failed on rank(s) "
        f"{', '.join(map(str, failure['ranks']))}: {failure['error']}; its observer hooks "
        "were skipped for the rest of the run"
        for failure in failures
    ]
