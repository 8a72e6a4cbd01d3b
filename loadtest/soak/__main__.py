from loadtest.soak.run import main

raise SystemExit(main())
