"""The availability probes answer what is really installed here, without importing it."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import subprocess
import sys

import pytest
import torch
from packaging.version import parse

from accelerate.utils import imports

# probe name -> the import names it looks for (any of them).
PACKAGE_PROBES = {
    "is_aim_available": ["aim"],
    "is_amdsmi_available": ["amdsmi"],
    "is_boto3_available": ["boto3"],
    "is_clearml_available": ["clearml"],
    "is_comet_ml_available": ["comet_ml"],
    "is_datasets_available": ["datasets"],
    "is_deepspeed_available": ["deepspeed"],
    "is_dvclive_available": ["dvclive"],
    "is_import_timer_available": ["import_timer"],
    "is_lomo_available": ["lomo_optim"],
    "is_matplotlib_available": ["matplotlib"],
    "is_mlflow_available": ["mlflow"],
    "is_msamp_available": ["msamp"],
    "is_pandas_available": ["pandas"],
    "is_peft_available": ["peft"],
    "is_pynvml_available": ["pynvml"],
    "is_pytest_available": ["pytest"],
    "is_sagemaker_available": ["sagemaker"],
    "is_schedulefree_available": ["schedulefree"],
    "is_swanlab_available": ["swanlab"],
    "is_tensorboard_available": ["tensorboard", "tensorboardX"],
    "is_timm_available": ["timm"],
    "is_torchdata_available": ["torchdata"],
    "is_torchvision_available": ["torchvision"],
    "is_tqdm_available": ["tqdm"],
    "is_trackio_available": ["trackio"],
    "is_transformer_engine_available": ["transformer_engine"],
    "is_transformers_available": ["transformers"],
    "is_triton_available": ["triton"],
    "is_wandb_available": ["wandb"],
}


def _installed(name: str) -> bool:
    return importlib.util.find_spec(name) is not None


def _version_ok(dist: str, minimum: str) -> bool:
    try:
        return parse(importlib.metadata.version(dist)) >= parse(minimum)
    except importlib.metadata.PackageNotFoundError:
        return False


@pytest.mark.parametrize("probe, modules", sorted(PACKAGE_PROBES.items()))
def test_package_probe_agrees_with_find_spec(probe: str, modules: list[str]) -> None:
    assert getattr(imports, probe)() is any(_installed(m) for m in modules)


def test_probes_see_both_answers_here() -> None:
    # The environment has some optional packages and lacks others, so both branches are exercised.
    assert (
        imports.is_pytest_available() and imports.is_tqdm_available() and imports.is_transformers_available()
    )
    assert not imports.is_deepspeed_available() or _installed("deepspeed")
    assert imports.is_package_available("no_such_package_here_12345") is False
    assert imports.is_package_available("no_such_parent_12345.child") is False


def test_versioned_probes() -> None:
    assert imports.is_numpy_available() is (_installed("numpy") and _version_ok("numpy", "1.25.0"))
    assert imports.is_numpy_available(min_version="0.1") is _installed("numpy")
    assert imports.is_numpy_available(min_version="999.0") is False
    assert imports.is_bnb_available() is _installed("bitsandbytes")
    assert imports.is_4bit_bnb_available() is (
        _installed("bitsandbytes") and _version_ok("bitsandbytes", "0.39.0")
    )
    assert imports.is_8bit_bnb_available() is (
        _installed("bitsandbytes") and _version_ok("bitsandbytes", "0.37.2")
    )
    assert imports.is_torchao_available() is (_installed("torchao") and _version_ok("torchao", "0.6.1"))
    assert imports.is_weights_only_available() is _version_ok("torch", "2.4.0")
    assert imports.is_pippy_available() is _version_ok("torch", "2.4.0")
    assert imports.is_megatron_lm_available() is (_installed("megatron") and _installed("megatron.core"))
    fp8 = _installed("msamp") or _installed("transformer_engine") or imports.is_torchao_available()
    assert imports.is_fp8_available() is fp8


def test_device_probes_agree_with_torch() -> None:
    assert imports.is_cuda_available() is torch.cuda.is_available()
    assert imports.is_xpu_available() is torch.xpu.is_available()
    assert imports.is_mps_available() is (torch.backends.mps.is_available() and torch.backends.mps.is_built())
    assert imports.is_rocm_available() is (torch.version.hip is not None)
    assert imports.is_torch_distributed_available() is torch.distributed.is_available()
    assert imports.is_torch_xla_available() is _installed("torch_xla")
    for probe, extension in [
        (imports.is_npu_available, "torch_npu"),
        (imports.is_mlu_available, "torch_mlu"),
        (imports.is_musa_available, "torch_musa"),
        (imports.is_sdaa_available, "torch_sdaa"),
        (imports.is_neuron_available, "torch_neuronx"),
        (imports.is_hpu_available, "habana_frameworks"),
    ]:
        if not _installed(extension):
            assert probe() is False and probe(True) is False
    bf16 = not torch.cuda.is_available() or torch.cuda.is_bf16_supported()
    assert imports.is_bf16_available() is bf16
    assert imports.is_fp16_available() is True


def test_use_torch_xla_switch_reads_the_environment() -> None:
    code = "from accelerate.utils.imports import USE_TORCH_XLA; print(USE_TORCH_XLA)"
    env = {"USE_TORCH_XLA": "0", "PATH": "", "PYTHONPATH": ":".join(sys.path)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
    assert imports.USE_TORCH_XLA is True


def test_rich_probe_needs_rich_and_the_opt_in(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ACCELERATE_ENABLE_RICH", raising=False)
    assert imports.is_rich_available() is False
    monkeypatch.setenv("ACCELERATE_ENABLE_RICH", "1")
    assert imports.is_rich_available() is _installed("rich")


def test_probing_imports_no_probed_package() -> None:
    """Every package probe, called in a fresh interpreter, leaves the probed packages unimported."""
    names = sorted(PACKAGE_PROBES)
    code = (
        "import sys, json\nfrom accelerate.utils import imports\n"
        f"answers = {{n: getattr(imports, n)() for n in {names!r}}}\n"
        "answers['is_numpy_available'] = imports.is_numpy_available()\n"
        "answers['is_bnb_available'] = imports.is_bnb_available('0.1')\n"
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    loaded = set(json.loads(out.stdout.strip().splitlines()[-1]))
    probed = {m for modules in PACKAGE_PROBES.values() for m in modules} | {"numpy", "torch"}
    assert loaded & probed == set()


def test_required_decorators_name_the_pip_command() -> None:
    @imports.deepspeed_required
    def needs_deepspeed(x: int) -> int:
        return x + 1

    @imports.torchao_required
    def needs_torchao(x: int) -> int:
        return x + 2

    for func, package, available in [
        (needs_deepspeed, "deepspeed", imports.is_deepspeed_available()),
        (needs_torchao, "torchao", imports.is_torchao_available()),
    ]:
        if available:
            assert func(1) > 1
            continue
        with pytest.raises(ImportError, match=f"pip install {package}") as info:
            func(1)
        assert func.__name__ in str(info.value)


def test_accelerate_rich_installs_rich_tracebacks() -> None:
    """`accelerate.rich` (attribute or import) makes rich render uncaught exceptions."""
    code = (
        "import sys, accelerate\nbefore = sys.excepthook\nmodule = accelerate.rich\n"
        "print(module.__name__, sys.excepthook is not before, 'rich' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if not _installed("rich"):
        assert "pip install rich" in out.stderr
        return
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["accelerate.rich", "True", "True"]
