"""The testcontainers database resource: real where a Docker engine runs, skipped with a reason elsewhere."""

import pytest

pytestmark = pytest.mark.integration


def _docker_available() -> str | None:
    try:
        import docker

        docker.from_env().ping()
        return None
    except Exception as exc:  # no socket, no daemon, no permission
        return f"no Docker engine reachable ({type(exc).__name__}: {str(exc)[:120]})"


_NO_DOCKER = _docker_available()


@pytest.mark.skipif(_NO_DOCKER is not None, reason=_NO_DOCKER or "")
def test_testcontainers_database_resource(tiny_snapshot, local_embedder):
    from eval_pipeline.store.ingest import ChunkingConfig, ingest
    from resources import DatabaseResource

    db = DatabaseResource(kind="testcontainers")
    db.setup_for_execution(None)
    try:
        info = ingest(tiny_snapshot, connection_string=db.connection_string(), embedder=local_embedder,
                      chunking=ChunkingConfig(split_length=30, split_overlap=5), log=lambda m: None)
        assert info.chunk_count > 0 and info.dims == 384
    finally:
        db.teardown_after_execution(None)
