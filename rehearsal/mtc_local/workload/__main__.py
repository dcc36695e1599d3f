"""``python -m mtc_local.workload``: the training process (see :mod:`.program`)."""

import sys

from mtc_local.workload.program import main

sys.exit(main())
