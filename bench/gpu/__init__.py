"""GPU figures: embedding and search against the device's own ceilings (`python -m bench.gpu.report`), the
batcher's diagnosis, model stand-ins, and the bundled model packed to travel (`bench/device/` runs them
on a lent machine)."""
