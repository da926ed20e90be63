"""Every error status through the app, with its body shape, headers and request id. Client faults are never 5xx."""
from __future__ import annotations

import base64
import gzip
import json
import re
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
import zstandard

from tests.unit.fake_model import FakeModel, media
from tests.unit.http.serving import body, served, wait_until

WAIT = 30


def field_error(r, status: int) -> list[dict]:
    assert r.status_code == status, r.text
    payload = r.json()
    assert payload["request_id"] == r.headers["x-request-id"]
    assert isinstance(payload["detail"], list) and payload["detail"]
    for issue in payload["detail"]:
        assert set(issue) == {"loc", "msg", "type"} and issue["loc"][0] == "body"
    return payload["detail"]


def request_error(r, status: int, error_type: str) -> str:
    assert r.status_code == status, r.text
    payload = r.json()
    assert payload["request_id"] == r.headers["x-request-id"]
    assert payload["detail"]["error_type"] == error_type
    return payload["detail"]["message"]


def test_validation_errors_are_422_with_fastapi_detail():
    bad = {"model": "jev-latest", "questions": {"q": {"type": "rank"}, "s": {"type": "score", "criteria": ["one"]}}}
    with served() as (client, _):
        issues = field_error(client.post("/v1/systemone", json=bad), 422)
    by_loc = {tuple(i["loc"]): i for i in issues}
    assert by_loc[("body", "state")]["type"] == "missing"
    assert by_loc[("body", "questions", "q")]["type"] == "union_tag_invalid"
    assert by_loc[("body", "questions", "s", "score", "criteria")]["type"] == "too_short"


Q = b'"questions": {"q": {"type": "noul"}}'


@pytest.mark.parametrize(("raw", "kind"), [
    (b"{not json", "json_invalid"), (b"[1, 2]", "model_attributes_type"),
    (b"\xff\xfe", "json_invalid"), (b"", "json_invalid"),
    (b'{"state": ' + b"[" * 5000 + b"]" * 5000 + b", " + Q + b"}", "json_invalid"),
    (b'{"state": {"n": ' + b"9" * 5000 + b"}, " + Q + b"}", "json_invalid"),
    (b'{"state": "\\ud800", ' + Q + b"}", "value_error"),
    (b'{"state": ' + b"[" * 100 + b"]" * 100 + b", " + Q + b"}", "value_error")
])
def test_unparseable_bodies_are_422(raw, kind):
    with served() as (client, _):
        issues = field_error(client.post("/v1/systemone", content=raw,
                                         headers={"Content-Type": "application/json"}), 422)
    assert issues[0]["type"] == kind


def test_media_and_multipart_mistakes_are_422_naming_the_field():
    with served() as (client, _):
        url = client.post("/v1/systemone", json=body(images=["https://example.com/cat.png"]))
        assert field_error(url, 422)[0]["loc"] == ["body", "images", 0]
        no_request = client.post("/v1/systemone", files=[("images", ("a.png", media("image"), "image/png"))])
        assert field_error(no_request, 422)[0]["loc"] == ["body", "request"]
        stray = client.post("/v1/systemone", files=[("request", ("r", json.dumps(body()), "application/json")),
                                                    ("asset-9", ("x", media("image"), "image/png"))])
        assert field_error(stray, 422)[0]["loc"] == ["body", "asset-9"]
        missing_part = client.post("/v1/systemone", files=[("request", ("r", json.dumps(body(
            assets={"p": {"type": "image", "part": "asset-0"}})), "application/json"))])
        assert field_error(missing_part, 422)[0]["loc"] == ["body", "assets", "p", "part"]
        json_part = client.post("/v1/systemone", json=body(assets={"p": {"type": "image", "part": "asset-0"}}))
        assert field_error(json_part, 422)[0]["loc"] == ["body", "assets", "p", "part"]
        bad_format = client.post("/v1/systemone", json=body(assets={"p": {"type": "image", "format": "gif",
                                                                          "data_base64": "AAAA"}}))
        assert field_error(bad_format, 422)[0]["loc"] == ["body", "assets", "p", "format"]
        bad_files = client.post("/v1/systemone", json=body(files=["/etc/passwd"]))
        assert field_error(bad_files, 422)[0]["loc"] == ["body", "files", 0]


