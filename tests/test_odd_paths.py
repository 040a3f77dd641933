"""Paths with odd names (issue #31, defect 10): a database folder whose name holds a newline leaves no
``trace.json.tmp`` behind after a profiled torch cell (Kineto renamed its temporary file to a name
stripped of the newline, and failed)."""

from dlbench.frameworks.torch.profiler import torch_profile
from tests.conftest import requires


@requires("torch")
def test_a_torch_trace_under_a_folder_named_with_a_newline_is_written_whole(tmp_path):
    import torch

    outdir = tmp_path / "results\nfolder" / "profile"
    outdir.mkdir(parents=True)
    trace = torch_profile(lambda: torch.ones(8) @ torch.ones(8), 2, outdir)
    assert trace.path == outdir / "trace.json" and trace.path.is_file()
    assert sorted(p.name for p in outdir.iterdir()) == ["trace.json"]
    assert trace.ops  # the operations were read from the moved trace
