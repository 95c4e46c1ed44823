"""The drain kit's metrics in an app's own prometheus_client registry (needs prometheus_client).

For a server that already serves ``/metrics`` with prometheus_client (vLLM does)::

    from prometheus_client import REGISTRY
    from asyncdeploy.workload.prometheus import DrainCollector

    REGISTRY.register(DrainCollector(controller))

The families are those of :mod:`asyncdeploy.workload.metrics`, read at each scrape.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from .metrics import metric_families
from .state import DrainController

__all__ = ["DrainCollector"]


class DrainCollector(Collector):
    """A custom collector reporting ``controller``'s state, requests and durations."""

    def __init__(self, controller: DrainController, *, prefix: str = "asyncdeploy") -> None:
        self.controller = controller
        self.prefix = prefix

    def collect(self) -> Iterator[Metric]:
        for family in metric_families(self.controller, prefix=self.prefix):
            # prometheus_client names a counter family without its _total suffix
            name = family.name.removesuffix("_total") if family.kind == "counter" else family.name
            metric = Metric(name, family.help, family.kind)
            for sample in family.samples:
                metric.add_sample(sample.name, dict(sample.labels), sample.value)
            yield metric