def test_corrupt_and_unsupported_media_name_the_item_and_what_was_sent():
    with served() as (client, _):
        corrupt = client.post("/v1/systemone", files=[
            ("request", ("r", json.dumps(body()), "application/json")),
            ("videos", ("fan.mp4", media("video", corrupt=True), "video/mp4"))])
        issue = field_error(corrupt, 422)[0]
        assert issue["loc"] == ["body", "videos", 0] and issue["type"] == "corrupt_media"
        assert "fan.mp4" in issue["msg"]
        wrong_slot = client.post("/v1/systemone", json=body(images=[
            "data:image/png;base64," + base64.b64encode(media("video")).decode()]))
        issue = field_error(wrong_slot, 415)[0]
        assert issue["loc"] == ["body", "images", 0] and issue["type"] == "unsupported_media"


def test_oversized_media_is_413_with_the_item():
    with served(media_max_image_bytes=100) as (client, _):
        r = client.post("/v1/systemone", files=[("request", ("r", json.dumps(body()), "application/json")),
                                                ("images", ("big.png", media("image", b"x" * 500), "image/png"))])
    issue = field_error(r, 413)[0]
    assert issue["loc"] == ["body", "images", 0] and issue["type"] == "media_too_large"


def test_body_over_the_cap_is_413_declared_or_streamed():
    big = json.dumps(body(padding="x" * 5000)).encode()
    with served(max_body_bytes=4096) as (client, engine):
        declared = client.post("/v1/systemone", content=big, headers={"Content-Type": "application/json"})
        request_error(declared, 413, "request_too_large")

        def chunks():  # no Content-Length: the cap applies while streaming
            yield big[:3000]
            yield big[3000:]

        streamed = client.post("/v1/systemone", content=chunks(), headers={"Content-Type": "application/json"})
        request_error(streamed, 413, "request_too_large")
        assert engine.model.seen == []


@pytest.mark.parametrize("encoding", ["zstd", "gzip"])
def test_compression_bombs_are_refused_at_the_cap_without_inflating(encoding):
    bomb_raw = b'{"state": "' + b"a" * (64 * 1024 * 1024) + b'"}'  # 64 MiB of JSON...
    bomb = zstandard.ZstdCompressor(level=3).compress(bomb_raw) if encoding == "zstd" else gzip.compress(bomb_raw)
    assert len(bomb) < 512 * 1024  # ...in well under the wire cap
    with served(max_body_bytes=1024 * 1024) as (client, _):
        r = client.post("/v1/systemone", content=bomb,
                        headers={"Content-Type": "application/json", "Content-Encoding": encoding})
    assert "decompressed" in request_error(r, 413, "request_too_large")


def test_broken_compressed_body_is_422():
    with served() as (client, _):
        r = client.post("/v1/systemone", content=b"this is not zstd",
                        headers={"Content-Type": "application/json", "Content-Encoding": "zstd"})
    assert field_error(r, 422)[0]["type"] == "body_decoding"


@pytest.mark.parametrize("headers", [{"Content-Type": "application/xml"}, {"Content-Type": "image/png"},
                                     {"Content-Type": "application/json", "Content-Encoding": "br"}])
def test_unsupported_content_type_or_encoding_is_415(headers):
    with served() as (client, _):
        r = client.post("/v1/systemone", content=b"<x/>", headers=headers)
    request_error(r, 415, "unsupported_media_type")


def test_unknown_model_is_400_api_usage_error():
    with served() as (client, _):
        msg = request_error(client.post("/v1/systemone", json=body(model="gpt-4o")), 400, "api_usage_error")
    assert "gpt-4o" in msg and "clef-omni" in msg


