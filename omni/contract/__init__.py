"""omni.contract: the wire in and out for every edge (types, errors, config, request parsing, answers)."""
