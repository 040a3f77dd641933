"""``python -m dlbench`` is the ``dlbench`` command."""

import sys

from dlbench.cli import main

sys.exit(main())
