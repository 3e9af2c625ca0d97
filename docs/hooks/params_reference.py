"""MkDocs hook: docs/params.md's marker becomes the params.yaml reference,
generated from the schema by zeroloop.pipeline.params.reference."""

from pathlib import Path

import yaml

from zeroloop.pipeline.params.reference import fill_reference


def on_page_markdown(markdown, page, config, files):
    if page.file.src_uri != "params.md":
        return markdown
    params = Path(config.config_file_path).parent / "params.yaml"
    return fill_reference(markdown, yaml.safe_load(params.read_text()))
