"""The line edge: `omni line CONFIG.toml` — decisions triggered by an inspection line and answered to it.

Sources (a watched folder, MQTT, OPC UA) turn the line's events into units; each unit is decided once (the ledger),
within its deadline, by an engine in this process or a running `omni serve`; its result goes to the sinks (MQTT,
OPC UA, webhooks) at least once, keyed by the unit id.

- `ports.py`: `Trigger`, `Result`, the `Source` and `Sink` protocols, `Backoff`, unit id rules;
- `config_reader.py`: typed getters over an operator's TOML whose errors name the file, line and key;
- `config.py`: `read_line_config`: the line's file checked; source and sink tables read by their own modules;
- `paths.py`: files a unit names, kept under the line's root (no `..`, no links, regular files only);
- `folder.py`: the folder-watch source (watchfiles): a subfolder or files sharing a stem, complete by a marker file
  or a quiet period;
- `mqtt.py`: the MQTT source (QoS 1, acknowledged only once the unit is in the ledger) and sink (paho-mqtt);
- `opcua.py`: the OPC UA source (a node change) and sink (outcome, answers, heartbeat) (asyncua);
- `webhook_sink.py`: the existing signed webhooks as a sink;
- `deciders.py`: a unit as a System One request, answered by an engine here or a running `omni serve`;
- `ledger.py`: the JSONL ledger (decided, published, refused, late), fsynced; read back at start;
- `runner.py`: `LineRunner`: triggers → one settle per unit (decided, timeout, overload, error) → ledger → sinks;
- `stats.py`: the line's counters, as `/status` JSON and Prometheus text;
- `status_http.py`: `/metrics`, `/health`, `/status` (FastAPI under uvicorn, beside the line);
- `status_screen.py`: `omni line --status`: that status on one screen (rich).
Only this room imports watchfiles, paho-mqtt and asyncua (the `[line]` extra). `omni/` never knows a line exists.
"""
