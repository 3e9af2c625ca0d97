"""Thin DVC entry points: read params.yaml, call the library, write outputs.

Run as ``python -m zeroloop.pipeline.stages STAGE [--gen G --prev P]``; dvc.yaml does.
"""
