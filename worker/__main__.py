"""``python -m worker`` is the ``rem-cycle`` command."""

from worker.cli import main

raise SystemExit(main())
