"""pa_bench.present: see docs/DESIGN.md, 'Module map'."""
