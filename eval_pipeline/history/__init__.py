"""The run history in Postgres: retrieval runs (`runs`), answer runs (`answers`), the one
acceptance record, and the identities that decide what is comparable (`identity`: benchmark,
configuration, scoring protocol), the acceptances' placement and the clock mark (`measurements`).
The command line (`runs`, `accept`) is `__main__`: ``python -m eval_pipeline.history``.
"""
