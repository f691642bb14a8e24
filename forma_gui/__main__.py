from forma_gui.app.main import main

raise SystemExit(main())
