"""The sim_cost experiment runs its variants side by side and leaves dispatch as it was."""

from experiments import sim_cost
from learn_parallel.sim import SimTensor


def test_sim_cost_measures_four_variants_and_restores_the_dispatch():
    dispatch = SimTensor.__dict__["__torch_dispatch__"]
    result = sim_cost.measure(width=8, batch=4, rounds=2, steps=1)
    names = ["cpu", "wrapper on cpu", "sim:0, bare dispatch", "sim:0"]
    assert list(result["ratios"]) == names
    assert all(len(result["times_ms"][n]) == 2 for n in names)
    assert result["ratios"]["cpu"] == [1.0, 1.0]
    assert SimTensor.__dict__["__torch_dispatch__"] is dispatch
    assert "sim:0, bare dispatch" in sim_cost.table(result)
