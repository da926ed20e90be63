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
- `opcua.py`: the OPC UA source (a node change) and sink (outcome, answers, heartbeat) (asyncua).
Only this room imports watchfiles, paho-mqtt and asyncua (the `[line]` extra). `omni/` never knows a line exists.
"""
