"""MLflow tracker (needs `pip install mlflow`)."""

from __future__ import annotations

from typing import Any

from accelerate.tracking.base import GeneralTracker, as_number, skip_unloggable
from accelerate.utils.imports import require


class MLflowTracker(GeneralTracker):
    name = "mlflow"

    def __init__(self, experiment_name: str, logging_dir: str | None = None, **kwargs: Any) -> None:
        self.mlflow = require("mlflow", feature="log_with='mlflow'")
        if logging_dir is not None:
            self.mlflow.set_tracking_uri(logging_dir)
        self.mlflow.set_experiment(experiment_name)
        self.run = self.mlflow.start_run(**kwargs)

    @property
    def tracker(self) -> Any:
        return self.run

    def store_init_configuration(self, values: dict[str, Any]) -> None:
        self.mlflow.log_params({k: str(v)[:250] for k, v in values.items()})

    def log(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:
        metrics = {}
        for key, value in values.items():
            number = as_number(value)
            if number is None:
                skip_unloggable(self.name, key, value, "numbers (one-element tensors too)")
            else:
                metrics[key] = float(number)
        self.mlflow.log_metrics(metrics, step=step)

    def finish(self) -> None:
        self.mlflow.end_run()
