"""The run history in Postgres: retrieval runs (`runs`), answer runs (`answers`), the one
acceptance record, and the identities that decide what is comparable (`identity`: benchmark,
configuration, scoring protocol). The `accept` command line is `cli`.
"""
