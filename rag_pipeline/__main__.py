from rag_pipeline.serve.cli import main

raise SystemExit(main())
