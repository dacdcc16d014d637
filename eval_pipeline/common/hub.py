"""The Hugging Face hub offline unless the user says otherwise: a local model folder (or a model
already in the local cache) is loaded without a network call, and a missing one fails instead of
downloading. huggingface_hub and transformers read these variables once, when first imported, so
they are set before any of them is (the embedder's and the cross-encoder's `warm_up`, and the
parallel job's forkserver before it preloads them: eval_pipeline.common.step_preload)."""

import os

OFFLINE = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def offline_by_default() -> None:
    """Set each of OFFLINE in this process's environment unless it is set already."""
    for name, value in OFFLINE.items():
        os.environ.setdefault(name, value)
