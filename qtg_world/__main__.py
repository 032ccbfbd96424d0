"""``python -m qtg_world``: the local outside world's serve process (the
fake Iris and the fake Bybit), as `qtg world up` starts it."""

from qtg_world.local import serve_main

raise SystemExit(serve_main())
