"""Library code behind the contributor tools in ``tools/`` and the docs generators.

Kept inside the package (rather than in ``tools/``) so the tools stay thin command lines, the
tests import the same functions, and other repositories can run the pre-commit hooks from an
installed package. Nothing here imports torch unless a function needs the method code.
"""
