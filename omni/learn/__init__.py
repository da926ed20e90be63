"""omni.learn: from labelled data to numbers and better checkpoints.

    dataset.py       JSONL of System One requests + labels, parsed by the one wire parser (labels optional for backlogs)
    evaluation.py    logits over a dataset -> metrics -> report.md, metrics.json, predictions, figures
    metrics.py       accuracy, macro-F1, NLL, Brier, ECE, precision threshold (numpy only)
    plots.py         reliability diagrams and confusion matrices (PNG); the one matplotlib set-up (`use_agg`)
    training.py      fine-tuning (head, LoRA, full) through the same prepare as serving; writes the released layout
    training_config.py  what a fine-tuning run is asked (mode, epochs, rates, split): no torch, for the CLI's flags
    occlusion.py     the occlusion check: each medium's top-evidence region masked vs a random one of its size, |Δp|
    occlusion_regions.py  the top region of each medium read from x_evidence; a seeded random region of the same size
    occlusion_media.py    the masks of a photo (grey box), a recording (silent window) and a state (blanked span)
    occlusion_video.py    the mask of a video: the seconds of a window cut from its picture and soundtrack (PyAV)

Uses omni.model and omni.contract; never omni.serve or omni.review. Knows nothing of HTTP, argv or the environment.
"""
