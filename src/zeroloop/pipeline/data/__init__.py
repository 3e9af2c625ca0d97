"""A run's files: where they live (:mod:`.layout`), how they are written and
checked (:mod:`.storage`: atomic writes, model and shard files with metadata and
checksums), self-play shards and their manifests (:mod:`.shards`), and the
models on disk or shipped with the package (:mod:`.catalogue`)."""
