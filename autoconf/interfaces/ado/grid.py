"""``autoconf_grid``: an ado operator that answers every point of a discovery space in-process.

ado's random_walk sends each point through the custom-experiments actuator one at a time and looks
every new point up in the sample store first, which makes a 3,960-point sweep take ~800 s. This
operator walks the space's grid once (or only the points not yet measured), answers all points of
each autoconf experiment with the batch functions that the experiments themselves call
(``answers.py``: one vectorised search per group of settings), and stores the results through the
space's public ``addMeasurement`` as one measurement request per ``batchSize`` points. The sample
store, provenance, ``ado show measurements`` and the CSV export are therefore ado's own.

Registered through the ``ado.operators`` entry point as a *characterize* operation (ado's function
operators; no Ray actors). ado does not hand a function operator its operation id, which the
measurement requests must carry; ``current_operation`` finds it among the space's operations (the
newest started, unfinished ``autoconf_grid`` operation) using only public metastore calls.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import Annotated, Any, TypeVar

import pydantic
from ado.core.discoveryspace.space import DiscoverySpace
from ado.core.operation.config import FunctionOperationInfo
from ado.core.operation.operation import OperationOutput
from ado.core.operation.resource import OperationExitStateEnum, OperationResourceEventEnum, OperationResourceStatus
from ado.core.resources import CoreResourceKinds
from ado.modules.operators.collections import characterize_operation
from ado.schema.entity import Entity
from ado.schema.experiment import Experiment
from ado.schema.observed_property import ObservedPropertyValue
from ado.schema.request import MeasurementRequest, MeasurementRequestStateEnum
from ado.schema.result import InvalidMeasurementResult, ValidMeasurementResult

from autoconf import __version__
from autoconf.interfaces.ado import answers

log = logging.getLogger(__name__)

NAME = "autoconf_grid"
VERSION = __version__  # the package's
ACTUATOR = "custom_experiments"
# Points per stored measurement request: each request is one SQLite transaction for its entities,
# results and their links; ~500 keeps a request's JSON small and the commits few (8 for 3,960 points).
DEFAULT_BATCH = 500
Batch = Callable[[Sequence[answers.Point]], list[answers.Outputs]]
_Op = TypeVar("_Op", bound=Callable[..., OperationOutput])
# ado ships no type information: its decorator, typed here at our boundary.
_characterize: Callable[..., Callable[[_Op], _Op]] = characterize_operation


def batch_functions() -> dict[str, Batch]:
    """Experiment identifier -> the batch function its decorated experiment calls."""
    return {"min_gpu_recommender": answers.min_gpu_answers, "resource_estimate": answers.resource_estimate_answers,
            "avoid_oom_recommender": answers.avoid_oom_answers, "throughput_recommender": answers.throughput_answers}


class GridParameters(pydantic.BaseModel):
    """Parameters of an autoconf_grid operation (``operation.parameters`` in the YAML)."""

    model_config = pydantic.ConfigDict(extra="forbid")

    batchSize: Annotated[int, pydantic.Field(ge=1, le=5000, description="Points per stored measurement request.")] = (
        DEFAULT_BATCH)
    onlyUnmeasured: Annotated[bool, pydantic.Field(
        description="Skip points the sample store already holds a measurement of by the same experiment.")] = False


def current_operation(space: DiscoverySpace) -> str:
    """Identifier of the autoconf_grid operation now running on ``space`` (newest started, unfinished)."""
    found = []
    for identifier in space.operations:
        op = space.metadataStore.getResource(identifier, CoreResourceKinds.OPERATION)
        events = [s.event for s in op.status] if op is not None else []
        if op is not None and op.operatorIdentifier.split("@")[0] == NAME and \
                OperationResourceEventEnum.STARTED in events and OperationResourceEventEnum.FINISHED not in events:
            found.append((op.created, identifier))
    if not found:
        raise ValueError(f"{NAME}: no running {NAME} operation found on space {space.uri}")
    return str(max(found)[1])


def grid_entities(space: DiscoverySpace) -> list[Entity]:
    """One entity per point of the space's (discrete) entity space, in ado's sequential order."""
    entity_space = space.entitySpace
    names = [p.identifier for p in entity_space.constitutiveProperties]
    return [entity_space.entity_for_point(dict(zip(names, values, strict=True)))
            for values in entity_space.sequential_point_iterator()]


def measured_ids(space: DiscoverySpace, ids: set[str], experiment: Experiment) -> set[str]:
    """Entities among ``ids`` that the sample store holds a measurement of by ``experiment``."""
    stored = space.sample_store.get_entities(identifiers=ids, require_measurements=True) if ids else []
    return {e.identifier for e in stored if experiment.reference in e.experimentReferences}


def results(experiment: Experiment, entities: Sequence[Entity], batch: Batch) -> list[Any]:
    """Measurement results of ``experiment`` at ``entities``: the experiment's own answers."""
    valid = [experiment.validate_entity(entity) for entity in entities]
    points = [experiment.propertyValuesFromEntity(e) for e, ok in zip(entities, valid, strict=True) if ok]
    found = iter(batch(points))
    targets = {p.identifier: experiment.observedPropertyForTargetIdentifier(p.identifier)
               for p in experiment.targetProperties}
    out: list[Any] = []
    for entity, ok in zip(entities, valid, strict=True):
        if ok:
            answer = next(found)
            values = [ObservedPropertyValue(property=targets[k], value=v) for k, v in answer.items() if k in targets]
            out.append(ValidMeasurementResult(entityIdentifier=entity.identifier, measurements=values))
        else:
            out.append(InvalidMeasurementResult(entityIdentifier=entity.identifier, reason="point outside the "
                                                "experiment's domains", experimentReference=experiment.reference))
    return out


