"""Policies behind `omni serve` (the real app and engine, the FakeModel behind them: uniform answers, so a noul is
p = 0.5 -> true at confidence 0.5, a two-option choice its first option at 0.5, a three-level score level 0 at 1/3):
x_outcome on both decision routes and in the audit record; reload by the admin route and by SIGHUP's handler, a bad
file keeping the policy in force, and no response under load seeing half of one; exactly the review outcomes routed
to the review queue of their own, their labels giving the final outcome; signed webhooks to a real loopback receiver;
/metrics; every bad setting a clear error before serving."""
from __future__ import annotations

import hashlib
import json
import threading
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from api.http.app import create_app
from api.http.settings import SettingsError
from api.http.webhooks import WebhookError, verify
from omni.contract.outcomes import decide_outcome
from omni.contract.policy import PolicyError, read_policy
from tests.unit.http.serving import body, served, settings_with

POLICY = """version = "{version}"
[questions.ok]                # noul: true at 0.5
auto_at = {ok_at}
act_on = [true]
[questions.team]              # choice: billing at 0.5
auto_at = 0.5
act_on = ["tech"]
"""
SECRET = "s3cret-webhook-key-0123"


def write_policy(path: Path, version: str = "v1", ok_at: float = 0.5) -> Path:
    path.write_text(POLICY.format(version=version, ok_at=ok_at), encoding="utf-8")
    return path


@pytest.fixture
def policy_file(tmp_path) -> Path:
    return write_policy(tmp_path / "policy.toml")


def test_both_routes_carry_x_outcome_and_the_audit_names_the_policy(policy_file):
    with served(policy=str(policy_file)) as (client, _engine):
        plain = client.post("/v1/systemone", json=body(x_audit=True)).json()
        cloudflare = client.post("/accounts/a/ai/run/@cf/cloudflare/clef-omni", json=body(model="clef-omni")).json()
    policy = read_policy(policy_file)
    assert plain["x_outcome"] == decide_outcome(policy, plain["answers"]).to_wire()
    assert plain["x_outcome"]["overall"] == "act" and set(plain["x_outcome"]["questions"]) == {"ok", "team"}
    assert plain["x_outcome"]["questions"]["ok"] == {"outcome": "act", "answer": True, "confidence": 0.5,
                                                     "auto_at": 0.5}
    assert plain["x_outcome"]["questions"]["team"]["outcome"] == "pass"          # billing is not in act_on
    assert plain["x_outcome"]["policy"] == {"version": "v1",
                                            "sha256": hashlib.sha256(policy_file.read_bytes()).hexdigest()}
    assert plain["x_audit"]["policy_sha256"] == plain["x_outcome"]["policy"]["sha256"]
    assert cloudflare["result"]["x_outcome"] == plain["x_outcome"]


def test_without_a_policy_there_is_no_outcome_and_no_admin_policy():
    with served() as (client, _engine):
        assert "x_outcome" not in client.post("/v1/systemone", json=body()).json()
        assert client.get("/v1/admin/policy").status_code == 404
        assert client.post("/v1/admin/policy/reload").status_code == 404


def test_reload_by_the_route_swaps_the_policy_and_a_bad_file_keeps_the_one_in_force(policy_file):
    with served(policy=str(policy_file)) as (client, _engine):
        assert client.get("/v1/admin/policy").json()["version"] == "v1"
        write_policy(policy_file, "v2", ok_at=0.6)
        reloaded = client.post("/v1/admin/policy/reload")
        assert reloaded.status_code == 200 and reloaded.json()["version"] == "v2" and reloaded.json()["reloads"] == 1
        after = client.post("/v1/systemone", json=body()).json()["x_outcome"]
        assert after["policy"]["version"] == "v2" and after["questions"]["ok"]["outcome"] == "review"
        policy_file.write_text('version = "v3"\n[questions.ok]\nauto_at = 2\n', encoding="utf-8")
        refused = client.post("/v1/admin/policy/reload")
        assert refused.status_code == 422
        assert "questions.ok.auto_at (line 3): 2 is not a confidence" in refused.json()["detail"]["message"]
        assert client.post("/v1/systemone", json=body()).json()["x_outcome"]["policy"]["version"] == "v2"
        metrics = client.get("/metrics").text
    assert 'omni_policy_reloads_total{result="ok"} 1.0' in metrics
    assert 'omni_policy_reloads_total{result="error"} 1.0' in metrics
    assert 'omni_policy_info{sha256="' in metrics and 'version="v2"' in metrics