def test_auth_on_requires_one_of_the_configured_bearer_keys():
    with served(api_keys=("k-1", "k-2")) as (client, _):
        missing = client.post("/v1/systemone", json=body())
        assert request_error(missing, 401, "authentication_error") == "Must supply an API key!"
        assert missing.headers["www-authenticate"] == "Bearer"
        wrong = client.post("/v1/systemone", json=body(), headers={"Authorization": "Bearer k-3"})
        request_error(wrong, 401, "authentication_error")
        basic = client.post("/v1/systemone", json=body(), headers={"Authorization": "Basic azE6"})
        request_error(basic, 401, "authentication_error")
        assert client.get("/v1/models").status_code == 401
        ok = client.post("/v1/systemone", json=body(), headers={"Authorization": "Bearer k-2"})
        assert ok.status_code == 200, ok.text
        assert client.get("/v1/models", headers={"Authorization": "Bearer k-1"}).status_code == 200
        assert client.get("/health").status_code == 200  # probes stay open


def test_with_keys_only_the_probes_are_open_unless_docs_or_metrics_are_made_public():
    key = {"Authorization": "Bearer k-1"}
    with served(api_keys=("k-1",)) as (client, _):
        for path in ("/metrics", "/docs", "/openapi.json", "/v1/models"):
            request_error(client.get(path), 401, "authentication_error")
            assert client.get(path, headers=key).status_code == 200, path
        assert client.get("/health").status_code == 200 and client.get("/ready").status_code == 200
    with served(api_keys=("k-1",), public_docs=True, public_metrics=True) as (client, _):
        for path in ("/metrics", "/docs", "/openapi.json"):
            assert client.get(path).status_code == 200, path
        request_error(client.get("/v1/models"), 401, "authentication_error")
    with served() as (client, _):                                     # no keys: everything is open
        assert all(client.get(p).status_code == 200 for p in ("/metrics", "/docs", "/openapi.json", "/v1/models"))


def test_not_ready_is_503_with_retry_after():
    gate = threading.Event()
    with served(model=FakeModel(load_gate=gate), wait=False) as (client, _):
        r = client.post("/v1/systemone", json=body())
        request_error(r, 503, "not_ready")
        assert r.headers["retry-after"] == "5"
        gate.set()


def test_full_queue_is_429_with_retry_after():
    gate = threading.Event()
    with served(model=FakeModel(forward_gate=gate), max_queue=2, max_batch_records=1) as (client, engine), \
            ThreadPoolExecutor(2) as pool:
        held = [pool.submit(client.post, "/v1/systemone", json=body()) for _ in range(2)]
        wait_until(lambda: len(engine.model.seen) == 2, what="both admitted (one in the model, one queued)")
        r = client.post("/v1/systemone", json=body())
        request_error(r, 429, "rate_limit_error")
        assert r.headers["retry-after"] == "1" and r.headers["retry-after-ms"] == "1000"
        gate.set()
        assert [f.result(WAIT).status_code for f in held] == [200, 200]


def test_deadline_is_504_and_does_not_block_other_requests():
    # a slow decode is a media decode: it runs in the decode pool, never on the caller's thread
    with served(request_timeout_s=3.0, decode_threads=2, inline_prepare_max_chars=0) as (client, engine):
        with ThreadPoolExecutor(4) as pool:
            slow = pool.submit(client.post, "/v1/systemone", json=body("__slow_decode__"))
            fast = [pool.submit(client.post, "/v1/systemone", json=body(f"quick {i}")) for i in range(3)]
            assert [f.result(WAIT).status_code for f in fast] == [200, 200, 200]
            assert not engine.model.release.is_set()  # the slow one was still stuck meanwhile
            r = slow.result(WAIT)
        request_error(r, 504, "timeout")
        engine.model.release.set()
        assert client.post("/v1/systemone", json=body()).status_code == 200


def test_a_failing_batch_is_500_with_the_request_id_only():
    with served() as (client, _):
        r = client.post("/v1/systemone", json=body("__boom__"), headers={"x-request-id": "trace-42"})
        msg = request_error(r, 500, "internal_error")
    assert r.headers["x-request-id"] == "trace-42" and "trace-42" in msg
    assert "device fault" not in r.text and "RuntimeError" not in r.text


def test_an_unexpected_bug_is_500_without_internals():
    with served() as (client, _):
        r = client.post("/v1/systemone", json=body("__bug__"))
        msg = request_error(r, 500, "internal_error")
        assert r.json()["request_id"] in msg
        assert "secret" not in r.text and "/srv" not in r.text
        assert client.post("/v1/systemone", json=body()).status_code == 200  # still serving


def test_unknown_route_and_method_keep_the_shape():
    with served() as (client, _):
        request_error(client.get("/v2/nothing"), 404, "not_found")
        request_error(client.get("/v1/systemone"), 405, "method_not_allowed")


def test_the_table_maps_every_core_error_to_its_status_and_shape():
    from api.http.errors import BodyTooLarge, UnsupportedContentType, error_payload
    from omni.contract.errors import (
        CheckpointError,
        ContextTooLong,
        DeadlineExceeded,
        InferenceFailed,
        InvalidRequest,
        NotReady,
        Overloaded,
        UnknownModel,
    )
    from preprocess.errors import CorruptMedia, MediaError, MediaTooLarge, UnsupportedMedia
    from preprocess.item import MediaItem

    cases = [(InvalidRequest.one(("questions", "q"), "bad", "too_long"), 422, ["body", "questions", "q"]),
             (ContextTooLong(("state",), "too long", 70000, 64000), 413, ["body", "state"]),
             (CorruptMedia(MediaItem("videos", 1, b"v"), "no frames"), 422, ["body", "videos", 1]),
             (MediaTooLarge(MediaItem("audio", 0, b"a"), "301 s"), 413, ["body", "audio", 0]),
             (UnsupportedMedia(MediaItem("images", 2, b"i"), "gif"), 415, ["body", "images", 2]),
             (MediaError(MediaItem("images", 0, b"i", origin="files[3]"), "?"), 422, ["body", "images", 0]),
             (UnknownModel("x", ("clef-omni",)), 400, None), (Overloaded("full", 0.2), 429, None),
             (NotReady("loading"), 503, None), (DeadlineExceeded("late"), 504, None),
             (BodyTooLarge("big"), 413, None), (UnsupportedContentType("xml"), 415, None),
             (InferenceFailed("cuda oom at 0xdead"), 500, None), (CheckpointError("keys"), 500, None),
             (KeyError("internal"), 500, None)]
    for exc, status, loc in cases:
        got_status, payload, _headers = error_payload(exc, "rid-1")
        assert got_status == status, exc
        assert payload["request_id"] == "rid-1"
        if loc is not None:
            assert payload["detail"][0]["loc"] == loc
        else:
            assert set(payload["detail"]) == {"error_type", "message"}
        if status == 500:
            assert "rid-1" in payload["detail"]["message"] and "0xdead" not in json.dumps(payload)
        if isinstance(exc, MediaError) and exc.item.origin:
            assert payload["detail"][0]["msg"] == "? (sent as files[3])"    # the item says how it was sent
        assert status < 500 or isinstance(exc, (InferenceFailed, CheckpointError, KeyError, NotReady,
                                                DeadlineExceeded))
    assert error_payload(Overloaded("full", 0.2), "r")[2] == {"Retry-After": "1", "retry-after-ms": "200"}


def test_empty_uploads_and_duplicate_part_names_are_422():
    req = ("request", ("r", json.dumps(body(assets={"p": {"type": "image", "part": "asset-0"}})), "application/json"))
    with served() as (client, engine):
        empty = client.post("/v1/systemone", files=[("request", ("r", json.dumps(body()), "application/json")),
                                                    ("images", ("a.png", media("image"), "image/png")),
                                                    ("images", ("empty.png", b"", "image/png"))])
        assert field_error(empty, 422)[0]["loc"] == ["body", "images", 1]
        empty_asset = client.post("/v1/systemone", files=[req, ("asset-0", ("asset-0", b"", "image/png"))])
        assert field_error(empty_asset, 422)[0]["loc"] == ["body", "assets", "p", "part"]
        twice = client.post("/v1/systemone", files=[req, ("asset-0", ("a", media("image"), "image/png")),
                                                    ("asset-0", ("b", media("image"), "image/png"))])
        assert field_error(twice, 422)[0]["loc"] == ["body", "asset-0"]
        assert engine.model.seen == []


