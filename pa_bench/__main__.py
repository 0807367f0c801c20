"""``python -m pa_bench ...`` runs the ``pa-bench`` command line."""

from pa_bench.cli import main

if __name__ == "__main__":
    main()
