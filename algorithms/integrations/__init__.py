"""Thin adapters that run the methods inside other libraries' trainers through :class:`~algorithms.core.Loop`
(each imports its framework, an optional extra: ``algorithms.integrations.transformers``...)."""
