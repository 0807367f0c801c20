"""pa_bench.measure: see docs/DESIGN.md, 'Module map'."""
