"""The HTTP API and the operator page (qtg api)."""
