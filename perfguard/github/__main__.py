"""``python -m perfguard.github``."""

import sys

from perfguard.github.cli import main

sys.exit(main())
