"""Toy extensions (issue #24): each kind is one file that defines it and registers it; the
`integration` test tests/integration/test_toy_extensions.py names the files in
EVAL_PIPELINE_PLUGINS (its one registration line) and runs the whole job with them."""
