"""Fine-tuning an adapter: what the Trainer and the Loop train and checkpoint of a ``peft`` model.

``peft.get_peft_model(model, LoraConfig(...))`` freezes every parameter of ``model`` (the base)
and adds the adapter's (LoRA's ``lora_A`` and ``lora_B``), which alone keep ``requires_grad=True``.
So that only the adapter trains and is saved:

- **The optimizer holds the trainable parameters only.** The Trainer and the :class:`~algorithms.core.Loop`
  call their default optimizer and any optimizer function they are given on
  :func:`trainable_parameters` (``requires_grad=True``), so no optimizer state is kept for a frozen
  parameter. For a model without frozen parameters that is every parameter, in the same order: nothing
  changes. An optimizer object passed ready-made is used as it is.
- **The checkpoint holds the adapter only.** For a peft model, :meth:`State.state_dict
  <algorithms.core.State.state_dict>`'s ``model`` is :func:`model_state_dict`: peft's
  ``get_peft_model_state_dict`` (the tensors peft's ``save_pretrained`` writes: the adapter's, and
  those of ``modules_to_save``), and the state says so: ``model_form`` is :data:`PEFT_ADAPTER` (else
  :data:`FULL`, the whole model's ``state_dict()``), and ``adapter_config`` is the adapter's
  configuration as plain data (:func:`adapter_config`). Loading puts the tensors back with peft's
  ``set_peft_model_state_dict``; the base's weights are not in the file, so a resumed run builds the
  same base (the same pretrained weights) and wraps it with the same configuration. A state of the
  other form, or of another adapter configuration, is refused with one line
  (:func:`model_form_problem`) before anything changes.
- **Parallel modes.** One process, ``dp``, ``ddp`` and ``accelerate`` (its DDP and one-process modes)
  save through :meth:`State.state_dict <algorithms.core.State.state_dict>`, so their checkpoints hold
  the adapter. ``fsdp`` and ``deepspeed`` write the whole model in forms of their own (FSDP's gathered
  state dict, DeepSpeed's folder), so a peft model is refused there (:func:`check_adapter_model`).
- A peft model holding more than one adapter is refused: its checkpoint holds one.

Other parameter-efficient methods peft implements (LoHa, IA3, prompt tuning) are peft models too
and take the same path; LoRA is the one tested here. Module surgery does not change a frozen part
of a model: see :func:`algorithms.surgery.replace_module_classes`.

Nothing here imports peft: a model is a peft model only where peft was imported to make it.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Mapping
from typing import Any

import torch

from .distributed import unwrap_model

__all__ = [
    "FULL",
    "PEFT_ADAPTER",
    "adapter_config",
    "check_adapter_model",
    "is_peft_model",
    "load_model_state_dict",
    "model_form",
    "model_form_problem",
    "model_state_dict",
    "trainable_parameters",
]

#: ``model_form`` of a state holding the whole model's ``state_dict()`` (a state without the key too:
#: checkpoints written before adapters were checkpointed alone hold the whole model).
FULL = "full"
#: ``model_form`` of a state holding a peft model's adapter alone (``get_peft_model_state_dict``).
PEFT_ADAPTER = "peft_adapter"
#: Fields of a peft configuration that do not change what is trained: left out of the comparison.
_NOT_COMPARED = ("peft_version", "base_model_name_or_path", "revision", "inference_mode")
#: The parallel modes that write their checkpoints through ``State.state_dict`` (and so the adapter).
_ADAPTER_PARALLELS = ("single", "dp", "ddp", "accelerate")


def trainable_parameters(params: Iterable[torch.nn.Parameter]) -> list[torch.nn.Parameter]:
    """Those of ``params`` (a model's ``parameters()``) with ``requires_grad=True``, in order: what the
    Trainer's and the Loop's optimizers are built over."""
    return [p for p in params if p.requires_grad]


def is_peft_model(model: torch.nn.Module) -> bool:
    """Whether ``model`` (unwrapped from DataParallel or DDP) is a ``peft.PeftModel``."""
    peft = sys.modules.get("peft")
    return peft is not None and isinstance(unwrap_model(model), peft.PeftModel)


def model_form(model: torch.nn.Module) -> str:
    """:data:`PEFT_ADAPTER` for a peft model, else :data:`FULL`."""
    return PEFT_ADAPTER if is_peft_model(model) else FULL


def _adapter_name(model: Any) -> str:
    names = list(model.peft_config)
    if len(names) != 1:
        raise ValueError(
            f"a peft model with adapters {names}: its checkpoint holds one adapter — delete the others "
            "(model.delete_adapter(name)) before training, or save them with peft's save_pretrained"
        )
    return names[0]


def model_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """What a checkpoint holds of ``model`` (unwrapped from DataParallel or DDP): a peft model's
    adapter (``peft.get_peft_model_state_dict``), else the whole ``state_dict()``."""
    model = unwrap_model(model)
    if not is_peft_model(model):
        return model.state_dict()
    from peft import get_peft_model_state_dict

    return get_peft_model_state_dict(model, adapter_name=_adapter_name(model))


def load_model_state_dict(model: torch.nn.Module, saved: Mapping[str, torch.Tensor]) -> None:
    """Put back what :func:`model_state_dict` returned (checked beforehand: :func:`model_form_problem`
    and the keys): into a peft model's adapter with ``peft.set_peft_model_state_dict``, else with
    ``load_state_dict``."""
    model = unwrap_model(model)
    if not is_peft_model(model):
        model.load_state_dict(saved)
        return
    from peft import set_peft_model_state_dict

    set_peft_model_state_dict(model, dict(saved), adapter_name=_adapter_name(model))


def _plain(value: Any) -> Any:
    """A set as a sorted list, anything else JSON cannot write as its ``str``."""
    if isinstance(value, (set, frozenset)):
        return sorted(value, key=str)
    return str(value)


def adapter_config(model: torch.nn.Module) -> dict[str, Any] | None:
    """A peft model's adapter configuration (``peft_config[name].to_dict()``) as plain data (sets as
    sorted lists, enums as their values), which a checkpoint can hold and ``torch.load(weights_only=True)``
    reads; None for another model."""
    model = unwrap_model(model)
    if not is_peft_model(model):
        return None
    config = model.peft_config[_adapter_name(model)].to_dict()
    return json.loads(json.dumps(config, default=_plain, sort_keys=True))


def model_form_problem(saved: Mapping[str, Any], model: torch.nn.Module) -> str | None:
    """Why the state ``saved`` (a ``State.state_dict()``) cannot be loaded into ``model`` for the form
    of its weights, in words that follow the file's name, or None: a whole model's weights for a peft
    model or an adapter's for another model, or an adapter of another configuration (the fields that
    change training: all but ``peft_version``, ``base_model_name_or_path``, ``revision`` and
    ``inference_mode``)."""
    saved_form, form = saved.get("model_form", FULL), model_form(model)
    if saved_form == PEFT_ADAPTER and form == FULL:
        return (
            "holds a peft adapter's weights only (model_form 'peft_adapter'), this model is not a peft model — "
            "resume with the base model wrapped as it was saved, peft.get_peft_model(model, the same config)"
        )
    if saved_form == FULL and form == PEFT_ADAPTER:
        return (
            "holds a whole model's weights (model_form 'full'), this model is a peft model, whose checkpoints "
            "hold its adapter alone — resume with the model as it was saved, without get_peft_model"
        )
    if saved_form != form:
        return f"holds weights of model_form {saved_form!r}, which this library does not know — write it again"
    if form == PEFT_ADAPTER:
        before, now = saved.get("adapter_config") or {}, adapter_config(model) or {}
        for field in sorted((set(before) | set(now)) - set(_NOT_COMPARED)):
            if before.get(field) != now.get(field):
                return (
                    f"saved with a peft adapter whose {field} is {before.get(field)!r}, this model's is "
                    f"{now.get(field)!r} — resume with the same adapter configuration"
                )
    return None


def check_adapter_model(model: torch.nn.Module, parallel: str) -> None:
    """Refuse, with one line, a peft model the Trainer cannot train and checkpoint as an adapter in
    the parallel mode ``parallel``: under ``fsdp`` or ``deepspeed`` (their checkpoints hold the whole
    model, in forms of their own), or holding more than one adapter."""
    if not is_peft_model(model):
        return
    if parallel not in _ADAPTER_PARALLELS:
        raise ValueError(
            f"a peft model under parallel={parallel!r}: this mode checkpoints the whole model in a form of its "
            "own, not the adapter the Trainer saves for a peft model — use parallel='ddp' (each rank then keeps "
            "gradients and optimizer state for the adapter alone) or 'single'"
        )
    _adapter_name(unwrap_model(model))
