"""Used by every stage: atomic writes, type checks, what a word is, model weights' content
identity, the OpenAI-compatible LLM client, the state directory and plain metadata values.
"""
