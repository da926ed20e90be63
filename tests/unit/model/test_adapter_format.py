"""adapter.json: written for the files there, read back validated; every bad manifest, name and file is an AdapterError
naming the adapter and the cause."""
import json

import pytest

from omni.contract.errors import AdapterError
from omni.model.adapter_format import (
    ADAPTER_FORMAT,
    HEAD_FILE,
    LORA_CONFIG_FILE,
    LORA_WEIGHTS_FILE,
    MANIFEST_FILE,
    AdapterManifest,
    LoraSpec,
    adapter_sha256,
    check_adapter_name,
    check_files,
    read_manifest,
    write_manifest,
)

BASE = "ab" * 32


@pytest.fixture
def head_adapter(tmp_path):
    folder = tmp_path / "line-3"
    folder.mkdir()
    (folder / HEAD_FILE).write_bytes(b"head weights " * 100)
    write_manifest(folder, AdapterManifest(BASE, "head", {"hidden_size": 64, "width": 32}))
    return folder


@pytest.fixture
def lora_adapter(tmp_path):
    folder = tmp_path / "policy-a"
    folder.mkdir()
    for name in (HEAD_FILE, LORA_CONFIG_FILE, LORA_WEIGHTS_FILE):
        (folder / name).write_bytes(name.encode() * 10)
    write_manifest(folder, AdapterManifest(BASE, "lora", {"hidden_size": 64}, LoraSpec(16, 32.0, ("q_proj", "v_proj"))))
    return folder


def rewrite(folder, **changes):
    body = json.loads((folder / MANIFEST_FILE).read_text())
    body.update(changes)
    (folder / MANIFEST_FILE).write_text(json.dumps(body))


def test_a_written_manifest_reads_back_with_every_file_listed(head_adapter, lora_adapter):
    manifest = read_manifest(head_adapter)
    assert manifest.format == ADAPTER_FORMAT
    assert manifest.base_sha256 == BASE
    assert manifest.mode == "head"
    assert set(manifest.files) == {HEAD_FILE}
    assert manifest.files[HEAD_FILE].bytes == 1300
    assert manifest.created.endswith("Z")
    check_files(head_adapter, manifest)
    lora = read_manifest(lora_adapter)
    assert lora.lora == LoraSpec(16, 32.0, ("q_proj", "v_proj"))
    assert set(lora.files) == {HEAD_FILE, LORA_CONFIG_FILE, LORA_WEIGHTS_FILE}
    check_files(lora_adapter, lora)


@pytest.mark.parametrize(("changes", "cause"), [
    ({"format": "omni-adapter/9"}, "format 'omni-adapter/9' is not"),
    ({"mode": "full"}, "mode must be one of head, lora, not 'full'"),
    ({"base_sha256": "abc"}, "base_sha256 must be 64 hex digits"),
    ({"base_sha256": None}, "'base_sha256' is missing"),
    ({"head_config": []}, "'head_config' is missing or not a dict"),
    ({"files": None}, "'files' must map file names"),
    ({"files": {}}, f"does not list {HEAD_FILE}"),
    ({"files": {"../x": {"bytes": 1, "sha256": "0"}}}, "must be a plain name"),
    ({"files": {"a/b": {"bytes": 1, "sha256": "0"}}}, "must be a plain name"),
    ({"files": {HEAD_FILE: {"bytes": "1", "sha256": "0"}}}, "must be a plain name with bytes and sha256"),
])
def test_a_bad_manifest_is_refused_naming_the_adapter_and_the_field(head_adapter, changes, cause):
    rewrite(head_adapter, **changes)
    with pytest.raises(AdapterError) as raised:
        read_manifest(head_adapter)
    assert raised.value.adapter == "line-3"
    assert cause in raised.value.cause


@pytest.mark.parametrize(("lora", "cause"), [
    (None, "needs 'lora'"), ({"rank": 0, "alpha": 1, "targets": ["q_proj"]}, "rank >= 1"),
    ({"rank": 4, "alpha": 1, "targets": []}, "non-empty list of targets"),
    ({"rank": True, "alpha": 1, "targets": ["q_proj"]}, "'rank' is missing or not a int"),
])
def test_a_lora_manifest_needs_rank_alpha_and_targets(lora_adapter, lora, cause):
    rewrite(lora_adapter, lora=lora)
    with pytest.raises(AdapterError, match="policy-a") as raised:
        read_manifest(lora_adapter)
    assert cause in raised.value.cause


def test_a_lora_manifest_must_list_the_peft_files(lora_adapter):
    body = json.loads((lora_adapter / MANIFEST_FILE).read_text())
    del body["files"][LORA_WEIGHTS_FILE]
    (lora_adapter / MANIFEST_FILE).write_text(json.dumps(body))
    with pytest.raises(AdapterError, match=f"does not list {LORA_WEIGHTS_FILE}"):
        read_manifest(lora_adapter)


def test_no_manifest_or_no_json_is_refused(tmp_path, head_adapter):
    with pytest.raises(AdapterError, match="has no adapter.json: not an adapter folder"):
        read_manifest(tmp_path)
    (head_adapter / MANIFEST_FILE).write_text("{not json")
    with pytest.raises(AdapterError, match="does not read as JSON"):
        read_manifest(head_adapter)
    (head_adapter / MANIFEST_FILE).write_text("[1, 2]")
    with pytest.raises(AdapterError, match="must hold an object"):
        read_manifest(head_adapter)


def test_a_missing_truncated_or_changed_file_is_named(lora_adapter):
    manifest = read_manifest(lora_adapter)
    weights = lora_adapter / LORA_WEIGHTS_FILE
    whole = weights.read_bytes()
    weights.write_bytes(whole[:-3])
    with pytest.raises(AdapterError, match=f"{LORA_WEIGHTS_FILE} has {len(whole) - 3} bytes, adapter.json says "
                                           f"{len(whole)} \\(truncated"):
        check_files(lora_adapter, manifest)
    weights.write_bytes(whole[:-1] + b"!")
    with pytest.raises(AdapterError, match=f"{LORA_WEIGHTS_FILE} does not match its sha256"):
        check_files(lora_adapter, manifest)
    weights.unlink()
    with pytest.raises(AdapterError, match=f"{LORA_WEIGHTS_FILE} is missing") as raised:
        check_files(lora_adapter, manifest)
    assert raised.value.adapter == "policy-a"


def test_writing_a_manifest_without_its_files_is_refused(tmp_path):
    with pytest.raises(AdapterError, match=f"{HEAD_FILE} is missing: an adapter of mode head needs it"):
        write_manifest(tmp_path, AdapterManifest(BASE, "head", {}))


def test_the_adapter_sha256_changes_with_any_file(lora_adapter):
    manifest = read_manifest(lora_adapter)
    before = adapter_sha256(lora_adapter, manifest)
    assert before == adapter_sha256(lora_adapter, read_manifest(lora_adapter))
    (lora_adapter / LORA_CONFIG_FILE).write_bytes(b"other")
    after = adapter_sha256(lora_adapter, write_manifest(lora_adapter, manifest))
    assert after != before


@pytest.mark.parametrize("name", ["line-3", "policy_a.v2", "A", "x" * 64])
def test_good_adapter_names(name):
    assert check_adapter_name(name) == name


@pytest.mark.parametrize("name", ["", "a/b", "..", "a..b", "../etc", ".hidden", "-x", "a b", "tab\there", "nl\n",
                                  "bell\x07", "é", "x" * 65, None])
def test_bad_adapter_names_are_refused(name):
    with pytest.raises(AdapterError):
        check_adapter_name(name)
