from autoconf.cli import main

raise SystemExit(main())
