"""Background workers of the device gateway: push delivery, media transcoding, retention.

Never imports Hermes. The public surface:

* :mod:`workers.settings` -- arq settings ``PushWorker``, ``MediaWorker``,
  ``MaintenanceWorker``, one process per queue: ``arq workers.settings.PushWorker``.
* :mod:`workers.jobs` -- queue names, the job table, ``enqueue_push`` /
  ``enqueue_media`` for producers.
* Job functions (plain, idempotent coroutines ``f(ctx, payload) -> outcome dict``):
  :func:`workers.push.jobs.push_notify`, :func:`workers.media.jobs.media_transcode`,
  :func:`workers.maintenance.retention.retention_sweep` (+ ``extra_retention_tasks``).
* :class:`workers.inprocess.InProcessRunner` -- the same jobs in-process (embedded mode).
* :mod:`workers.config` -- ``WorkerConfig`` / ``load_config`` (environment settings).
* :mod:`workers.errors` -- the error tree; :mod:`workers.metrics` -- Prometheus metrics.
* :mod:`workers.push.classify` -- pure FCM/ntfy response classification.

Heavy media libraries (Pillow, PyAV) are imported only when a media job runs, so a
push-only worker does not load them.
"""
