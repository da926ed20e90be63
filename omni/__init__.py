"""omni: the decision core, one room per job. Imports go one way, down this list:

    omni/governance/  over logged and labelled decisions: policy fit and its report, drift, DSA statements (may use learn)
    omni/serve/     the DecisionEngine (given a model) and its micro-batcher: admission, decode pool, one model thread
    omni/review/    the review workflow: review directories, queues, their sources and filters, history, agreement
    omni/learn/     labelled datasets, evaluation, metrics, plots, fine-tuning
    omni/banks/     hash banks: bank files, PDQ / sha256 indexes and lookups, the hashes of a medium
                    (serve, banks, review and learn sit side by side: none imports another)
    omni/model/     ClefModel with the ONE prepare (media + prompt + positions), backbone, head, checkpoints, export
    omni/contract/  the wire in and out for every edge: types, errors, config, the one request parser, answers

and everything here may use `preprocess/` (bytes -> model inputs). Knows torch and transformers, never HTTP or argv;
`tests/unit/test_imports.py` checks the arrows.
"""
