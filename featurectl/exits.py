"""featurectl's exit codes, and the one error type every command reports them through.

0 ok; 1 the request was answered but rejected or failed (for ``collect``: nothing was
collected); 2 usage or connection error.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_REJECTED = 1
# collect's 1: every gateway unreachable, no input, no gateway series in the range.
EXIT_NOTHING = 1
EXIT_USAGE = 2

EXIT_CODES = """\
exit codes:
  0  ok
  1  rejected: the request was answered but refused or failed (invalid level, a
     gateway that cannot serve it, a concurrent change, not authorized by ZooKeeper or,
     with --bootstrap-server, by the gateway: its error text is printed)
  2  usage error, or ZooKeeper / the --bootstrap-server gateway unreachable"""


class CliError(Exception):
    """A failure reported as one ``error: ...`` line on stderr with an exit code."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
