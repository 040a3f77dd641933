"""``python -m dlbench`` is the ``dlbench`` command."""

import sys

from dlbench.cli.main import main

sys.exit(main())
