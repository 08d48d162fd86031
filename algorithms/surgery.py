"""Module surgery: the one helper every model-changing method is built on.

:func:`replace_module_classes` walks a model once, top-down, and replaces each module that a
policy matches with what the policy returns, in its parent, under the same name:

- a policy is ``{module class: replacement(module, index) -> new module or None}``, matched with
  ``isinstance``; ``index`` counts the matches of that class so far, in walk order; ``None``
  leaves the module as it is;
- the replacement is moved to the original's device and floating dtype, and takes its train or
  eval mode (a policy that builds a new module on the CPU in float32, in training mode, need not
  know where the model lives or how it is used); loading the original's
  weights where the math allows is the policy's part, as only it knows the math;
- optimizers that already hold the original's parameters are updated: the original's parameters
  leave their parameter group and the replacement's join it, and a parameter the replacement
  keeps (the same tensor, or the same name and shape) keeps its optimizer state;
- the replaced modules are returned, by qualified name, so a caller counts them with ``len``;
  with none, it warns, naming the method;
- inside :func:`recording_replacements`, every replacement is also recorded, so a method's class
  counts what its functional form replaced whatever that form returns.

Modules inside a replacement are not visited again unless ``recurse_on_replacements=True``, and
a model already wrapped for a parallel mode is refused: surgery runs before wrapping
(``Event.INIT`` in the :class:`~algorithms.core.Trainer`).

**Frozen parameters.** A model in which a policy's class matches a module holding a frozen
parameter (``requires_grad=False``, in the module or below it) is refused with one ValueError naming
the method, the first such module and the parameter, before any policy runs. A ``peft`` model
(``peft.get_peft_model``) freezes its whole base, and a replacement there would change what a
frozen, pretrained part computes, drop its frozen weights for new ones the adapter's training then
trains in their place (GLU's gate, a Squeeze-Excite block), or drop the adapter layers peft put
inside the module; and the Trainer checkpoints a peft model's adapter alone, which would not hold
them. The helper cannot tell a harmless policy from those unless the policy says so, so it refuses
them: apply the method to the model before freezing it (before ``get_peft_model``), or leave it out.
A policy marked with :func:`preserves_parameters` (its replacement holds the original's own
parameters and submodules under the same names and computes the same function, changing only how:
Activation Checkpointing's checkpointed blocks) is applied to such modules too. Modules without
parameters (dropout, pooling, activations) are replaced as in any model, and a module whose
parameters all train is, though the model has frozen parts elsewhere. Layer Freezing freezes at
epochs' ends, after the surgery at ``Event.INIT``, so it is not concerned.

Composer's ``composer.utils.module_surgery.replace_module_classes`` is the model for this helper;
it returns ``{old module: new module}`` where this returns ``{qualified name: new module}``.

Example::

    >>> import torch
    >>> from algorithms.surgery import replace_module_classes
    >>> model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    >>> replaced = replace_module_classes(model, {torch.nn.ReLU: lambda m, i: torch.nn.GELU()})
    >>> sorted(replaced), type(model[1]).__name__
    (['1'], 'GELU')
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextvars import ContextVar
from typing import Any

import torch
from torch import nn

from .core.algorithm import warn_from_callers_line

__all__ = [
    "NoModulesReplacedWarning",
    "Policy",
    "Registry",
    "class_path",
    "count_module_instances",
    "preserves_parameters",
    "recording_replacements",
    "replace_module_classes",
]

#: A replacement: ``(module, index among this class's matches) -> new module, or None to keep it``.
Policy = Callable[[nn.Module, int], nn.Module | None]


class NoModulesReplacedWarning(UserWarning):
    """A surgery method found nothing in the model to replace."""


#: The lists of the open :func:`recording_replacements` blocks, innermost last.
_RECORDINGS: ContextVar[tuple[list[str], ...]] = ContextVar("surgery_recordings", default=())


@contextlib.contextmanager
def recording_replacements() -> Iterator[list[str]]:
    """A list of the qualified names of every module :func:`replace_module_classes` replaces inside
    the block, however deep the call: how an Algorithm counts the modules its functional form replaced.

    Example::

        >>> import torch
        >>> from algorithms.functional import apply_blurpool
        >>> from algorithms.models import resnet20
        >>> with recording_replacements() as replaced:
        ...     model = apply_blurpool(resnet20())
        >>> len(replaced)
        4
    """
    replaced: list[str] = []
    token = _RECORDINGS.set((*_RECORDINGS.get(), replaced))
    try:
        yield replaced
    finally:
        _RECORDINGS.reset(token)


def count_module_instances(model: nn.Module, module_class: type | tuple[type, ...]) -> int:
    """How many modules of ``model`` (itself included) are instances of ``module_class``."""
    return sum(isinstance(m, module_class) for m in model.modules())


def _wrapped(model: nn.Module) -> bool:
    from torch.nn.parallel import DataParallel, DistributedDataParallel

    if isinstance(model, (DataParallel, DistributedDataParallel)):
        return True
    try:
        from torch.distributed.fsdp import FullyShardedDataParallel
    except ImportError:  # pragma: no cover - torch without distributed
        return False
    return isinstance(model, FullyShardedDataParallel)


def _place(new: nn.Module, old: nn.Module, model: nn.Module) -> nn.Module:
    """``new`` on ``old``'s device, its floating tensors in ``old``'s floating dtype; for an
    original without tensors (a pooling layer), the model's."""
    tensors = [*old.parameters(recurse=True), *old.buffers(recurse=True)] or [
        *model.parameters(recurse=True),
        *model.buffers(recurse=True),
    ]
    if not tensors:
        return new
    device = tensors[0].device
    floating = next((t.dtype for t in tensors if t.is_floating_point()), None)
    new = new.to(device=device)
    if floating is not None:
        new = new.to(dtype=floating)  # casts floating tensors only; integer buffers stay
    return new


