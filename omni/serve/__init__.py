"""omni.serve: answering requests with a model.

    engine.py   DecisionEngine(config, model=None): warm-up, decide / decide_batch, submit (admission, decode pool)
    batcher.py  MicroBatcher: a bounded queue in front of the one thread that owns the model

Uses omni.contract (and omni.model only to load the model its config names); knows nothing of HTTP, argv, the
environment or training.
"""
