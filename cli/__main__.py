"""`python -m cli`: the same as the `rrt` command."""

from cli.main import main

raise SystemExit(main())
