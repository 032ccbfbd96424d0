"""The local outside world: doubles of the services the executors talk to."""
