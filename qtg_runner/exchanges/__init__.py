"""Clients of the exchanges the executors move money through."""
