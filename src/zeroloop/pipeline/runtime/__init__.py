"""Where work runs: the worker backend (:mod:`.backend`), local process pools
and :func:`~zeroloop.pipeline.runtime.workers.run_tasks` (:mod:`.workers`), the
Ray pool (:mod:`.raypool`) and per-process settings (:mod:`.process`). Nothing
here decides a result: the same tasks give the same bytes on any backend."""
