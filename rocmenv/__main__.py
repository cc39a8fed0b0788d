from rocmenv.cli import main

raise SystemExit(main())
