"""api.cli: the `omni` command line.

    main.py    the parser and the one place errors are printed (exit 2, never a traceback for a caller's mistake)
    library_logs.py  the libraries' import-time notices kept off stderr (torchao's kernels, torch's enum notice)
    decide.py  `omni decide` (request JSON + --image/--audio/--video/--part as named parts) and `omni make-tiny`
    explain.py `omni explain REQUEST`: the evidence of each answer; `--occlude`: each medium's top region masked vs a
               random one of the same size, how far each answer moves
    serve.py   `omni serve`: settings -> uvicorn running api.http.app (or `--ray`: api.cluster), drain on SIGTERM
    review.py  `omni review`: `omni serve` with review on (--batch outputs, --report directories), prints the address
    batch.py   `omni batch IN.jsonl --out OUT.jsonl`: a backlog answered in-process or by a running server, resumable
    remote.py  the backlog backend of `omni batch --url`: each line posted to `omni serve` (httpx), 429/503 retried
    learn.py   `omni eval`, `omni calibrate`, `omni finetune`
    replay.py  `omni replay LOG|RECORD`: logged decisions re-run and compared (exit 1 when one is not reproduced)
    export.py  `omni export statements LOG --map MAP.toml --out FILE.jsonl`: DSA statements of reasons from a log;
               `omni export checkpoint MODEL --out DIR [--quantize SCHEME]`: a checkpoint in the released (sharded,
               indexed) layout, or pre-quantized
    policy.py  `omni policy fit DATA --target-precision P --out POLICY.toml` (thresholds from labels), `check FILE`
    report.py  `omni report drift LOG --window 1h`: answer/confidence/outcome drift between windows (PSI), PNG
    report_output.py  what every report command shares: one-line refusals, the reading progress bar, md rows
    report_shadow.py  `omni report shadow LOG --out DIR`: a live model beside its shadow candidate (agreement,
               outcome flips, calibration on reviewed items), PNG
    report_qa.py  `omni report qa REVIEW_DIR --policy FILE`: automatic precision from QA samples against the target
               (Wilson intervals), an ALERT line and exit 1 below it, PNG over time
    doctor.py  `omni doctor [--model DIR]`: the machine and a checkpoint checked without loading it (exit 1 on a fail)
    doctor_plan.py  `omni doctor --plan [--json]`: the memory plan of a checkpoint's configs, as text or JSON
    bank.py    `omni bank check FILE...`, `omni bank lookup FILE... --image PHOTO --file ANY`: hash banks (no model)
    bank_flags.py  `--bank FILE` / `--bank-pdq-threshold BANK=BITS` of `omni decide` and `omni batch`: the banks read
               for a model run here
    line.py    `omni line CONFIG.toml [--status]`: an inspection line run (api.line), or its one-screen status

Every request goes through the same wire parser as HTTP. Knows nothing of model internals.
"""
