"""Two worker children's real expositions merged into one: every family once, with each child's samples
labelled `worker_process` and otherwise as the child served them, for every kind of family a worker's
registry can hold (counter with `_total` and `_created`, gauge, histogram, info, untyped)."""

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from services.worker.child_metrics import merged_exposition


def exposition(queue_depth: float, dead_letters: int, apply_seconds: list[float]) -> str:
    """A child's /metrics as `prometheus_client` renders it, plus one untyped line."""
    registry = CollectorRegistry()
    Gauge("memoryos_queue_depth", "Unapplied writes.", registry=registry).set(queue_depth)
    Counter("memoryos_dead_letters", "Writes dead-lettered.", registry=registry).inc(dead_letters)
    histogram = Histogram("memoryos_apply_seconds", "Apply time.", buckets=(0.1, 1.0), registry=registry)
    for seconds in apply_seconds:
        histogram.observe(seconds)
    Info("memoryos_build", "The build.", registry=registry).info({"version": "1.0"})
    return generate_latest(registry).decode() + "memoryos_untyped_thing 7\n"


def labelled(text: str, index: str) -> dict[str, list[Sample]]:
    """Each family's samples in `text`, with the label the merge adds."""
    return {
        family.name: [
            sample._replace(labels={**sample.labels, "worker_process": index}) for sample in family.samples
        ]
        for family in text_string_to_metric_families(text)
    }


def test_two_childrens_expositions_merge_into_one_family_each_with_every_sample_labelled() -> None:
    child_0 = exposition(queue_depth=3, dead_letters=1, apply_seconds=[0.05, 0.5])
    child_1 = exposition(queue_depth=5, dead_letters=0, apply_seconds=[2.0])

    merged = list(text_string_to_metric_families(merged_exposition({0: child_0, 1: child_1}).decode()))

    names = [family.name for family in merged]
    assert len(names) == len(set(names)), names
    types = {family.name: family.type for family in text_string_to_metric_families(child_0)}
    assert {family.name: family.type for family in merged} == types
    assert set(types.values()) == {"gauge", "counter", "histogram", "unknown"}  # info: a gauge on the wire
    expected = labelled(child_0, "0")
    for name, samples in labelled(child_1, "1").items():
        expected[name] += samples
    assert {family.name: family.samples for family in merged} == expected  # child 0's, then child 1's
    depth = next(family for family in merged if family.name == "memoryos_queue_depth")
    assert sum(sample.value for sample in depth.samples) == 8  # what the HPA sums over the pod
    buckets = {
        (s.labels["worker_process"], s.labels["le"]): s.value
        for family in merged
        for s in family.samples
        if s.name == "memoryos_apply_seconds_bucket"
    }
    assert buckets == {
        ("0", "0.1"): 1,
        ("0", "1.0"): 2,
        ("0", "+Inf"): 2,
        ("1", "0.1"): 0,
        ("1", "1.0"): 0,
        ("1", "+Inf"): 1,
    }


def test_no_child_answering_is_an_empty_exposition() -> None:
    assert merged_exposition({}) == b""
