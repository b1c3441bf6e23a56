"""`python -m benchmarks`: see benchmarks/run.py."""

from benchmarks.run import main

raise SystemExit(main())
