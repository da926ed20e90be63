"""omni.serve: the DecisionEngine and its micro-batcher."""
