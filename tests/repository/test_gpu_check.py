"""make gpu-check: on a machine without CUDA it says so and succeeds; its code runs end to end on
the CPU at toy sizes, so the script a GPU user runs is not first executed on their machine."""

import json

import pytest
import torch

from benchmarks import gpu_check


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA: the real check runs instead")
def test_without_cuda_it_says_so_and_exits_0(capsys):
    assert gpu_check.main([]) == 0
    assert "no CUDA device on this machine; nothing to check" in capsys.readouterr().out


@pytest.mark.slow
def test_the_check_runs_end_to_end_at_toy_sizes_on_cpu(tmp_path, capsys):
    assert gpu_check.main(["--device", "cpu", "--quick", "--out", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "gpu-check.json").read_text())
    assert {row["encoding"] for row in report["flex"]} == {"alibi", "t5", "shaw", "kerple", "fire"}
    assert all(row["forward_max_error"] < 1e-5 for row in report["flex"])
    assert [row["encoding"] for row in report["training"]] == ["alibi"]  # --quick: one; the real check trains every one
    assert all(row["tokens_per_s"] > 0 and row["estimate_gib"] > 0 for row in report["training"])
    assert report["alibi_long"]["ratio"] > 0
    out = capsys.readouterr().out
    assert "flex fire @ 96" in out and "alibi @ 512" in out
