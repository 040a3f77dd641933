"""The CPU's description is read with py-cpuinfo once per boot of the machine, not once per command:
py-cpuinfo starts a Python of its own to read CPUID (about a second of every ``dlbench run`` and
``--dry-run``). What dlbench makes of it (the SIMD flags it keeps, the precisions the CPU supports) is
worked out afresh each time; a failure is recorded and never kept."""

from __future__ import annotations

import json

import cpuinfo
import pytest

from dlbench.measure import environment

ANSWER = {"brand_raw": "Planted CPU 9000", "arch_string_raw": "x86_64", "hz_advertised_friendly": "2.0 GHz",
          "flags": ["avx2", "avx512_bf16", "avx512f", "fma", "sse2"], "l2_cache_size": 1 << 20}


@pytest.fixture
def reads(monkeypatch, tmp_path):
    """py-cpuinfo replaced by a counted stand-in, the kept file in tmp_path, this boot ``boot-a``."""
    calls = []
    monkeypatch.setenv("DLBENCH_CPU_INFO", str(tmp_path / "cpu-info.json"))
    monkeypatch.setattr(cpuinfo, "get_cpu_info", lambda: calls.append(1) or dict(ANSWER))
    monkeypatch.setattr(environment, "_boot_id", lambda: "boot-a")
    environment._cpu_info.cache_clear()
    yield calls
    environment._cpu_info.cache_clear()


def _fresh_process() -> dict:
    """``cpu_info`` as a new command would see it (the per-process memo forgotten)."""
    environment._cpu_info.cache_clear()
    return environment.cpu_info()


def test_a_second_command_in_the_same_boot_reads_the_kept_answer(reads, tmp_path):
    first = _fresh_process()
    assert first["model"] == "Planted CPU 9000" and first["flags"] == ["avx2", "avx512_bf16", "avx512f", "fma"]  # SIMD
    assert _fresh_process() == first and len(reads) == 1
    kept = json.loads((tmp_path / "cpu-info.json").read_text())
    assert list(kept) == [f"boot-a/py-cpuinfo {cpuinfo.CPUINFO_VERSION_STRING}"]
    assert set(next(iter(kept.values()))) == set(environment.CPUINFO_FIELDS)  # only what dlbench reads


def test_another_boot_reads_the_cpu_again(reads, monkeypatch):
    _fresh_process()
    monkeypatch.setattr(environment, "_boot_id", lambda: "boot-b")
    _fresh_process()
    assert len(reads) == 2


def test_what_dlbench_makes_of_the_answer_is_worked_out_afresh(reads, tmp_path):
    """A kept answer holds py-cpuinfo's flags, not dlbench's reading of them: a newer dlbench reading them
    otherwise is not held to an older one's."""
    key = f"boot-a/py-cpuinfo {cpuinfo.CPUINFO_VERSION_STRING}"
    (tmp_path / "cpu-info.json").write_text(json.dumps({key: {**ANSWER, "flags": ["sse2"]}}))
    info = _fresh_process()
    assert reads == [] and info["flags"] == [] and info["precision"] == environment.cpu_support({"sse2"})
    (tmp_path / "cpu-info.json").write_text(json.dumps({key: ANSWER}))
    assert _fresh_process()["precision"] == environment.cpu_support(set(ANSWER["flags"]))


@pytest.mark.parametrize("text", ["garbage", "[]", '{"boot-a/py-cpuinfo 9.0.0": "x"}', '{"k": {"flags": 3}}'])
def test_an_unreadable_kept_file_is_read_again_and_replaced(reads, tmp_path, text):
    (tmp_path / "cpu-info.json").write_text(text)
    assert _fresh_process()["model"] == "Planted CPU 9000" and len(reads) == 1
    _fresh_process()
    assert len(reads) == 1


def test_off_keeps_nothing(reads, monkeypatch, tmp_path):
    monkeypatch.setenv("DLBENCH_CPU_INFO", "off")
    _fresh_process()
    _fresh_process()
    assert len(reads) == 2 and not (tmp_path / "cpu-info.json").exists()


def test_a_failure_is_recorded_and_never_kept(reads, monkeypatch, tmp_path):
    def broken():
        raise RuntimeError("planted CPUID failure")

    monkeypatch.setattr(cpuinfo, "get_cpu_info", broken)
    info = _fresh_process()
    assert info["error"] == "planted CPUID failure" and not (tmp_path / "cpu-info.json").exists()
