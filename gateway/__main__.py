"""`python -m gateway` runs the `gateway` command (as `python -m gateway.cli` does)."""

from gateway.cli import main

raise SystemExit(main())
