"""Settings: OMNI_* env -> Settings/EngineConfig, CLI flags override env, bad values are named, keys files."""
from __future__ import annotations

import argparse

import pytest

from api.cli.serve import add_serve_arguments, build_settings
from api.http.settings import Settings, SettingsError


def parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_serve_arguments(parser)
    return parser.parse_args(argv)


def test_defaults_serve_the_tiny_default_on_loopback():
    s = build_settings(parse(), environ={})
    assert (s.host, s.port, s.api_keys, s.tiny_default) == ("127.0.0.1", 8000, (), True)
    m = s.engine.media
    assert s.body_cap_bytes >= (m.max_images_total_bytes + m.max_audio_video_total_bytes) * 4 // 3


def test_env_fills_engine_media_and_edge_fields_and_reports_unknown_names():
    env = {"OMNI_MODEL": "/models/clef-omni", "OMNI_PORT": "9001", "OMNI_API_KEYS": "a, b,",
           "OMNI_MAX_BATCH_RECORDS": "16", "OMNI_MAX_WAIT_MS": "2.5", "OMNI_MODEL_ALIASES": "x,y",
           "OMNI_MEDIA_MAX_IMAGES": "2", "OMNI_MAX_BODY_BYTES": "1_000_000", "OMNI_MAX_BATCH_RECRODS": "3",
           "HOME": "/root"}
    s = Settings.from_env(env)
    assert s.engine.model_path == "/models/clef-omni" and not s.tiny_default
    assert (s.port, s.api_keys, s.max_body_bytes, s.body_cap_bytes) == (9001, ("a", "b"), 1_000_000, 1_000_000)
    assert (s.engine.max_batch_records, s.engine.max_wait_ms, s.engine.model_aliases) == (16, 2.5, ("x", "y"))
    assert s.engine.media.max_images == 2
    assert s.unknown_env == ("OMNI_MAX_BATCH_RECRODS",)


def test_cli_flags_override_env():
    env = {"OMNI_PORT": "9001", "OMNI_MAX_QUEUE": "10", "OMNI_MODEL": "/a"}
    s = build_settings(parse("--port", "9002", "--max-queue", "20", "--model", "/b", "--no-batching",
                             "--media-max-videos", "1"), environ=env)
    assert (s.port, s.engine.max_queue, s.engine.model_path) == (9002, 20, "/b")
    assert s.engine.max_batch_records == 1 and s.engine.media.max_videos == 1


def test_api_keys_file(tmp_path):
    keys = tmp_path / "keys"
    keys.write_text("# team keys\nk-1\n\n  k-2  \n")
    assert build_settings(parse("--api-keys-file", str(keys)), environ={}).api_keys == ("k-1", "k-2")
    assert Settings.from_env({"OMNI_API_KEYS_FILE": str(keys)}).api_keys == ("k-1", "k-2")
    with pytest.raises(SettingsError, match="cannot read"):
        Settings.from_env({"OMNI_API_KEYS_FILE": str(tmp_path / "missing")})


@pytest.mark.parametrize("env, needle", [({"OMNI_PORT": "http"}, "OMNI_PORT"), ({"OMNI_MAX_QUEUE": "0"}, "max_queue"),
                                         ({"OMNI_CONFIDENCE": "vibes"}, "confidence"),
                                         ({"OMNI_MAX_BODY_BYTES": "12"}, "max_body_bytes")])
def test_bad_values_are_refused_with_their_name(env, needle):
    with pytest.raises(SettingsError, match=needle):
        Settings.from_env(env)


def test_bad_flag_value_names_the_flag():
    with pytest.raises(SettingsError, match="--max-wait-ms"):
        build_settings(parse("--max-wait-ms", "soon"), environ={})


def test_run_serve_exits_2_on_bad_settings(monkeypatch, capsys):
    from api.cli.serve import run_serve

    monkeypatch.setenv("OMNI_PORT", "not-a-port")
    assert run_serve(parse()) == 2
    assert "OMNI_PORT" in capsys.readouterr().err
