"""`python -m llmrtc.cli`: the same as the `llmrtc` command."""

from llmrtc.cli import main

raise SystemExit(main())
