from loadtest.bench.run import main

raise SystemExit(main())
