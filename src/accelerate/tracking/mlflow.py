"""MLflow tracker (needs `pip install mlflow`, or the lighter `mlflow-skinny`)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from accelerate.tracking.base import GeneralTracker, loggable, on_main_process, require_tracker_package

_ACCEPTED = "numbers (one-element tensors too) and dicts of numbers (logged as 'outer/inner')"
# MLflow's own limits on one parameter value and on one log_batch call (mlflow.utils.validation).
_MAX_PARAM_LENGTH = 6000
_MAX_PARAMS_PER_BATCH = 100


def _flag(value: Any) -> bool:
    return value if isinstance(value, bool) else str(value).strip().lower() in {"1", "true", "yes", "on"}


def default_store_uri(logging_dir: str | None) -> str | None:
    """``sqlite:///<logging_dir>/mlflow.db`` when ``logging_dir`` is a local folder (created here: sqlite
    does not create folders); else None (MLflow's default decides).

    MLflow's file store is in maintenance mode and refuses to start without MLFLOW_ALLOW_FILE_STORE, so the
    default is a database; with mlflow-skinny it needs sqlalchemy and alembic (both in our test extra).
    """
    if logging_dir is None or "://" in logging_dir:
        return None
    folder = Path(logging_dir).resolve()
    folder.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{folder / 'mlflow.db'}"


class MLflowTracker(GeneralTracker):
    """Logs to the MLflow tracking server named by ``MLFLOW_TRACKING_URI``; without it, to a sqlite store
    ``mlflow.db`` in ``logging_dir`` (from ``init_kwargs``, else the Accelerator's logging directory),
    or MLflow's own default when there is no logging directory either.

    Each argument can also come from the environment, which wins when set: ``MLFLOW_EXPERIMENT_NAME``,
    ``MLFLOW_RUN_ID``, ``MLFLOW_TAGS`` (a JSON object), ``MLFLOW_NESTED_RUN``. ``logging_dir`` is the
    artifact location of an experiment this tracker creates (the store's folder when this tracker
    chose the store).
    """

    # The registry sets default_logging_dir to the Accelerator's logging directory.
    takes_logging_dir = True
    default_logging_dir: str | None = None

    name = "mlflow"
    requires_logging_directory = False
    package = ("mlflow", "mlflow")

    def __init__(
        self,
        experiment_name: str | None = None,
        logging_dir: str | os.PathLike[str] | None = None,
        run_id: str | None = None,
        tags: dict[str, Any] | str | None = None,
        nested_run: bool | None = False,
        run_name: str | None = None,
        description: str | None = None,
    ) -> None:
        super().__init__()
        require_tracker_package(self.name, *self.package)
        self.experiment_name = os.environ.get("MLFLOW_EXPERIMENT_NAME", experiment_name)
        self.run_id = os.environ.get("MLFLOW_RUN_ID", run_id)
        raw_tags = os.environ.get("MLFLOW_TAGS", tags)
        self.tags = json.loads(raw_tags) if isinstance(raw_tags, str) else raw_tags
        self.nested_run = _flag(os.environ.get("MLFLOW_NESTED_RUN", nested_run))
        self.logging_dir = None if logging_dir is None else str(logging_dir)
        self.run_name = run_name
        self.description = description
        self.active_run: Any = None
        self._set_store = False

    @on_main_process
    def start(self) -> None:
        import mlflow

        # MLflow's set_tracking_uri also exports MLFLOW_TRACKING_URI; finish() undoes ours so that the
        # next tracker in this process (or a child process) does not inherit this run's store.
        folder = self.logging_dir or self.default_logging_dir
        store = None if mlflow.is_tracking_uri_set() else default_store_uri(folder)
        if store is not None:
            mlflow.set_tracking_uri(store)
        self._set_store = store is not None
        # A store named by the user (maybe a server) keeps its own artifact root unless logging_dir was given.
        artifacts = self.logging_dir or (folder if self._set_store else None)
        experiment_id = None
        if self.experiment_name is not None:
            found = mlflow.get_experiment_by_name(self.experiment_name)
            if found is not None:
                experiment_id = found.experiment_id
            else:
                experiment_id = mlflow.create_experiment(
                    self.experiment_name, artifact_location=artifacts, tags=self.tags
                )
        self.active_run = mlflow.start_run(
            run_id=self.run_id,
            experiment_id=experiment_id,
            run_name=self.run_name,
            nested=self.nested_run,
            tags=self.tags,
            description=self.description,
        )

    @property
    def tracker(self) -> Any:
        return self.active_run

    @on_main_process
    def store_init_configuration(self, values: dict[str, Any]) -> None:
        import mlflow

        params = {}
        for key, value in values.items():
            text = str(value)
            if len(text) > _MAX_PARAM_LENGTH:
                # MLflow rejects the whole batch for one long value: drop that one, loudly.
                import logging

                logging.getLogger("accelerate.tracking").warning(
                    "The mlflow tracker skips the parameter %r: its value is %d characters, MLflow's limit "
                    "is %d.", key, len(text), _MAX_PARAM_LENGTH,
                )  # fmt: skip
                continue
            params[key] = value
        items = list(params.items())
        for start in range(0, len(items), _MAX_PARAMS_PER_BATCH):
            mlflow.log_params(dict(items[start : start + _MAX_PARAMS_PER_BATCH]))

    @on_main_process
    def log(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:
        import mlflow

        metrics = loggable(self.name, values, _ACCEPTED, dicts="flatten")
        # Extra keywords (Accelerator.log(log_kwargs={"mlflow": {...}})) go to MLflow: synchronous, run_id, ...
        mlflow.log_metrics({key: float(value) for key, value in metrics.items()}, step=step, **kwargs)

    @on_main_process
    def log_figure(self, figure: Any, artifact_file: str, **save_kwargs: Any) -> None:
        """Saves a matplotlib or plotly ``figure`` as the run artifact ``artifact_file``."""
        import mlflow

        mlflow.log_figure(figure=figure, artifact_file=artifact_file, **save_kwargs)

    @on_main_process
    def log_artifacts(self, local_dir: str, artifact_path: str | None = None) -> None:
        """Copies every file under ``local_dir`` into the run's artifacts."""
        import mlflow

        mlflow.log_artifacts(local_dir=local_dir, artifact_path=artifact_path)

    @on_main_process
    def log_artifact(self, local_path: str, artifact_path: str | None = None) -> None:
        """Copies one file into the run's artifacts."""
        import mlflow

        mlflow.log_artifact(local_path=local_path, artifact_path=artifact_path)

    @on_main_process
    def finish(self) -> None:
        import mlflow

        mlflow.end_run()
        if self._set_store:
            # None unsets the URI and the variable (MLflow's annotation says str, its code takes None).
            mlflow.set_tracking_uri(None)  # type: ignore[arg-type]
            self._set_store = False