def _update_optimizers(optimizers: Sequence[torch.optim.Optimizer], old: nn.Module, new: nn.Module) -> None:
    old_params = dict(old.named_parameters())
    new_params = dict(new.named_parameters())
    old_ids = {id(p) for p in old_params.values()}
    for optimizer in optimizers:
        for group in optimizer.param_groups:
            held = [p for p in group["params"] if id(p) in old_ids]
            if not held:
                continue
            # The replacement's parameters take the place of the original's first one, so the group keeps
            # its order (an optimizer's state_dict numbers parameters by it): a replacement that keeps the
            # original's tensors leaves the group as it was.
            at = next(i for i, p in enumerate(group["params"]) if id(p) in old_ids)
            kept = [p for p in group["params"] if id(p) not in old_ids]
            group["params"] = kept
            present = {id(p) for g in optimizer.param_groups for p in g["params"]}
            incoming = []
            for name, p in new_params.items():
                if id(p) in present:
                    continue
                incoming.append(p)
                present.add(id(p))
                before = old_params.get(name)
                if before is not None and before is not p and before.shape == p.shape and before in optimizer.state:
                    optimizer.state[p] = optimizer.state.pop(before)
            group["params"] = kept[:at] + incoming + kept[at:]
            for p in held:
                if all(p is not q for q in new_params.values()):
                    optimizer.state.pop(p, None)


def preserves_parameters(policy: Policy) -> Policy:
    """Mark ``policy`` as one whose replacement holds the original module's own parameters and
    submodules, under the same names, and computes the same function, changing only how it runs
    (Activation Checkpointing's policy): :func:`replace_module_classes` then applies it to modules
    holding frozen parameters too (a ``peft`` model's base). Returns ``policy``."""
    policy.preserves_parameters = True  # type: ignore[attr-defined]
    return policy


def _preserves_parameters(policy: Policy) -> bool:
    while isinstance(policy, functools.partial):  # a Registry's policy with the method's options
        policy = policy.func
    return getattr(policy, "preserves_parameters", False) is True


def _refuse_frozen(model: nn.Module, policies: Mapping[type, Policy], method: str | None) -> None:
    """A ValueError naming the first module (in walk order, the root aside) that a policy's class
    matches and that holds a frozen parameter, unless that policy :func:`preserves_parameters`;
    nothing where none does."""
    for name, module in model.named_modules():
        cls = next((c for c in policies if isinstance(module, c)), None) if name else None
        if cls is None or _preserves_parameters(policies[cls]):
            continue
        frozen = next((n for n, p in module.named_parameters() if not p.requires_grad), None)
        if frozen is not None:
            what = method or "replace_module_classes"
            raise ValueError(
                f"{what}: {name} ({type(module).__name__}) holds frozen parameters ({name}.{frozen} has "
                "requires_grad=False), a part of the model that does not train and that surgery would change — "
                f"run {what} on the model before freezing it (before peft.get_peft_model), or leave it out"
            )


