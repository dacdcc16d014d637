"""eval-pipeline's library: one package per stage of the asset graph, each importing only the
stages below it (tests/test_library_boundary.py enforces it):

    common < corpus < store < questions < ranking < judging < reporting

No module here imports Dagster: the Dagster layer is assets/, resources/ and definitions.py.
"""
