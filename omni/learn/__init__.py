"""omni.learn: from labelled data to numbers and better checkpoints.

    dataset.py       JSONL of System One requests + labels, parsed by the one wire parser (labels optional for backlogs)
    evaluation.py    logits over a dataset -> metrics -> report.md, metrics.json, predictions, figures
    metrics.py       accuracy, macro-F1, NLL, Brier, ECE, precision threshold (numpy only)
    plots.py         reliability diagrams and confusion matrices (PNG)
    training.py      fine-tuning (head, LoRA, full) through the same prepare as serving; writes the released layout
    training_config.py  what a fine-tuning run is asked (mode, epochs, rates, split): no torch, for the CLI's flags
    review.py        review directories: labels.jsonl (a dataset), media/ by content hash, decisions kept by a server
    review_history.py  history.jsonl: every label change, comment, flag, skip and undo; the review state rebuilt from it
    review_queue.py  review queues: most uncertain first, k reviewers per item and the disagreements queue, what
                     reviewers do there
    review_sources.py  where a queue's decided requests come from: a batch output, the decisions a server kept
    review_filters.py  what a reviewer may narrow a queue's list to (question, answer, confidence, outcome, ...)
    agreement.py     agreement between reviewers (Cohen's, Fleiss' kappa) and with the model (numpy only)
    statements.py        logged decisions -> DSA statements of reasons (what the service knows + the map's fields)
    statement_map.py     the TOML map of question outcomes -> statement fields, checked against the database's rules
    statement_schema.py  the DSA Transparency Database's statement fields, value lists and limits (with sources)
    policy_fit.py    per question the lowest auto_at reaching a target precision (Clopper-Pearson lower bound)
    policy_report.py the fitted policy's TOML, its report (report.md, report.json) and coverage-precision PNGs
    drift.py         logged decisions per time window -> answer/confidence/outcome distributions, PSI per question
    drift_plot.py    the drift report's PNG: PSI per question over windows, answer shares per window

Uses omni.model and omni.contract; never omni.serve. Knows nothing of HTTP, argv or the environment.
"""