def replace_module_classes(
    model: nn.Module,
    policies: Mapping[type, Policy],
    optimizers: torch.optim.Optimizer | Iterable[torch.optim.Optimizer] | None = None,
    recurse_on_replacements: bool = False,
    method: str | None = None,
) -> dict[str, nn.Module]:
    """Replace the modules of ``model`` that ``policies`` match, in place; see the module docstring.

    Args:
        model: the model to change; its own root is never replaced (wrap it instead).
        policies: ``{module class: replacement}``; the first class (in the mapping's order) that a
            module is an instance of decides.
        optimizers: optimizers that already hold the model's parameters, updated to hold the
            replacements' parameters instead.
        recurse_on_replacements: also visit the modules inside a replacement (a policy whose
            replacement contains a module of the class it matches would then never stop; such a
            replacement is refused).
        method: the name the warning gives when nothing was replaced (default: this function's); the
            warning names the line that called into the library (the user's call of a method's
            functional form, or of the Trainer).

    Returns:
        ``{qualified name: replacement}`` of every module replaced, in walk order.

    Raises:
        ValueError: ``model`` is wrapped for DataParallel, DDP or FSDP, a policy's key is not a
            module class, or a module a policy's class matches holds a frozen parameter (see the
            module docstring); nothing is changed.
    """
    if _wrapped(model):
        raise ValueError(
            "model: is wrapped for a parallel mode; apply surgery to the model before wrapping it "
            "(the Trainer does it at Event.INIT)"
        )
    for cls in policies:
        if not (isinstance(cls, type) and issubclass(cls, nn.Module)):
            raise ValueError(f"policies: key {cls!r} is not a torch.nn.Module class")
    _refuse_frozen(model, policies, method)
    if optimizers is None:
        optimizers = ()
    elif isinstance(optimizers, torch.optim.Optimizer):
        optimizers = (optimizers,)
    optimizers = tuple(optimizers)
    replaced: dict[str, nn.Module] = {}
    indices = dict.fromkeys(policies, 0)
    # A module reachable under several names (shared, or aliased as model.conv1 = model.net[0]) is
    # visited once: it is replaced once, and every name then holds that one replacement, so the
    # optimizer holds the weights the model uses. Keyed by id, with the module kept alive so no
    # id is reused during the walk.
    seen: dict[int, tuple[nn.Module, nn.Module]] = {}

    def visit(parent: nn.Module, prefix: str, depth: int) -> None:
        for name, child in list(parent.named_children()):
            qualified = f"{prefix}{name}"
            if id(child) in seen:
                if seen[id(child)][1] is not child:
                    setattr(parent, name, seen[id(child)][1])
                continue
            seen[id(child)] = (child, child)
            cls = next((c for c in policies if isinstance(child, c)), None)
            new = None
            if cls is not None:
                new = policies[cls](child, indices[cls])
                indices[cls] += 1
            if new is None or new is child:
                visit(child, f"{qualified}.", depth)
                continue
            if not isinstance(new, nn.Module):
                raise ValueError(
                    f"policies: the replacement for {qualified} ({type(child).__name__}) returned "
                    f"{type(new).__name__}, not a torch.nn.Module or None"
                )
            new = _place(new, child, model).train(child.training)
            seen[id(child)] = (child, new)
            seen[id(new)] = (new, new)
            setattr(parent, name, new)
            _update_optimizers(optimizers, child, new)
            replaced[qualified] = new
            if recurse_on_replacements:
                if depth > 64:
                    raise ValueError(
                        f"policies: replacing {qualified} goes on without end (a replacement holds "
                        "a module of the class it replaces); use recurse_on_replacements=False"
                    )
                visit(new, f"{qualified}.", depth + 1)

    visit(model, "", 0)
    for recording in _RECORDINGS.get():
        recording.extend(replaced)
    if not replaced:
        names = ", ".join(c.__name__ for c in policies)
        warn_from_callers_line(
            f"{method or 'replace_module_classes'}: no module of the model matched ({names}); the model is unchanged",
            NoModulesReplacedWarning,
        )
    return replaced


def class_path(cls: type) -> str:
    """``cls``'s import path, ``module.QualifiedName``: how a :class:`Registry` names a class it
    has not imported (``"transformers.models.bert.modeling_bert.BertSelfAttention"``)."""
    return f"{cls.__module__}.{cls.__qualname__}"


