"""The command line's exit codes: one set, for every command.

None of them comes with a traceback. A run stopped by a signal or a closed
stdout exits as a shell reports such a process (128 + the signal's number).
"""

from __future__ import annotations

import signal

EXIT_OK = 0
EXIT_FAILURE = 1
"""The service or the run failed (one line; the resume command if a state was saved)."""
EXIT_USAGE = 2
"""A user's mistake: one line naming the setting, what it must be and what it got; also a key
the service rejects (`CredentialsRejected`) and an address that is not the service's
(`WrongEndpoint`), before anything was trained."""
EXIT_INTERRUPTED = 128 + signal.SIGINT  # 130
EXIT_TERMINATED = 128 + signal.SIGTERM  # 143
EXIT_STDOUT_CLOSED = 128 + signal.SIGPIPE  # 141
EXIT_SIGNAL = {signal.SIGINT: EXIT_INTERRUPTED, signal.SIGTERM: EXIT_TERMINATED}
"""The exit code of a run stopped by each signal it handles."""
