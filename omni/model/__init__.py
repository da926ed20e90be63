"""omni.model: a loaded Clef-omni model and everything that builds, loads or writes one.

    clef.py         ClefModel: from_config / load, the ONE prepare (media + prompt + positions), logits, probabilities
    checkpoint.py   where a checkpoint directory comes from (dir, hub id, embedded default), its files, release date
    backbone.py     the Qwen3-Omni thinker (the only file naming Qwen3OmniMoe* classes): strict load, one prefill
    head.py         Clef's joint-schema head (§3 math), batched
    prompt.py       the reference prompt and its spans; state truncation
    media.py        media items -> placeholder ids + thinker tensors (through preprocess)
    calibration.py  optional temperature scaling bound to a checkpoint
    export.py       a (fine-tuned) model back to the released layout
    tiny.py         a tiny random checkpoint built offline; checkpoints/ holds the embedded demo

Uses omni.contract and preprocess; knows nothing of serving, queues, HTTP, argv or the environment.
"""
