"""`python -m elsi_lib ...` is the `elsi` command (elsi_lib.cli)."""

import sys

from .cli import main

sys.exit(main())
