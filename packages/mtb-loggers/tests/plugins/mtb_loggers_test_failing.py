"""A metric logger that starts, then raises on its second write: the run must go on."""

from mtb.api import hookimpl


class FailingSession:
    def __init__(self):
        self.writes = 0

    def log_metrics(self, step, metrics):
        self.writes += 1
        if self.writes == 2:
            raise OSError("No space left on device")

    def finish(self, summary, tags):
        raise AssertionError("a dropped session is never finished")


class FailingLogger:
    name = "loggers-test-failing"
    description = "test only: fails on its second write"

    def open(self, run):
        return FailingSession()


@hookimpl
def mtb_register_metric_loggers(register):
    register(FailingLogger())
