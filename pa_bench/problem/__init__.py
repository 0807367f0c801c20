"""pa_bench.problem: see docs/DESIGN.md, 'Module map'."""