class Registry:
    """The module classes one surgery method knows how to change, each with its policy, as
    Composer's per-method ``policy_registry``; a user registers a class of their own with
    :meth:`register`.

    A class is registered as a class or by its import path (:func:`class_path`), so the library
    imports Hugging Face transformers, torchvision or timm only where the model already holds their
    classes. A module matches an entry when its class, or a class it derives from, is that entry;
    the policy of the nearest such class decides.

    Example::

        >>> from torch import nn
        >>> registry = Registry("apply_example", "example.registry")
        >>> registry.register(nn.ReLU, lambda module, index: nn.GELU())
        >>> model = nn.Sequential(nn.Linear(2, 2), nn.ReLU())
        >>> sorted(registry.apply(model)), type(model[1]).__name__
        (['1'], 'GELU')
    """

    def __init__(self, method: str, where: str):
        """``method``: the functional form's name, which the warning gives; ``where``: the import
        path users register at (``"algorithms.alibi.registry"``)."""
        self.method, self.where = method, where
        self._policies: dict[str, Policy] = {}

    def register(self, cls: type | str, policy: Policy) -> None:
        """Change every module of class ``cls`` (a class, or its import path) with ``policy``; a
        class registered again takes the new policy."""
        if isinstance(cls, type):
            if not issubclass(cls, nn.Module):
                raise ValueError(f"{self.method}: register({cls!r}): not a torch.nn.Module class")
            cls = class_path(cls)
        if not isinstance(cls, str) or "." not in cls:
            raise ValueError(
                f"{self.method}: register({cls!r}): give a module class or its import path 'package.Class'"
            )
        if not callable(policy):
            raise ValueError(f"{self.method}: register({cls}, {policy!r}): the policy is not callable")
        self._policies[cls] = policy

    def unregister(self, cls: type | str) -> None:
        """Forget ``cls`` (a class, or its import path); a KeyError naming it where it is not registered."""
        path = class_path(cls) if isinstance(cls, type) else cls
        if path not in self._policies:
            raise KeyError(f"{self.method}: {path} is not registered (known: {', '.join(self._policies) or 'none'})")
        del self._policies[path]

    def policy(self, cls: type | str) -> Policy:
        """The policy registered for ``cls`` (a class, or its import path); a KeyError where none is."""
        path = class_path(cls) if isinstance(cls, type) else cls
        if path not in self._policies:
            raise KeyError(f"{self.method}: {path} is not registered (known: {', '.join(self._policies) or 'none'})")
        return self._policies[path]

    def known(self) -> list[str]:
        """The import paths of the registered classes, in registration order."""
        return list(self._policies)

    def policies(self, model: nn.Module) -> dict[type, Policy]:
        """``{class: policy}`` for the classes of ``model``'s modules that match an entry (the
        module's own class, or the nearest registered class it derives from)."""
        found: dict[type, Policy] = {}
        for module in model.modules():
            cls = type(module)
            if cls in found:
                continue
            for base in cls.__mro__:
                policy = self._policies.get(class_path(base))
                if policy is not None:
                    found[cls] = policy
                    break
        return found

    def apply(
        self,
        model: nn.Module,
        optimizers: torch.optim.Optimizer | Iterable[torch.optim.Optimizer] | None = None,
        recurse_on_replacements: bool = False,
        **options: Any,
    ) -> dict[str, nn.Module]:
        """:func:`replace_module_classes` with the policies of the classes ``model`` holds, each
        called as ``policy(module, index, **options)`` (the method's own settings, e.g. ALiBi's
        ``max_sequence_length``). A model holding none of them is left unchanged with one warning
        (:class:`NoModulesReplacedWarning`) that names the classes this method knows and how to
        register one."""
        policies = self.policies(model)
        if not policies:
            names = [path.rsplit(".", 1)[-1] for path in self._policies]
            short = (
                ", ".join(
                    name if names.count(name) == 1 else f"{path.split('.', 1)[0]}.{name}"
                    for path, name in zip(self._policies, names, strict=True)
                )
                or "none"
            )
            warn_from_callers_line(
                f"{self.method}: {type(model).__name__} holds none of the module classes it knows ({short}); "
                f"the model is unchanged. Register your own class with {self.where}.register"
                "(YourModuleClass, policy), where policy(module, index, **options) returns the replacement "
                "(or None to keep the module)",
                NoModulesReplacedWarning,
            )
            return {}
        if options:
            policies = {cls: functools.partial(policy, **options) for cls, policy in policies.items()}
        return replace_module_classes(model, policies, optimizers, recurse_on_replacements, method=self.method)
