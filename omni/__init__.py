"""omni: the decision core (prompt, backbone, head, answers, engine). Knows torch and transformers, never HTTP."""
