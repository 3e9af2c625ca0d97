"""params.yaml as typed, validated configuration: the schema (derived from the
library configs) and its loading."""

from zeroloop.pipeline.params.loading import ParamsError, load_params, parse_params
from zeroloop.pipeline.params.schema import Params

__all__ = ["Params", "ParamsError", "load_params", "parse_params"]
