"""``python -m worker`` is the ``rem-cycle`` command."""

from worker.entry import main

raise SystemExit(main())
