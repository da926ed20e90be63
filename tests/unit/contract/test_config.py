"""EngineConfig and MediaLimits check their own values, so every edge (env, flags, Python) refuses the same way."""
from __future__ import annotations

import pytest

from api.http.settings import Settings, SettingsError
from omni.contract.config import EngineConfig
from omni.contract.errors import ConfigError
from preprocess.media import MediaLimits


@pytest.mark.parametrize(("field", "value"), [("max_batch_records", 0), ("max_queue", 0), ("decode_threads", 0),
                                              ("decode_threads", 65),
                                              ("max_context_tokens", 0), ("max_choice_options", 1),
                                              ("max_score_levels", 1), ("max_wait_ms", -1.0), ("torch_threads", -1),
                                              ("request_timeout_s", 0.0), ("confidence", "vibes"), ("dtype", "int8"),
                                              ("head_dtype", "auto")])
def test_engine_config_refuses_out_of_range_values_naming_the_field(field, value):
    with pytest.raises(ConfigError, match=field):
        EngineConfig(**{field: value})
    with pytest.raises(SettingsError, match=field):          # the same check, reached from the environment
        Settings.from_env({"OMNI_" + field.upper(): str(value)})


@pytest.mark.parametrize("field", ["max_images", "max_video_bytes", "max_audio_seconds", "max_video_source_fps"])
def test_media_limits_must_be_positive(field):
    with pytest.raises(ValueError, match=field):
        MediaLimits(**{field: 0})
    with pytest.raises(SettingsError, match=field):
        Settings.from_env({"OMNI_MEDIA_" + field.upper(): "0"})


def test_defaults_and_edge_values_are_accepted():
    EngineConfig(max_wait_ms=0, inline_prepare_max_chars=0, torch_threads=0, max_choice_options=2)
    MediaLimits(decode_slack_seconds=0)
