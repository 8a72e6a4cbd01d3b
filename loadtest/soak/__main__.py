from loadtest.soak.cli import main

raise SystemExit(main())
