"""ClefModel, loaded from a tiny checkpoint, is both a DecisionModel and a TrainableModel (the declared surfaces of
omni/model/surface.py), and its records are PreparedInputs."""
from __future__ import annotations

from omni.contract.config import EngineConfig
from omni.contract.request import parse_request
from omni.model.clef import ClefModel
from omni.model.surface import DecisionModel, PreparedInputs, TrainableModel


def test_clef_model_satisfies_the_model_surfaces(tiny_dir):
    model = ClefModel.load(tiny_dir)
    assert isinstance(model, DecisionModel) and isinstance(model, TrainableModel)
    record = model.prepare(parse_request({"state": "s", "questions": {"q": {"type": "noul"}}}, EngineConfig()))
    assert isinstance(record, PreparedInputs)
    assert record.num_tokens == sum(record.tokens_by_modality.values())
