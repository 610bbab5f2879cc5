"""The worker children's metrics as one exposition, served on the health port with `--processes N`: a pod
is probed and scraped on that one port, so the HPA (or KEDA) sums the queue depth of every child's
shards, where a scrape of port 9400 saw child 0's alone. Each sample gets `worker_process="<i>"`, and
each family comes once, holding every child's samples: the exposition format forbids a family twice."""

from collections.abc import Iterator, Mapping

from prometheus_client import generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

CHILD_LABEL = "worker_process"


def merged_exposition(children: Mapping[int, str]) -> bytes:
    """The exposition texts of worker children, keyed by child index, as one text in the Prometheus
    format, each sample labelled with its child's index."""
    families: dict[str, Metric] = {}
    for index, text in children.items():
        for family in text_string_to_metric_families(text):
            merged = families.setdefault(family.name, Metric(family.name, family.documentation, family.type))
            merged.samples += [
                sample._replace(labels={**sample.labels, CHILD_LABEL: str(index)})
                for sample in family.samples
            ]
    return generate_latest(_Families(list(families.values())))


class _Families(Collector):
    """Families already merged, for `generate_latest` to render."""

    def __init__(self, families: list[Metric]) -> None:
        self._families = families

    def collect(self) -> Iterator[Metric]:
        return iter(self._families)
