from loadtest.budget.cli import main

raise SystemExit(main())
