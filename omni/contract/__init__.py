"""omni.contract: the wire in and out for EVERY edge (HTTP, CLI, datasets, batch files) — one parser, one set of types.

    types.py        frozen values: Question, DecisionRequest, Part (an upload beside the JSON), Decision (to the wire),
                    Outcome (a decision's act / review / pass, built by outcomes.py)
    request.py      parse_request(body, config, parts): the one parser; validates everything, checks the model name
    media_forms.py  every media form -> MediaItems: Clef slots, avrik objects, llama.cpp files, TypeSafe assets,
                    named parts
    render.py       a parsed request written back as a System One body (the inverse of parse_request)
    json_values.py  the one JSON loader for callers' documents; what can be rendered into a prompt
    answers.py      probabilities -> System One answers (rounding, confidence); an answer read back as a label id
    request_line.py one request per line with media file paths (datasets, `omni batch` backlogs, replayed logs)
    batch_file.py   the `omni batch` output file: one record per input line, the last record of a line wins
    config.py       EngineConfig, which checks its own values
    errors.py       typed errors, no status codes; `quoted` / `clipped`: the short prefix an error echoes of a value
    audit.py        the audit record of a decision (model, calibration, prompt, media, runtime): its JSON form
    avrik.py        avrik's `audit` object (what avrik's published client requires), filled from the audit record
    policy.py       a decision policy (TOML): read, checked, versioned by its sha256; swapped whole on reload
    toml_text.py    operators' TOML (policies, statement maps) parsed with its nesting bounded (never a RecursionError)
    outcomes.py     answers + a policy -> act / review / pass per question and overall (`x_outcome`)
    qa.py           which automatic decisions a policy's [qa] / qa_sample draws for QA review (seeded, stateless)
    evidence_summary.py  what of `x_evidence` is kept (logged, replayed, a statement's facts): the top items, no
                    maps; two summaries compared

A media item is `preprocess.item.MediaItem` (the decoders' errors carry it). Knows nothing of torch, the model,
HTTP, argv or the environment.
"""
