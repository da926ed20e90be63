"""omni.model: a loaded Clef-omni model (prompt, backbone, head, media encoding, calibration, export, tiny)."""
