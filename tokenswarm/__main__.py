from tokenswarm.cli import main

raise SystemExit(main())
