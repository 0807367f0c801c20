"""pa_bench.numerics: see docs/DESIGN.md, 'Module map'."""
