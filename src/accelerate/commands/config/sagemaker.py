"""``accelerate.commands.config.sagemaker``: the questions for an Amazon SageMaker launch config.

Launching on SageMaker is not available in this release; the config it describes can be written and
read (``SageMakerConfig``) so files stay interchangeable with upstream's.
"""

from __future__ import annotations

from typing import Any

from accelerate.commands.config.config_args import SageMakerConfig
from accelerate.utils.dataclasses import AVAILABLE_MIXED_PRECISION_MODES

__all__ = ["SageMakerConfig", "get_sagemaker_input"]


def get_sagemaker_input(prompter: Any = None) -> SageMakerConfig:
    """Asks for the SageMaker settings (``prompter``: default the terminal) and returns a :class:`SageMakerConfig`."""
    from accelerate.commands.prompts import default_prompter

    ask = prompter or default_prompter()
    iam_role_name = ask.text(
        "Which IAM role (name) should SageMaker jobs run as?", "accelerate_sagemaker_execution_role"
    )
    profile = ask.text("Which AWS profile should be used (empty for the default credentials)?", "")
    region = ask.text("Which AWS region?", "us-east-1")
    ec2_instance_type = ask.text("Which EC2 instance type?", "ml.p3.2xlarge")
    num_machines = ask.integer(
        "How many machines?", 1, lambda v: None if v >= 1 else "Please give at least 1 machine."
    )
    mixed_precision = ask.select(
        "Do you wish to use mixed precision?", [(m, m) for m in AVAILABLE_MIXED_PRECISION_MODES], default="no"
    )
    return SageMakerConfig(
        compute_environment="AMAZON_SAGEMAKER",
        distributed_type="DATA_PARALLEL" if num_machines > 1 else "NO",
        mixed_precision=mixed_precision,
        use_cpu=False,
        debug=False,
        ec2_instance_type=ec2_instance_type,
        iam_role_name=iam_role_name,
        profile=profile or None,
        region=region,
        num_machines=num_machines,
        base_job_name=f"accelerate-sagemaker-{num_machines}",
    )
