"""Maintenance jobs off the write path, run by rq (`rq worker memoryos-maintenance`, `rq cron
services/jobs/cron.py`): retried on failure and visible with `rq info` or rq-dashboard. A job that
changes a space never opens it: it queues an op for the space's owner, the worker holding its shard."""
