"""The local outside world, apart from the runtime (qtg_runner), which never
imports it: the doubles of the services the executors talk to (fake Iris,
fake Bybit, the CCIP executing network, the Stargate relayer, the demo's
callback receiver; ``python -m qtg_world`` serves them), the local chains and
the contracts deployed on them (``chains/``), and the commands that run them
and the demo (``commands/``: `qtg demo`, `qtg world`, `qtg chains`, `qtg
drill`, joined with the runtime's by qtg_cli). The world imports the runtime's
codecs and clients; the demo and the tests import the world."""
