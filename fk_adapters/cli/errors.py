"""The exceptions a subcommand raises for ``fk``'s entry point (``cli.main``) to report."""
from __future__ import annotations

import signal


class UsageError(Exception):
    """Bad input the user can fix: printed as one line, exit status 2."""


class Stopped(BaseException):
    """fk was told to stop (SIGTERM, SIGHUP): unwinds like Ctrl-C, so every engine it started is killed on the way."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum
