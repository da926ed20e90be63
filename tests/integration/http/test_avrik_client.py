"""avrik-server's published client (`avrik-sdk==1.0.0`, pinned in the dev extra) against our real app in-process
around the tiny engine: the body its own builder writes (`decide_body` with `image()` entries, `{"data",
"media_type"}`) is accepted and its image is seen (image tokens, the same answers as the same bytes as a data URL);
a bad `data` is a 422 at `images.0.data`; `Client.decide` gets avrik's `audit` object, filled from our audit record
(`omni.contract.avrik`), which its `Decision` model requires."""
from __future__ import annotations

import base64

import avrik_sdk
import httpx
import pytest
from fastapi.testclient import TestClient

from fixtures.media import image_bytes

STATE = "Unit 7 on the bench, photo attached."
QUESTIONS = {"visible": avrik_sdk.noul("Is the serial label visible in the photo?"),
             "next": avrik_sdk.choice("What next?", ["ship", "rework", "scrap"]),
             "wear": avrik_sdk.score("How worn is the casing?", ["new", "used", "worn"])}


class ThroughTestClient(httpx.BaseTransport):
    """An httpx transport that hands each request to a Starlette TestClient (the app in-process, lifespan run)."""

    def __init__(self, client: TestClient):
        self.client = client

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        url = request.url.raw_path.decode("ascii")
        sent = self.client.request(request.method, url, headers=dict(request.headers), content=request.read())
        headers = [(k, v) for k, v in sent.headers.multi_items() if k.lower() not in ("content-encoding",
                                                                                   "content-length")]
        return httpx.Response(sent.status_code, headers=headers, content=sent.content, request=request)


@pytest.fixture(scope="module")
def app_client(tiny_app_client):
    return tiny_app_client


@pytest.fixture(scope="module")
def http(app_client):
    """A plain httpx client, as avrik's Client builds its own (its User-Agent and Accept), on the app."""
    with httpx.Client(base_url="http://omni.test", transport=ThroughTestClient(app_client),
                      headers={"User-Agent": f"avrik-sdk/{avrik_sdk.__version__}", "Accept": "application/json"}) as c:
        yield c


@pytest.fixture(scope="module")
def png() -> bytes:
    return image_bytes("PNG", "RGB", 96, 64)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def test_the_body_avriks_client_builds_is_accepted_and_its_image_is_seen(http, png):
    body = avrik_sdk.decide_body(STATE, QUESTIONS, images=[avrik_sdk.image(png)])
    assert body["images"] == [{"data": b64(png), "media_type": "image/png"}]        # the form this test is about
    r = http.post("/v1/systemone", json=body)
    assert r.status_code == 200, r.text
    wire = r.json()
    assert wire["x_usage"]["image"] > 0 and set(wire["answers"]) == set(QUESTIONS)
    assert 0.0 <= wire["answers"]["visible"]["noul"] <= 1.0
    as_data_url = http.post("/v1/systemone", json={**body, "images": [f"data:image/png;base64,{b64(png)}"]}).json()
    assert (wire["answers"], wire["x_usage"]) == (as_data_url["answers"], as_data_url["x_usage"])


def test_image_from_a_webp_file_and_jpeg_bytes_labelled_png_are_both_read_from_their_bytes(http, tmp_path):
    """`image(bytes)` always says image/png (JPEG bytes too); `image(path)` names the type by suffix. Neither is
    trusted: the format is sniffed, so both are used."""
    webp = tmp_path / "unit.webp"
    webp.write_bytes(image_bytes("WEBP"))
    images = [avrik_sdk.image(webp), avrik_sdk.image(image_bytes("JPEG"))]
    assert [i["media_type"] for i in images] == ["image/webp", "image/png"]
    one = http.post("/v1/systemone", json=avrik_sdk.decide_body(STATE, QUESTIONS, images=images[:1]))
    both = http.post("/v1/systemone", json=avrik_sdk.decide_body(STATE, QUESTIONS, images=images))
    assert one.status_code == both.status_code == 200, (one.text, both.text)
    assert both.json()["x_usage"]["image"] > one.json()["x_usage"]["image"] > 0


def test_a_bad_avrik_image_is_a_422_naming_its_place(http, png):
    body = avrik_sdk.decide_body(STATE, QUESTIONS, images=[avrik_sdk.image(png), {"data": "@@@@",
                                                                                   "media_type": "image/png"}])
    r = http.post("/v1/systemone", json=body)
    assert r.status_code == 422, r.text
    (issue,) = r.json()["detail"]
    assert issue["loc"] == ["body", "images", 1, "data"] and issue["msg"] == "invalid base64 payload"


def test_the_client_raises_its_error_type_on_a_refused_image_not_a_crash(app_client):
    with (avrik_sdk.Client("http://omni.test", transport=ThroughTestClient(app_client)) as client,
          pytest.raises(avrik_sdk.AvrikError) as info):
        client.decide(STATE, QUESTIONS, images=[{"data": "", "media_type": "image/png"}])
    error = info.value                    # read from avrik's {"error": {code, message, field}}, not guessed
    assert (error.status, error.field) == (422, "images.0.data") and error.code != "http_422"
    assert error.message.startswith("images.0.data: ") and error.request_id


def test_avriks_error_object_comes_beside_our_detail_only_for_its_client(http, app_client):
    too_many = {"state": STATE, "questions": {f"q{n}": {"type": "noul"} for n in range(65)}}
    theirs = http.post("/v1/systemone", json=too_many)
    ours = app_client.post("/v1/systemone", json=too_many)
    assert theirs.status_code == ours.status_code == 422
    assert theirs.json()["detail"] == ours.json()["detail"] and "error" not in ours.json()
    assert theirs.json()["error"]["field"] == ".".join(map(str, ours.json()["detail"][0]["loc"][1:]))


def test_avrik_client_decide_with_an_image_returns_its_decision_and_audit(app_client, png):
    with avrik_sdk.Client("http://omni.test", transport=ThroughTestClient(app_client)) as client:
        d = client.decide(STATE, QUESTIONS, images=[avrik_sdk.image(png)])
    assert 0.0 <= d["visible"].noul <= 1.0 and d["next"].choice in ("ship", "rework", "scrap")
    assert d.usage.input_tokens > 0
    record = d.x_audit                    # our own record, from which avrik's `audit` is filled
    assert d.audit.model_hash == record["model"]["sha256"] and d.audit.precision == "float32"
    assert d.audit.input_tokens == [d.usage.input_tokens] * len(QUESTIONS)
    assert len(d.audit.prompt_template_sha256) == len(d.audit.allowed_token_set_hash) == len(QUESTIONS)
    assert d.x_usage["image"] > 0          # our extra field, kept by avrik's open models


def test_the_openapi_schema_documents_the_form_in_every_slot(app_client):
    spec = app_client.get("/openapi.json").json()
    form = spec["components"]["schemas"]["DataMediaObject"]
    assert form["required"] == ["data"] and set(form["properties"]) == {"data", "media_type"}
    request = spec["components"]["schemas"]["SystemOneRequest"]["properties"]
    for slot in ("images", "audio", "videos"):
        items = next(v["items"] for v in request[slot]["anyOf"] if v.get("type") == "array")
        assert {"$ref": "#/components/schemas/DataMediaObject"} in items["anyOf"], slot