def chunks(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start:start + size]


def store(space: DiscoverySpace, operation_id: str, experiment: Experiment, entities: Sequence[Entity],
          found: Sequence[Any], size: int, first_index: int) -> int:
    """Store the results as measurement requests of ``size`` points; returns the next request index."""
    index = first_index
    for part, measured in zip(chunks(entities, size), chunks(found, size), strict=True):
        ok = any(isinstance(m, ValidMeasurementResult) for m in measured)
        request = MeasurementRequest(
            operation_id=operation_id, requestIndex=index, experimentReference=experiment.reference,
            entities=list(part), requestid=uuid.uuid4().hex[:6], measurements=tuple(measured),
            status=MeasurementRequestStateEnum.SUCCESS if ok else MeasurementRequestStateEnum.FAILED)
        space.addMeasurement(request)
        index += 1
    return index


def run_grid(space: DiscoverySpace, parameters: GridParameters) -> dict[str, Any]:
    """Answer and store every (unmeasured) point of every experiment of the space; returns counts."""
    functions = batch_functions()
    experiments = space.measurementSpace.experiments
    unknown = [e.reference for e in experiments
               if e.actuatorIdentifier != ACTUATOR or e.identifier not in functions]
    if unknown:
        raise ValueError(f"{NAME} answers only autoconf's experiments ({', '.join(functions)}); got {unknown}")
    operation_id = current_operation(space)
    entities = grid_entities(space)
    counts: dict[str, Any] = {"points": len(entities)}
    index = 0
    for experiment in experiments:
        start = time.perf_counter()
        todo = entities
        if parameters.onlyUnmeasured:
            done = measured_ids(space, {e.identifier for e in entities}, experiment)
            todo = [e for e in entities if e.identifier not in done]
        found = results(experiment, todo, functions[experiment.identifier])
        index = store(space, operation_id, experiment, todo, found, parameters.batchSize, index)
        counts[experiment.identifier] = {"answered": len(todo), "skipped": len(entities) - len(todo),
                                         "seconds": round(time.perf_counter() - start, 3)}
        log.info("%s: %s", experiment.identifier, counts[experiment.identifier])
    return counts


@_characterize(name=NAME, version=VERSION, configuration_model=GridParameters,
                example_configuration=GridParameters(),
                description="Answer autoconf's experiments at every point of the space in-process, "
                            "storing the results in batches (the fast way to sweep a space).")
def autoconf_grid(discoverySpace: DiscoverySpace, operationInfo: FunctionOperationInfo | None = None,
                  **kwargs: object) -> OperationOutput:
    """Visit every point of ``discoverySpace`` once and store autoconf's answers there."""
    counts = run_grid(discoverySpace, GridParameters.model_validate(kwargs))
    print(f"{NAME}: {counts}")
    # An explicit status: OperationOutput's default one carries the time it was first created, not now.
    done = OperationResourceStatus(event=OperationResourceEventEnum.FINISHED, exit_state=OperationExitStateEnum.SUCCESS,
                                   message=f"{NAME}: {counts['points']} points")
    return OperationOutput(metadata={NAME: counts}, exitStatus=done)
