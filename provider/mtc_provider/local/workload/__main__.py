"""``python -m mtc_provider.local.workload``: the training process (see :mod:`.program`)."""

import sys

from mtc_provider.local.workload.program import main

sys.exit(main())
