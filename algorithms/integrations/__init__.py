"""Thin adapters over :class:`algorithms.core.Loop` that run the methods in other libraries' trainers
(optional extras, each imported on its own where its library is installed)."""
