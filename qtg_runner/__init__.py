"""QTG engine: the thin Python side of a Postgres-native orchestration engine."""

__version__ = "0.1.0"
