"""`make bench`: the QTG engine measured side by side with its peers.

Run with ``python -m benchmarks`` (what `make bench` does). See benchmarks/README.md.
"""
