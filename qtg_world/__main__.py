"""``python -m qtg_runner.world``: the local outside world's serve process (the
fake Iris and the fake Bybit), as `qtg world up` starts it."""

from qtg_runner.world.local import serve_main

raise SystemExit(serve_main())
