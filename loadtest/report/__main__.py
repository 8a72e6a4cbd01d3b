"""Re-render a recorded run: ``python -m loadtest.report reports/<run id>`` writes its report.md and plots."""

from __future__ import annotations

import sys
from pathlib import Path

from loadtest.report.markdown import write_report

if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: python -m loadtest.report reports/<run id>")
    print(write_report(Path(sys.argv[1])))
