"""The line's /health, /status and /metrics over a real runner: `ok` while every source and sink is connected,
`degraded` naming the parts that are down, 503 once the line stops; each part's own figures on /metrics."""
from __future__ import annotations

from fastapi.testclient import TestClient

from api.line.ledger import Ledger
from api.line.runner import LineRunner
from api.line.status_http import status_app


class Part:
    def __init__(self, name: str):
        self.name, self.connected = name, 1

    def stats(self) -> dict[str, float]:
        return {"connected": self.connected, "reconnects": 2}


def test_health_says_which_part_is_down_and_metrics_carry_each_parts_figures(tmp_path):
    source, sink = Part("mqtt:broker/cell-4/ready"), Part("opcua:plc#Verdict")
    runner = LineRunner(line="cell-4", decider=None, ledger=Ledger(tmp_path / "ledger.jsonl"),  # type: ignore[arg-type]
                        sources=[source], sinks=[sink], deadline_ms=1000, fallback="review", max_queued_units=4,
                        max_in_flight=1)
    client = TestClient(status_app(runner))
    runner.running = True
    assert client.get("/health").json() == {"status": "ok", "line": "cell-4", "down": []}
    sink.connected = 0
    health = client.get("/health")
    assert health.status_code == 200 and health.json()["status"] == "degraded"
    assert health.json()["down"] == ["opcua:plc#Verdict"]
    status = client.get("/status").json()
    assert status["down"] == ["opcua:plc#Verdict"] and status["ledger_decided"] == 0 and status["running"] is True
    metrics = client.get("/metrics").text
    assert 'omni_line_source_stat_reconnects{source="mqtt:broker/cell-4/ready"} 2.0' in metrics, metrics
    assert 'omni_line_sink_stat_connected{sink="opcua:plc#Verdict"} 0.0' in metrics, metrics
    runner.running = False
    stopped = client.get("/health")
    assert stopped.status_code == 503 and stopped.json()["status"] == "stopped"
