"""Adapters that run the methods inside other libraries' trainers through :class:`~algorithms.core.Loop`,
each behind an optional extra and imported on its own where its library is installed:

- :mod:`algorithms.integrations.transformers`: ``MethodsTrainer``, the Hugging Face ``Trainer``
  with ``algorithms=`` (``pip install 'methods-library[transformers]'``);
- :mod:`algorithms.integrations.lightning`: ``MethodsCallback`` and ``MethodsModule`` for
  PyTorch Lightning (``pip install 'methods-library[lightning]'``).
"""
