"""``python -m tests.fuzz --sessions N [--seed S]``: see :mod:`tests.fuzz.run`."""

import sys

from tests.fuzz.run import main

sys.exit(main())
