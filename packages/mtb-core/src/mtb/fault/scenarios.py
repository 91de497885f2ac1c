"""The scenarios of ``mtb fault smoke``, by name, in the order they run."""

from mtb.fault import crashes, damage, launcher_kill, obstacles

SCENARIOS = {
    "nan": crashes.nan,
    "kill-during-save": crashes.kill_during_save,
    "config-mismatch": damage.config_mismatch,
    "rank-crash": crashes.rank_crash,
    "auto-recovery": crashes.auto_recovery,
    "launcher-kill": launcher_kill.launcher_kill,
    "corrupt": damage.corrupt,
    "retention": damage.retention,
    "stale-steps": obstacles.stale_steps,
    "two-writers": obstacles.two_writers,
    "disk-full": obstacles.disk_full,
}
