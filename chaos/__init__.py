"""`make chaos`: the engine under faults, and the invariants that must hold after each.

On a fresh embedded PostgreSQL of its own, five scenarios each run a mixed
workload of movements through real runner processes (`qtg run`, `qtg worker`)
while one kind of fault is injected, let the system settle, and check the
invariants (``chaos.checker``) on what is left in the database:

  kills       kill -9 of random runner processes every few seconds
  restarts    three server restarts: fast, immediate (a crash), and down for seconds
  backends    pg_terminate_backend of random runner connections
  poison      nodes whose config makes the executor raise, inside busy batches
  failover    a synchronous streaming standby promoted while runners work; runners
              reconnect through a multi-host DSN (target_session_attrs=read-write)

``python -m chaos`` (what `make chaos` runs) prints one table of figures and
ends with ``movements N, duplicates N, stuck N, lost N``; it exits 1 when an
invariant fails. docs/chaos.md has the latest table and what it shows.
"""
