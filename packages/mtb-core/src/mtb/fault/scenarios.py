"""The scenarios of ``mtb fault smoke``, by name, in the order they run."""

from mtb.fault import crashes, damage, launcher_kill

SCENARIOS = {
    "nan": crashes.nan,
    "kill-during-save": crashes.kill_during_save,
    "config-mismatch": damage.config_mismatch,
    "rank-crash": crashes.rank_crash,
    "auto-recovery": crashes.auto_recovery,
    "launcher-kill": launcher_kill.launcher_kill,
    "corrupt": damage.corrupt,
    "retention": damage.retention,
}
