"""api.cli: the `omni` command line.

    main.py    the parser and the one place errors are printed (exit 2, never a traceback for a caller's mistake)
    decide.py  `omni decide` (request JSON + --image/--audio/--video/--part as named parts) and `omni make-tiny`
    serve.py   `omni serve`: settings -> uvicorn running api.http.app, drain on SIGTERM
    learn.py   `omni eval`, `omni calibrate`, `omni finetune`

Every request goes through the same wire parser as HTTP. Knows nothing of model internals.
"""
