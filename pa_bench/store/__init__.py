"""pa_bench.store: see docs/DESIGN.md, 'Module map'."""
