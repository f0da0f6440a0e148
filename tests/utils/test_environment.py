"""Environment helpers really patch and restore ``os.environ``; machine questions answer truthfully."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import unittest

import pytest
import torch

from accelerate.utils import environment as env
from accelerate.utils.errors import NotAvailableYetError


@pytest.mark.parametrize("text", ["1", "y", "YES", "True", "t", "on", " on "])
def test_str_to_bool_true(text: str) -> None:
    assert env.str_to_bool(text) == 1 and env.str_to_bool(text, to_bool=True) is True


@pytest.mark.parametrize("text", ["0", "n", "No", "FALSE", "f", "off"])
def test_str_to_bool_false(text: str) -> None:
    assert env.str_to_bool(text) == 0 and env.str_to_bool(text, to_bool=True) is False


def test_str_to_bool_rejects_other_text() -> None:
    with pytest.raises(ValueError, match="maybe"):
        env.str_to_bool("maybe")


def test_parse_flag_and_choice(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ACCELERATE_TEST_FLAG", raising=False)
    assert env.parse_flag_from_env("ACCELERATE_TEST_FLAG") is False
    assert env.parse_flag_from_env("ACCELERATE_TEST_FLAG", default=True) is True
    monkeypatch.setenv("ACCELERATE_TEST_FLAG", "yes")
    assert env.parse_flag_from_env("ACCELERATE_TEST_FLAG") is True
    monkeypatch.setenv("ACCELERATE_TEST_FLAG", "sometimes")
    with pytest.raises(ValueError, match="ACCELERATE_TEST_FLAG"):
        env.parse_flag_from_env("ACCELERATE_TEST_FLAG")
    assert env.parse_choice_from_env("ACCELERATE_TEST_CHOICE_UNSET") == "no"
    monkeypatch.setenv("ACCELERATE_TEST_CHOICE", "bf16")
    assert env.parse_choice_from_env("ACCELERATE_TEST_CHOICE", "fp16") == "bf16"


def test_get_int_from_env_takes_the_first_valid(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("T_A", "not a number")
    monkeypatch.setenv("T_B", "-3")
    monkeypatch.setenv("T_C", "7")
    assert env.get_int_from_env(["T_UNSET", "T_A", "T_B", "T_C"], 1) == 7
    assert env.get_int_from_env(["T_UNSET", "T_A"], 5) == 5


def test_patch_environment_sets_and_restores() -> None:
    os.environ["ACCELERATE_TEST_KEPT"] = "old"
    try:
        with env.patch_environment(accelerate_test_kept=1, accelerate_test_new="x"):
            assert os.environ["ACCELERATE_TEST_KEPT"] == "1"
            assert os.environ["ACCELERATE_TEST_NEW"] == "x"
        assert os.environ["ACCELERATE_TEST_KEPT"] == "old"
        assert "ACCELERATE_TEST_NEW" not in os.environ
        with pytest.raises(RuntimeError), env.patch_environment(accelerate_test_kept="2"):
            raise RuntimeError("boom")
        assert os.environ["ACCELERATE_TEST_KEPT"] == "old"
    finally:
        del os.environ["ACCELERATE_TEST_KEPT"]


def test_clear_environment_empties_and_restores_the_same_object() -> None:
    environ = os.environ
    before = dict(os.environ)
    with env.clear_environment():
        assert len(os.environ) == 0
        os.environ["ONLY_INSIDE"] = "1"
    assert os.environ is environ
    assert dict(os.environ) == before


def test_purge_accelerate_environment_on_a_function() -> None:
    os.environ["ACCELERATE_TEST_CHANGED"] = "before"
    try:

        @env.purge_accelerate_environment
        def sets_vars() -> str:
            os.environ["ACCELERATE_TEST_PURGED"] = "1"
            os.environ["ACCELERATE_TEST_CHANGED"] = "after"
            return "ran"

        assert sets_vars() == "ran"
        assert "ACCELERATE_TEST_PURGED" not in os.environ
        assert os.environ["ACCELERATE_TEST_CHANGED"] == "before"
    finally:
        del os.environ["ACCELERATE_TEST_CHANGED"]


def test_purge_accelerate_environment_on_a_testcase() -> None:
    @env.purge_accelerate_environment
    class Case(unittest.TestCase):
        def setUp(self) -> None:
            os.environ["ACCELERATE_TEST_FROM_SETUP"] = "1"

        def test_sees_setup(self) -> None:
            os.environ["ACCELERATE_TEST_FROM_TEST"] = "1"
            assert os.environ["ACCELERATE_TEST_FROM_SETUP"] == "1"

    result = unittest.TestResult()
    Case("test_sees_setup").run(result)
    assert result.wasSuccessful(), result.failures + result.errors
    assert "ACCELERATE_TEST_FROM_SETUP" not in os.environ and "ACCELERATE_TEST_FROM_TEST" not in os.environ


def test_purge_accelerate_environment_on_a_plain_class() -> None:
    @env.purge_accelerate_environment
    class Plain:
        def test_one(self) -> None:
            os.environ["ACCELERATE_TEST_PLAIN"] = "1"

    Plain().test_one()
    assert "ACCELERATE_TEST_PLAIN" not in os.environ


def test_convert_dict_to_env_variables_skips_unsafe_entries(caplog: pytest.LogCaptureFixture) -> None:
    lines = env.convert_dict_to_env_variables({"A": "1", "B": "two words", "C": "x;rm -rf", "D": 3, "E": ""})
    assert lines == ["A=1\n", "D=3\n", "E=\n"]
    assert "'B'" in caplog.text and "'C'" in caplog.text


def test_cpu_distributed_information_reads_torchrun_and_mpi_variables() -> None:
    with env.clear_environment():
        assert env.get_cpu_distributed_information() == env.CPUInformation(0, 1, 0, 1)
        with env.patch_environment(rank=3, world_size=8, local_rank=1, local_world_size=4):
            assert env.get_cpu_distributed_information() == env.CPUInformation(3, 8, 1, 4)
        with env.patch_environment(
            pmi_rank=2, pmi_size=4, mpi_localrankid=0, mpi_localnranks=2
        ):  # Intel MPI / MPICH
            assert env.get_cpu_distributed_information() == env.CPUInformation(2, 4, 0, 2)


def test_are_libraries_initialized() -> None:
    assert env.are_libraries_initialized("torch", "no_such_library_12345") == ["torch"]


def test_gpu_questions_answer_truthfully() -> None:
    names, count = env.get_gpu_info()
    assert count == len(names)
    if shutil.which("nvidia-smi") is None:
        assert (names, count) == ([], 0)
        assert env.get_driver_version() is None
        assert env.check_cuda_p2p_ib_support() is True
    else:
        listed = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True).stdout
        assert count == sum(1 for line in listed.splitlines() if line.startswith("GPU "))
    fp8 = torch.cuda.is_available() and torch.cuda.get_device_capability() >= (8, 9)
    assert env.check_cuda_fp8_capability() is fp8


def test_current_device_type() -> None:
    expected = ("cuda", "MULTI_GPU") if torch.cuda.is_available() else ("cpu", "MULTI_CPU")
    if not torch.cuda.is_available() and torch.xpu.is_available():
        expected = ("xpu", "MULTI_XPU")
    assert env.get_current_device_type() == expected


def test_numa_affinity_needs_an_nvidia_gpu() -> None:
    from accelerate.utils.imports import is_pynvml_available

    if torch.cuda.is_available() and is_pynvml_available():
        pytest.skip("this machine can set NUMA affinity; covered by the GPU run")
    with pytest.raises(NotAvailableYetError, match="NUMA affinity.*NVIDIA GPU.*pynvml"):
        env.override_numa_affinity(0)
    with pytest.raises(NotAvailableYetError):
        env.set_numa_affinity(0)


def test_environment_module_imports_without_torch() -> None:
    code = "import sys; import accelerate.utils.environment; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_purge_restores_the_environment_when_set_up_fails() -> None:
    # unittest skips tearDown when setUp raises; what setUp exported must still go.
    @env.purge_accelerate_environment
    class Case(unittest.TestCase):
        def setUp(self) -> None:
            os.environ["ACCELERATE_TEST_SETUP_FAILED"] = "1"
            raise RuntimeError("setUp fails")

        def test_never_runs(self) -> None:
            raise AssertionError("unreachable")

    result = unittest.TestResult()
    Case("test_never_runs").run(result)
    assert len(result.errors) == 1
    assert "ACCELERATE_TEST_SETUP_FAILED" not in os.environ


def test_purge_keeps_variables_set_before_when_a_subclass_skips_super() -> None:
    os.environ["ACCELERATE_TEST_OUTSIDE"] = "kept"
    try:

        @env.purge_accelerate_environment
        class Base(unittest.TestCase):
            pass

        class Child(Base):
            def setUp(self) -> None:  # no super().setUp()
                os.environ["ACCELERATE_TEST_CHILD"] = "1"

            def tearDown(self) -> None:  # no super().tearDown()
                pass

            def test_fails(self) -> None:
                os.environ["ACCELERATE_TEST_OUTSIDE"] = "changed"
                raise AssertionError("the test fails")

        result = unittest.TestResult()
        Child("test_fails").run(result)
        assert len(result.failures) == 1
        assert "ACCELERATE_TEST_CHILD" not in os.environ
        assert os.environ["ACCELERATE_TEST_OUTSIDE"] == "kept"
    finally:
        del os.environ["ACCELERATE_TEST_OUTSIDE"]


def test_purge_on_a_plain_base_class_covers_its_subclasses_tests() -> None:
    @env.purge_accelerate_environment
    class Base:
        pass

    class Child(Base):
        def test_sets(self) -> None:
            os.environ["ACCELERATE_TEST_SUBCLASS"] = "1"
            raise ValueError("the test fails")

    with pytest.raises(ValueError, match="the test fails"):
        Child().test_sets()
    assert "ACCELERATE_TEST_SUBCLASS" not in os.environ
