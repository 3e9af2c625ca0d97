"""The pipeline: params, the generation steps and the DVC stages around them,
training (Lightning), matches and self-play over worker pools, storage,
tracking (MLflow) and tuning (Optuna). Imports the engine, never the apps."""
