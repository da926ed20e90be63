"""omni.review: the review workflow: people label the decisions the model was least sure of.

    directory.py     review directories: labels.jsonl (a dataset), media/ by content hash, decisions kept by a server
    history.py       history.jsonl: every label change, comment, flag, skip and undo; the review state rebuilt from it
    queues.py        review queues: most uncertain first, k reviewers per item and the disagreements queue, what
                     reviewers do there
    appeals.py       appeals of logged decisions: appealed with a reason, upheld or reversed, who and when
                     (appeals.jsonl, appended and fsynced)
    wellness.py      reviewer wellness: which items' media are shielded until revealed, exposures per reviewer
                     and day (exposure.jsonl), daily limits that move further items to others
    sources.py       where a queue's decided requests come from: a batch output, the decisions a server kept
    filters.py       what a reviewer may narrow a queue's list to (question, answer, confidence, outcome, ...)
    agreement.py     agreement between reviewers (Cohen's, Fleiss' kappa) and with the model (numpy only)

Uses omni.contract (answers read back as label ids, request lines, outcomes); never omni.model, omni.serve or
omni.learn (labels.jsonl is in the dataset format, read by omni.learn.dataset). Knows nothing of HTTP, argv or the
environment.
"""
