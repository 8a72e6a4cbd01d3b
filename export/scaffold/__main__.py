"""``python -m export.scaffold KIND NAME ...``: see export/scaffold/cli.py."""

import sys

from export.scaffold.cli import main

sys.exit(main())
