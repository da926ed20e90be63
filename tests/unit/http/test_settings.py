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


def test_a_keys_file_names_its_callers_and_their_roles(tmp_path):
    from api.http.identity import KeyRing, key_name

    keys = tmp_path / "keys"
    keys.write_text("# team keys\nk-root\nk-ada  ada\n\tk-bob bob reviewer\nk-app app caller  \nk-boss boss admin\n")
    s = build_settings(parse("--api-keys-file", str(keys)), environ={})
    assert s.api_keys == ("k-root", "k-ada ada", "k-bob bob reviewer", "k-app app caller", "k-boss boss admin")
    ring = KeyRing.of(s.api_keys)
    callers = {k: ring.caller(k) for k in ("k-root", "k-ada", "k-bob", "k-app", "k-boss")}
    assert {k: (c.name, c.role) for k, c in callers.items() if c} == {
        "k-root": (key_name("k-root"), "admin"), "k-ada": ("ada", "reviewer"), "k-bob": ("bob", "reviewer"),
        "k-app": ("app", "caller"), "k-boss": ("boss", "admin")}
    assert "k-root" not in repr(s)   # keys stay out of logs


@pytest.mark.parametrize(("lines", "says"), [("k-1 ada\nk-2 bob boss\n", "line 2: unknown role 'boss'"),
                                             ("k-1\n# c\n\nk-1 ada\n", "line 4: the key of line 1 again"),
                                             ("k-1 " + "n" * 65 + "\n", "line 1: name 'n+' must be 1..64 characters"),
                                             ("k-1 ad\x01a reviewer\n", "line 1: .*control characters"),
                                             ("k-1 ada reviewer extra\n", "line 1: expected KEY"),
                                             ("k-1\n\xff\n", "cannot read")])
def test_a_bad_keys_file_line_is_refused_naming_the_file_and_line(tmp_path, lines, says):
    keys = tmp_path / "team.keys"
    keys.write_bytes(lines.encode("latin-1"))
    for run in (lambda: build_settings(parse("--api-keys-file", str(keys)), environ={}),
                lambda: Settings.from_env({"OMNI_API_KEYS_FILE": str(keys)})):
        with pytest.raises(SettingsError, match=says) as caught:
            run()
        assert "team.keys" in str(caught.value) and "k-1" not in str(caught.value).replace(str(keys), "")


def test_api_keys_given_by_value_are_checked_too():
    assert Settings.from_env({"OMNI_API_KEYS": "k1,k2 ada"}).api_keys == ("k1", "k2 ada")
    with pytest.raises(SettingsError, match="api_keys entry 2: a key given twice"):
        Settings.from_env({"OMNI_API_KEYS": "k1,k1"})
    with pytest.raises(SettingsError, match="api_keys entry 1: unknown role"):
        Settings().with_values({"api_keys": ("k1 ada boss",)})


def test_list_flags_may_be_repeated_and_comma_separated():
    s = build_settings(parse("--webhook-on", "act", "--webhook-on", "pass,review"), environ={})
    assert s.webhook_on == ("act", "pass", "review")
    from api.cli.review import _joined, add_review_arguments  # `omni review` adds its --batch to the same list

    parser = argparse.ArgumentParser()
    add_review_arguments(parser)
    args = parser.parse_args(["--batch", "c.jsonl", "--review-batches", "a.jsonl,b.jsonl", "--review-batches", "d"])
    assert _joined(args.review_batches, args.batch) == "a.jsonl,b.jsonl,d,c.jsonl"
    assert _joined(None, []) is None


@pytest.mark.parametrize(("env", "needle"), [({"OMNI_PORT": "http"}, "OMNI_PORT"),
                                             ({"OMNI_MAX_QUEUE": "0"}, "max_queue"),
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
