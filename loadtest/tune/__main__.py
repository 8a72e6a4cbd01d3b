from loadtest.tune.cli import main

raise SystemExit(main())
