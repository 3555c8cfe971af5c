"""`python -m gateway.cli` runs the `gateway` command."""

from gateway.cli import main

raise SystemExit(main())
