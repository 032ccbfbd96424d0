"""Database lifecycle: where the database is (embedded or QTG_DATABASE_URL) and its schema.

`qtg_runner.db.embedded.database_url()` finds or starts the database;
`qtg_runner.db.migrate.migrate()` brings it up to date. The package re-exports only
names that do not shadow its modules.
"""

from qtg_runner.db.embedded import EmbeddedServerError, database_url
from qtg_runner.db.migrate import MigrateResult, MigrationError

__all__ = ["EmbeddedServerError", "MigrateResult", "MigrationError", "database_url"]
