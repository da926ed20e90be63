"""A real MQTT broker for the line's tests: Debian's mosquitto on a free port (fixtures.mosquitto), one per module.

Where mosquitto is not installed the tests that need it are skipped, unless OMNI_REQUIRE_BROKER=1 (CI sets it:
there a missing broker is a failure, not a skip)."""
from __future__ import annotations

import os

import pytest

from fixtures.mosquitto import Mosquitto, MosquittoMissing


@pytest.fixture(scope="module")
def mosquitto(tmp_path_factory):
    try:
        broker = Mosquitto(tmp_path_factory.mktemp("mosquitto")).start()
    except MosquittoMissing as exc:
        if os.environ.get("OMNI_REQUIRE_BROKER") == "1":
            raise
        pytest.skip(str(exc))
    yield broker
    broker.stop()