def test_the_cloudflare_envelope_keeps_the_status_and_headers_and_adds_the_code():
    from api.http.errors import BodyTooLarge, NoRoute, Unauthorized, error_payload
    from omni.contract.errors import InvalidRequest, Overloaded
    from preprocess.errors import MediaTooLarge
    from preprocess.item import MediaItem

    cases = [(Unauthorized("no key"), 401, 10000), (BodyTooLarge("big"), 413, 5021), (NoRoute("x"), 400, 7000),
             (InvalidRequest.one(("questions", "q"), "bad"), 422, 5012), (Overloaded("full", 2.0), 429, 3040),
             (MediaTooLarge(MediaItem("audio", 1, b"a"), "301 s"), 413, 5021), (KeyError("secret"), 500, 5012)]
    for exc, status, code in cases:
        plain = error_payload(exc, "rid-9")
        got_status, payload, headers = error_payload(exc, "rid-9", "cloudflare")
        assert (got_status, headers) == (plain[0], plain[2]) == (status, plain[2])
        assert payload["success"] is False and payload["result"] is None
        assert [e["code"] for e in payload["errors"]] == [code]
    assert error_payload(InvalidRequest.one(("questions", "q"), "bad"), "r", "cloudflare")[1]["errors"][0][
        "message"] == "questions.q: bad"
    assert "secret" not in json.dumps(error_payload(KeyError("secret"), "rid-9", "cloudflare")[1])


def test_avriks_envelope_adds_its_error_object_with_its_codes_and_keeps_ours():
    from api.http.errors import error_payload
    from omni.contract.errors import ContextTooLong, InvalidRequest, NotReady, Overloaded

    cases = [(ContextTooLong(("state",), "too long", 9000, 8192), 413, "context_too_large", "state"),
             (NotReady("loading"), 503, "model_unavailable", None), (Overloaded("full", 2.0), 429, "rate_limit_error",
                                                                      None),
             (InvalidRequest.one(("questions", "q", "type"), "bad"), 422, "validation_error", "questions.q.type"),
             (KeyError("secret"), 500, "internal_error", None)]
    for exc, status, code, field in cases:
        plain = error_payload(exc, "rid-7")
        got_status, payload, headers = error_payload(exc, "rid-7", "avrik")
        assert (got_status, headers) == (plain[0], plain[2]) and got_status == status
        assert {k: v for k, v in payload.items() if k != "error"} == plain[1]         # ours, unchanged, beside it
        assert (payload["error"]["code"], payload["error"]["field"]) == (code, field)
        assert payload["error"]["message"] and "secret" not in json.dumps(payload)
    assert error_payload(InvalidRequest.one(("questions", "q"), "bad"), "r", "avrik")[1]["error"][
        "message"] == "questions.q: bad"


@pytest.mark.parametrize(("content", "headers"), [
    (b"\x28\xb5\x2f\xfd garbage", {"Content-Type": "application/json", "Content-Encoding": "zstd"}),
    (b"\x1f\x8b garbage", {"Content-Type": "application/json", "Content-Encoding": "gzip"}),
    (b"--x\r\nnot a header\r\n\r\n", {"Content-Type": "multipart/form-data; boundary=y"})])
def test_transport_failures_are_plain_words_with_the_library_detail_in_the_log(content, headers, caplog):
    import logging

    with caplog.at_level(logging.INFO, logger="api.http.errors"), served() as (client, _):
        r = client.post("/v1/systemone", content=content, headers={**headers, "x-request-id": "plain-1"})
    message = field_error(r, 422)[0]["msg"]
    assert not re.search(r"Error\b|errno|0x[0-9a-f]{4}|object at|\(\)", message), message
    assert any("plain-1" in rec.getMessage() for rec in caplog.records)      # the raw detail, under the request id