def test_no_response_under_load_sees_half_a_policy(policy_file):
    bars = {"v1": 0.5, "v2": 0.6}
    with served(policy=str(policy_file)) as (client, _engine):
        stop = threading.Event()

        def reloader() -> int:
            n = 0
            while not stop.is_set():
                version = "v2" if n % 2 == 0 else "v1"
                write_policy(policy_file, version, ok_at=bars[version])
                assert client.post("/v1/admin/policy/reload").status_code == 200
                n += 1
            return n

        with ThreadPoolExecutor(5) as pool:
            swaps = pool.submit(reloader)
            answers = list(pool.map(lambda i: client.post("/v1/systemone", json=body(state=f"s{i}")).json(),
                                    range(120)))
            stop.set()
            assert swaps.result() > 2
    versions = set()
    for answer in answers:
        outcome = answer["x_outcome"]
        version = outcome["policy"]["version"]
        versions.add(version)
        ok = outcome["questions"]["ok"]
        assert ok["auto_at"] == bars[version]                          # its bar is its own version's
        assert ok["outcome"] == ("act" if version == "v1" else "review")
    assert versions == {"v1", "v2"}


def test_sighup_handler_reloads(policy_file):
    import signal

    from api.cli.serve import _reload_on_sighup

    with served(policy=str(policy_file)) as (client, _engine):
        previous = signal.getsignal(signal.SIGHUP)
        try:
            _reload_on_sighup(client.app.state.service)
            write_policy(policy_file, "v-hup")
            signal.raise_signal(signal.SIGHUP)
            assert client.post("/v1/systemone", json=body()).json()["x_outcome"]["policy"]["version"] == "v-hup"
        finally:
            signal.signal(signal.SIGHUP, previous)


def test_exactly_the_review_outcomes_are_routed_and_labels_give_the_final_outcome(tmp_path):
    policy = write_policy(tmp_path / "policy.toml", ok_at=0.6)            # ok (confidence 0.5) -> review
    review = tmp_path / "review"
    only_team = {"team": body()["questions"]["team"]}
    with served(policy=str(policy), review_dir=str(review)) as (client, _engine):
        routed = [client.post("/v1/systemone", json=body(state=f"r{i}")).json() for i in range(3)]
        passed = [client.post("/v1/systemone", json={"state": f"p{i}", "questions": only_team}).json()
                  for i in range(2)]
        assert {r["x_outcome"]["overall"] for r in routed} == {"review"}
        assert {r["x_outcome"]["overall"] for r in passed} == {"pass"}
        client.__exit__(None, None, None)                                 # the kept tasks ran before the exit
        client.__enter__()
        queues = {q["id"]: q for q in client.get("/v1/review/queues").json()["queues"]}
        assert queues["policy"]["items"] == 3 and queues["kept"]["items"] == 0
        items = client.get("/v1/review/queues/policy/items").json()["items"]
        item = client.get(f"/v1/review/queues/policy/items/{items[0]['key']}").json()
        assert item["reasons"] == [{"question": "ok", "answer": True, "confidence": 0.5, "auto_at": 0.6}]
        assert item["x_outcome"]["overall"] == "review"
        saved = client.put(f"/v1/review/queues/policy/items/{items[0]['key']}/labels", json={"labels": {"ok": "true"}})
        assert saved.status_code == 200, saved.text
        client.put(f"/v1/review/queues/policy/items/{items[1]['key']}/labels", json={"labels": {"ok": "false"}})
    lines = [json.loads(line) for line in (review / "labels.jsonl").read_text().splitlines()]
    finals = {line["x_review"]["key"]: line["x_review"]["final_outcome"] for line in lines}
    assert finals[items[0]["key"]]["overall"] == "act"                 # true is in act_on
    assert finals[items[0]["key"]]["questions"]["ok"] == {"outcome": "act", "answer": True, "by": "reviewer"}
    assert finals[items[1]["key"]]["overall"] == "pass"
    assert finals[items[1]["key"]]["questions"]["team"]["by"] == "model"
    assert finals[items[1]["key"]]["policy"]["version"] == "v1"


