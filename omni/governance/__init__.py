"""omni.governance: what the service may decide on its own, and what it did: over logged and labelled decisions.

    policy_fit.py    per question the lowest auto_at reaching a target precision (Clopper-Pearson lower bound)
    policy_report.py the fitted policy's TOML, its report (report.md, report.json) and coverage-precision PNGs
    drift.py         logged decisions per time window -> answer/confidence/outcome distributions, PSI per question
    drift_plot.py    the drift report's PNG: PSI per question over windows, answer shares per window
    shadow.py        logged decisions with a shadow block -> live vs candidate per question: agreement (Wilson),
                     mean |delta p|, outcome flips, accuracy/ECE/Brier of each on reviewed items
    shadow_plot.py   the shadow report's PNG: agreement with intervals, the flips heat map, calibration of each
    qa.py            QA samples in a review directory + reviewers' labels -> automatic precision per question and
                     window (Wilson interval) against the target, alerts
    qa_plot.py       the QA report's PNG: precision per window with intervals, the whole period's, the target
    statements.py        logged decisions -> DSA statements of reasons (what the service knows + the map's fields)
    statement_facts.py   the facts a decision relied on (its kept evidence) as sentences for decision_facts
    statement_map.py     the TOML map of question outcomes -> statement fields, checked against the database's rules
    statement_schema.py  the DSA Transparency Database's statement fields, value lists and limits (with sources)

Uses omni.contract and omni.learn (plots); never omni.serve, omni.review or the model's weights. Knows nothing of
HTTP, argv or the environment.
"""
