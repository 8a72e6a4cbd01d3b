"""Run by test_launcher.py as a separate pytest process that gets interrupted while its server runs.

Not collected by the main suite (the file name does not start with test_).
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import psutil

# Ctrl-C in a terminal interrupts pytest. A suite started in the background by a non-interactive shell
# (`make test &`) inherits SIGINT ignored, and Python then installs no KeyboardInterrupt handler: restore
# it, so that SIGINT here means what it means to a user.
signal.signal(signal.SIGINT, signal.default_int_handler)


def test_waits_to_be_interrupted(triton_server) -> None:  # noqa: ANN001 - fixture from tritonlocal.pytest_plugin
    tree = [triton_server.pid, *(p.pid for p in psutil.Process(triton_server.pid).children(recursive=True))]
    Path(os.environ["PROBE_PID_FILE"]).write_text(" ".join(map(str, tree)) + "\n")
    time.sleep(120)
