"""api.cli: the `omni` command line (decide, make-tiny, serve, eval, calibrate, finetune)."""