class Receiver:
    """A real HTTP receiver on loopback: fails the first `failures` posts of each request id with 500."""

    def __init__(self, failures: int = 1):
        self.received: list[tuple[dict[str, str], bytes]] = []
        self.attempts: dict[str, int] = {}
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                data = self.rfile.read(int(self.headers["content-length"]))
                key = self.headers["idempotency-key"]
                outer.attempts[key] = outer.attempts.get(key, 0) + 1
                status = 500 if outer.attempts[key] <= failures else 204
                if status == 204:
                    outer.received.append((dict(self.headers), data))
                self.send_response(status)
                self.send_header("content-length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def test_act_and_review_decisions_are_posted_signed_once_each_after_retries(tmp_path):
    policy = write_policy(tmp_path / "policy.toml", ok_at=0.5)
    receiver = Receiver(failures=1)
    only_team = {"team": body()["questions"]["team"]}
    try:
        with served(policy=str(policy), webhook=receiver.url, webhook_secret=SECRET,
                    webhook_dead_letter=str(tmp_path / "dead.jsonl")) as (client, _engine):
            sent = {}
            for i in range(4):                       # ok acts
                r = client.post("/v1/systemone", json=body(state=f"a{i}"), headers={"x-request-id": f"act-{i}"})
                sent[f"act-{i}"] = r.json()
            for i in range(3):                       # only team: billing passes, not sent
                client.post("/v1/systemone", json={"state": f"p{i}", "questions": only_team},
                            headers={"x-request-id": f"pass-{i}"})
            metrics_before_exit = client.get("/metrics").text
    finally:
        receiver.close()
    keys = [headers["Idempotency-Key"] for headers, _ in receiver.received]
    assert sorted(set(keys)) == sorted(sent) and all(receiver.attempts[k] == 2 for k in sent)     # one retry each
    for headers, data in receiver.received:
        assert verify(SECRET, headers["X-Omni-Signature"], data)
        payload = json.loads(data)
        assert payload["request_id"] == headers["Idempotency-Key"] and payload["outcome"] == "act"
        assert payload["x_outcome"] == sent[payload["request_id"]]["x_outcome"]
        assert payload["answers"] == sent[payload["request_id"]]["answers"]
    assert not (tmp_path / "dead.jsonl").read_text()
    assert "omni_webhook_events_total" in metrics_before_exit


def test_an_unreachable_receiver_at_start_and_undeliverable_decisions_dead_lettered(tmp_path):
    policy = write_policy(tmp_path / "policy.toml")
    receiver = Receiver(failures=10)
    url = receiver.url
    receiver.close()
    with pytest.raises(WebhookError, match="cannot connect"):
        create_app(settings_with(policy=str(policy), webhook=url, webhook_secret=SECRET))
    receiver = Receiver(failures=10)                 # always 500: every try fails
    try:
        with served(policy=str(policy), webhook=receiver.url, webhook_secret=SECRET, webhook_tries=2,
                    webhook_dead_letter=str(tmp_path / "dead.jsonl")) as (client, _engine):
            for i in range(3):
                assert client.post("/v1/systemone", json=body(), headers={"x-request-id": f"d-{i}"}).status_code == 200
    finally:
        receiver.close()
    letters = [json.loads(line) for line in (tmp_path / "dead.jsonl").read_text().splitlines()]
    assert sorted(letter["request_id"] for letter in letters) == ["d-0", "d-1", "d-2"]
    assert all(letter["tries"] <= 2 for letter in letters) and not receiver.received


def test_outcome_metrics_name_the_policys_questions_and_share_a_label_for_the_rest(tmp_path):
    policy = tmp_path / "policy.toml"
    policy.write_text('version = "m1"\n[default]\nauto_at = 0.4\n[questions.ok]\nauto_at = 0.5\nact_on = [true]\n')
    with served(policy=str(policy)) as (client, _engine):
        for state in ("a", "b"):
            client.post("/v1/systemone", json=body(state=state))
        metrics = client.get("/metrics").text
    assert 'omni_outcomes_total{outcome="act",policy_version="m1",question="_overall"} 2.0' in metrics
    assert 'omni_outcomes_total{outcome="act",policy_version="m1",question="ok"} 2.0' in metrics
    assert 'omni_outcomes_total{outcome="pass",policy_version="m1",question="_default"} 2.0' in metrics   # team
    assert 'omni_outcomes_total{outcome="review",policy_version="m1",question="_default"} 2.0' in metrics  # level
    assert 'omni_outcome_confidence_bucket{le="0.5",question="ok"} 2.0' in metrics
    assert 'question="team"' not in metrics


@pytest.mark.parametrize(("values", "error", "message"), [
    ({"policy": "MISSING"}, PolicyError, "cannot read the policy"),
    ({"webhook": "http://127.0.0.1:9/h", "webhook_secret": SECRET}, SettingsError, "webhook needs policy"),
    ({"webhook": "ftp://x/h", "webhook_secret": SECRET, "policy": "P"}, SettingsError, "http:// or https://"),
    ({"webhook": "http://127.0.0.1:9/h", "policy": "P"}, SettingsError, "at least 16 characters"),
    ({"webhook": "http://127.0.0.1:9/h", "webhook_secret": SECRET, "policy": "P", "webhook_on": ("act", "maybe")},
     SettingsError, "webhook_on must name outcomes"),
])
def test_bad_policy_and_webhook_settings_stop_the_start(tmp_path, values, error, message):
    good = write_policy(tmp_path / "policy.toml")
    values = {k: (str(good) if v == "P" else str(tmp_path / "missing.toml") if v == "MISSING" else v)
              for k, v in values.items()}
    with pytest.raises(error, match=message):
        create_app(settings_with(**values))
