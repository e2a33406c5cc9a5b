"""``python -m minidl.info``: the facts dict, the forced-kernel check (a pure function of the environment, the
CPU flags and the BLAS libraries, fed fakes here) and the command itself. The machine's own variables are left
as they are."""

import json
import subprocess
import sys

import numpy as np
import pytest

from minidl.tools import info

AVX512 = {"sse4_2", "avx", "avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_bf16", "amx_tile"}
AVX2 = {"sse4_2", "avx", "avx2", "fma"}


def openblas(arch: str) -> list[dict]:
    return [{"user_api": "blas", "internal_api": "openblas", "version": "0.3.31", "architecture": arch}]


def test_haswell_forced_on_an_avx512_cpu_is_named_with_the_command_without_it():
    env = {"OPENBLAS_CORETYPE": "Haswell", "OPENBLAS_L2_SIZE": "1048576"}
    (warning,) = info.kernel_warnings(env, AVX512, openblas("Haswell"))
    assert "OPENBLAS_CORETYPE=Haswell" in warning and "AVX-512" in warning
    assert "env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python" in warning


@pytest.mark.parametrize(
    "env, flags, arch",
    [
        ({"OPENBLAS_CORETYPE": "Haswell"}, AVX2, "Haswell"),  # the CPU has nothing wider: nothing lost
        ({"OPENBLAS_CORETYPE": "SkylakeX"}, AVX512, "SkylakeX"),
        ({}, AVX512, "SkylakeX"),  # OpenBLAS's own choice
        ({}, AVX2, "Zen"),
        ({"OPENBLAS_CORETYPE": "Haswell"}, set(), "Haswell"),  # flags unknown (not Linux): no claim
        ({"MKL_ENABLE_INSTRUCTIONS": "AVX512"}, AVX512, "SkylakeX"),
        ({"MKL_CBWR": "AUTO"}, AVX512, "SkylakeX"),
    ],
)
def test_no_warning_when_the_kernel_matches_the_cpu(env, flags, arch):
    assert info.kernel_warnings(env, flags, openblas(arch)) == []


def test_a_build_that_does_not_know_the_cpu_is_named_without_a_variable():
    (warning,) = info.kernel_warnings({}, AVX512, openblas("Haswell"))
    assert "runs its Haswell kernel (AVX2) on a CPU with AVX-512" in warning and "OPENBLAS_CORETYPE" not in warning


@pytest.mark.parametrize("name, value", [("MKL_ENABLE_INSTRUCTIONS", "AVX2"), ("MKL_CBWR", "COMPATIBLE")])
def test_mkl_limited_below_the_cpu_is_named(name, value):
    (warning,) = info.kernel_warnings({name: value}, AVX512, openblas("SkylakeX"))
    assert f"{name}={value}" in warning and f"-u {name}" in warning


def test_isa_levels_and_names():
    assert info.isa_level(AVX512) == 3 and info.isa_level(AVX2) == 2 and info.isa_level({"avx"}) == 1
    assert info.isa_level({"sse2"}) == 0 and info.isa_level(set()) is None
    assert info.vector_isa(AVX512) == ["AVX", "AVX2", "FMA", "AVX-512", "AVX-512 BF16", "AMX"]


def test_cpu_fields_from_a_cpuinfo_file(tmp_path):
    path = tmp_path / "cpuinfo"
    first = "processor\t: 0\ncpu family\t: 25\nmodel\t\t: 1\nmodel name\t: AMD EPYC\nflags\t\t: fpu avx avx2 fma\n"
    path.write_text(first + "\nprocessor\t: 1\nmodel name\t: another\n")
    assert info.cpu_model(str(path)) == "AMD EPYC (family 25 model 1)"
    assert info.cpu_flags(str(path)) == {"fpu", "avx", "avx2", "fma"} and info.isa_level(info.cpu_flags(str(path))) == 2
    assert info.cpu_flags(str(tmp_path / "absent")) == set()


def test_facts_describe_this_process(monkeypatch):
    monkeypatch.setattr(info, "mpi_library", lambda: "MPICH Version: 5")  # the child Python is tested below
    facts = info.machine_facts(sgemm_n=64)
    assert facts["numpy"] == np.__version__ and json.loads(json.dumps(facts)) == facts
    assert facts["blas"] and {"internal_api", "architecture", "version", "num_threads"} <= set(facts["blas"][0])
    assert facts["cpu"]["cores"] >= 1 and facts["cpu"]["model"]
    assert facts["sgemm"]["n"] == 64 and facts["sgemm"]["gflops"] > 0
    lines = info.header_lines(facts)
    assert any(facts["blas"][0]["architecture"] in line for line in lines)
    assert any(line.startswith("sgemm 64^3 float32, 1 thread") for line in lines)


def test_header_carries_the_warnings():
    facts = {
        "numpy": "2",
        "blas": [{**openblas("Haswell")[0], "num_threads": 1, "file": "libopenblas.so", "threading_layer": "x"}],
        "cpu": {"model": "EPYC", "isa": ["AVX-512"], "cores": 2, "usable_cores": 2},
        "threads": {},
        "kernel_env": {"OPENBLAS_CORETYPE": "Haswell"},
        "mpi": None,
        "sgemm": None,
        "warnings": info.kernel_warnings({"OPENBLAS_CORETYPE": "Haswell"}, AVX512, openblas("Haswell")),
    }
    lines = info.header_lines(facts)
    assert "kernel Haswell" in lines[1] and "OPENBLAS_CORETYPE=Haswell" in lines[2]
    assert lines[-1].startswith("warning: OPENBLAS_CORETYPE=Haswell")


def test_command_runs_quick():
    done = subprocess.run([sys.executable, "-m", "minidl.info", "--quick"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "GFLOP/s" in done.stdout and "kernel" in done.stdout and "MPI: " in done.stdout
    assert "mpi4py not installed" not in done.stdout  # the child Python found the MPI library
