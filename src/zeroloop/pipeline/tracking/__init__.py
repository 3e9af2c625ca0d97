"""MLflow for the pipeline: reaching the store (:mod:`.store`) and keeping its
runs (:mod:`.runs`)."""
