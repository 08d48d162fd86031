"""The module-surgery helper, against its contract: the modules a policy matches are replaced in
their parents (and nothing else is), each on the original's device and in its dtype; optimizers
drop the old parameters and train the new ones; the replaced modules are returned; a surgery
that matches nothing warns, naming the method."""

from __future__ import annotations

import re
import warnings

import pytest
import torch
from methods.trainer_support import line_that_called_into  # tests/methods, as a namespace package
from torch import nn

import algorithms.blurpool.blurpool as blurpool
import algorithms.surgery as surgery
from algorithms.functional import apply_blurpool
from algorithms.models import resnet20
from algorithms.surgery import NoModulesReplacedWarning, count_module_instances, replace_module_classes


def _net():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Sequential(nn.Linear(8, 8), nn.ReLU()), nn.Linear(8, 2))


def test_every_matching_module_is_replaced_in_its_parent_and_returned_by_name():
    model = _net()
    replaced = replace_module_classes(model, {nn.ReLU: lambda m, i: nn.GELU()})
    assert list(replaced) == ["1", "2.1"]
    assert isinstance(model[1], nn.GELU) and isinstance(model[2][1], nn.GELU)
    assert replaced["2.1"] is model[2][1]
    assert count_module_instances(model, nn.ReLU) == 0 and count_module_instances(model, nn.Linear) == 3


def test_the_index_counts_each_classs_matches_in_walk_order_and_none_keeps_a_module():
    model = nn.Sequential(_net(), nn.ReLU())
    seen = []

    def policy(module, index):
        seen.append(index)
        return nn.Tanh() if index == 1 else None

    replaced = replace_module_classes(model, {nn.ReLU: policy, nn.Linear: lambda m, i: None})
    assert seen == [0, 1, 2] and list(replaced) == ["0.2.1"]
    assert isinstance(model[0][1], nn.ReLU) and isinstance(model[0][2][1], nn.Tanh) and isinstance(model[1], nn.ReLU)


def test_the_count_on_a_reference_resnet_equals_its_modules_of_that_class():
    model = resnet20(10)
    convs = sum(isinstance(m, nn.Conv2d) for m in model.modules())
    replaced = replace_module_classes(
        model,
        {
            nn.Conv2d: lambda m, i: nn.Conv2d(
                m.in_channels, m.out_channels, m.kernel_size, m.stride, m.padding, bias=False
            )
        },
    )
    assert len(replaced) == convs == 21  # the stem, 18 in the blocks, 2 downsampling shortcuts
    assert model(torch.randn(2, 3, 16, 16)).shape == (2, 10)


def test_replacements_are_placed_in_the_originals_dtype():
    model = _net().double()
    replace_module_classes(model, {nn.Linear: lambda m, i: nn.Linear(m.in_features, m.out_features)})
    assert all(p.dtype == torch.float64 for p in model.parameters())
    assert model(torch.randn(3, 4, dtype=torch.float64)).dtype == torch.float64
    # an integer buffer stays an integer
    bn = nn.Sequential(nn.BatchNorm1d(3)).double()
    replace_module_classes(bn, {nn.BatchNorm1d: lambda m, i: nn.BatchNorm1d(3)})
    assert bn[0].num_batches_tracked.dtype == torch.long and bn[0].weight.dtype == torch.float64


def test_a_replacement_takes_the_originals_train_or_eval_mode():
    model = _net().eval()
    replace_module_classes(model, {nn.ReLU: lambda m, i: nn.Sequential(nn.Dropout(0.5), nn.ReLU())})
    assert not model[1].training and not model[1][0].training
    x = torch.randn(3, 4)
    assert torch.equal(model(x), model(x))  # no dropout in eval mode


def test_a_replacement_of_a_module_without_tensors_takes_the_models_dtype():
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU()).double()
    replace_module_classes(model, {nn.ReLU: lambda m, i: nn.Sequential(nn.Linear(4, 4), nn.ReLU())})
    assert model[1][0].weight.dtype == torch.float64


class _IndexOnly(nn.Module):
    """A module whose only tensor is an integer buffer."""

    def __init__(self):
        super().__init__()
        self.register_buffer("index", torch.arange(3))


# Each case builds its model afresh: the surgery changes it in place, and a case may run twice in one
# process (mutmut runs the suite again after collecting its statistics).
@pytest.mark.parametrize(
    ("build", "replace", "dtype"),
    [
        # the original's tensors are its children's: parameters, or buffers only
        (
            lambda: nn.Sequential(nn.Linear(4, 4), nn.Sequential(nn.Linear(4, 4)).double()),
            {nn.Sequential: lambda m, i: nn.Sequential(nn.Linear(4, 4))},
            torch.float64,
        ),
        (
            lambda: nn.Sequential(nn.Linear(4, 4), nn.Sequential(nn.BatchNorm1d(4, affine=False)).double()),
            {nn.Sequential: lambda m, i: nn.Sequential(nn.BatchNorm1d(4, affine=False))},
            torch.float64,
        ),
        # an original without tensors in a model whose only tensors are its children's buffers
        (
            lambda: nn.Sequential(nn.Sequential(nn.BatchNorm1d(4, affine=False)).double(), nn.ReLU()),
            {nn.ReLU: lambda m, i: nn.Sequential(nn.Linear(4, 4))},
            torch.float64,
        ),
        # an original whose only tensor is an integer buffer: no floating dtype to give
        (
            lambda: nn.Sequential(nn.Linear(4, 4), _IndexOnly()),
            {_IndexOnly: lambda m, i: nn.Linear(4, 4)},
            torch.float32,
        ),
    ],
)
def test_a_replacement_takes_the_floating_dtype_of_the_tensors_below_the_original(build, replace, dtype):
    replaced = replace_module_classes(build(), replace)
    assert len(replaced) == 1
    [new] = replaced.values()
    tensors = [*new.parameters(), *new.buffers()]
    assert tensors and all(t.dtype == dtype for t in tensors if t.is_floating_point())


@pytest.mark.cuda
def test_replacements_are_placed_on_the_originals_device():
    model = _net().cuda()
    replace_module_classes(model, {nn.Linear: lambda m, i: nn.Linear(m.in_features, m.out_features)})
    assert all(p.is_cuda for p in model.parameters())


def test_an_optimizer_trains_the_replacements_and_holds_none_of_the_old_parameters():
    model = _net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.randn(2, 4)).sum().backward()
    opt.step()
    old = model[0].weight
    replace_module_classes(
        model, {nn.Linear: lambda m, i: nn.Linear(m.in_features, m.out_features) if i == 0 else None}, optimizers=opt
    )
    held = [p for g in opt.param_groups for p in g["params"]]
    assert all(p is not old for p in held) and old not in opt.state
    assert sum(p is model[0].weight for p in held) == 1 and len(held) == len(list(model.parameters()))
    new = model[0].weight.detach().clone()
    opt.zero_grad()
    model(torch.randn(2, 4)).sum().backward()
    opt.step()
    assert not torch.equal(model[0].weight, new)  # the new parameter is trained


class _SameTensors(nn.Module):
    """A replacement for a Linear that holds the Linear's own weight and bias tensors."""

    def __init__(self, linear):
        super().__init__()
        self.weight, self.bias = linear.weight, linear.bias

    def forward(self, x):
        return nn.functional.linear(x, self.weight, self.bias)


def test_a_parameter_the_replacement_keeps_keeps_its_optimizer_state():
    model = _net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.randn(2, 4)).sum().backward()
    opt.step()
    momentum = opt.state[model[0].weight]["momentum_buffer"].clone()
    replace_module_classes(model, {nn.Linear: lambda m, i: _SameTensors(m) if i == 0 else None}, optimizers=opt)
    assert torch.equal(opt.state[model[0].weight]["momentum_buffer"], momentum)


def test_the_group_that_held_the_original_takes_the_replacement_whatever_its_place():
    model = _net()
    opt = torch.optim.SGD([{"params": model[3].parameters()}, {"params": model[0].parameters(), "lr": 0.5}], lr=0.1)
    last = [id(p) for p in model[3].parameters()]
    replace_module_classes(
        model, {nn.Linear: lambda m, i: nn.Linear(m.in_features, m.out_features) if i == 0 else None}, optimizers=[opt]
    )
    assert [id(p) for p in opt.param_groups[0]["params"]] == last
    assert [id(p) for p in opt.param_groups[1]["params"]] == [id(p) for p in model[0].parameters()]


def test_the_replacements_parameters_take_the_originals_place_in_its_group():
    """The group keeps its order, which an optimizer's state_dict numbers parameters by: a replacement
    holding the original's own tensors leaves it as it was, and new tensors stand where the old ones stood."""
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 4), nn.Linear(4, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    order = [id(p) for p in opt.param_groups[0]["params"]]
    replace_module_classes(model, {nn.Linear: lambda m, i: _SameTensors(m) if i == 1 else None}, optimizers=opt)
    assert [id(p) for p in opt.param_groups[0]["params"]] == order
    replace_module_classes(model, {nn.Linear: lambda m, i: nn.Linear(4, 4) if i == 0 else None}, optimizers=opt)
    assert [id(p) for p in opt.param_groups[0]["params"]] == [id(p) for p in model.parameters()]


def test_a_parameter_the_optimizer_already_trains_elsewhere_is_not_added_twice():
    """A replacement tied to another layer's weight: the optimizer holds each parameter once."""

    class Tied(nn.Module):
        def __init__(self, weight):
            super().__init__()
            self.weight = weight  # the first layer's, as tied weights are
            self.bias = nn.Parameter(torch.zeros(weight.shape[0]))

        def forward(self, x):
            return nn.functional.linear(x, self.weight, self.bias)

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    old = list(model[2].parameters())
    replace_module_classes(model, {nn.Linear: lambda m, i: Tied(model[0].weight) if i == 1 else None}, optimizers=opt)
    held = [id(p) for group in opt.param_groups for p in group["params"]]
    assert sorted(held) == sorted(id(p) for p in model.parameters())  # each once, the new bias too
    assert not {id(p) for p in old} & set(held)


def test_the_state_of_a_parameter_the_replacement_does_not_keep_is_dropped():
    """Other names (a Linear inside a Sequential): nothing carries over, and nothing stays behind."""
    model = _net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.randn(2, 4)).sum().backward()
    opt.step()
    old = list(model[0].parameters())
    replace_module_classes(
        model,
        {nn.Linear: lambda m, i: nn.Sequential(nn.Linear(m.in_features, m.out_features)) if i == 0 else None},
        optimizers=opt,
    )
    assert not any(p in opt.state for p in old)
    assert not any(p in opt.state for p in model[0].parameters())
    assert len(opt.state) == len(list(model.parameters())) - 2


@pytest.mark.parametrize(("method", "name"), [("BlurPool", "BlurPool"), (None, "replace_module_classes")])
def test_nothing_matched_warns_naming_the_method_and_changes_nothing(method, name):
    model = _net()
    before = repr(model)
    message = f"{name}: no module of the model matched (Conv2d, BatchNorm2d); the model is unchanged"
    with pytest.warns(NoModulesReplacedWarning, match=f"^{re.escape(message)}$") as record:
        assert (
            replace_module_classes(
                model, {nn.Conv2d: lambda m, i: None, nn.BatchNorm2d: lambda m, i: None}, method=method
            )
            == {}
        )
    assert repr(model) == before
    assert len(record) == 1


def test_the_warning_names_the_line_that_called_into_the_library():
    """Called directly, the caller's line; through a method's functional form (a BlurPool that finds
    nothing to blur), the line that called the form, not a line of the library's."""
    for path, call in (
        (surgery.__file__, lambda: replace_module_classes(_net(), {nn.Conv2d: lambda m, i: None})),
        (blurpool.__file__, lambda: apply_blurpool(nn.Sequential(nn.Linear(2, 2)))),
    ):
        with pytest.warns(NoModulesReplacedWarning) as record:
            caller = line_that_called_into(path, call)
        assert len(record) == 1 and (record[0].filename, record[0].lineno) == caller


def test_replacements_are_not_visited_unless_asked():
    model = nn.Sequential(nn.ReLU())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        replace_module_classes(model, {nn.ReLU: lambda m, i: nn.Sequential(nn.ReLU(), nn.Identity())})
    assert isinstance(model[0], nn.Sequential) and isinstance(model[0][0], nn.ReLU)
    endless = "0." * 65 + "0"  # the 66th replacement, inside the 65 before it
    message = (
        f"policies: replacing {endless} goes on without end (a replacement holds a module of the class it "
        "replaces); use recurse_on_replacements=False"
    )
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        replace_module_classes(
            nn.Sequential(nn.ReLU()), {nn.ReLU: lambda m, i: nn.Sequential(nn.ReLU())}, recurse_on_replacements=True
        )


def test_replacements_inside_replacements_are_named_and_followed_65_deep():
    """With recurse_on_replacements=True each replacement inside a replacement is returned by its
    qualified name; a nesting that ends within 65 replacements is made in full."""
    model = nn.Sequential(nn.ReLU())
    replaced = replace_module_classes(
        model, {nn.ReLU: lambda m, i: nn.Sequential(nn.ReLU()) if i < 65 else None}, recurse_on_replacements=True
    )
    assert list(replaced) == [".".join(["0"] * depth) for depth in range(1, 66)]
    innermost = replaced["0." * 64 + "0"]
    assert isinstance(innermost[0], nn.ReLU)


def test_the_limit_counts_replacements_not_the_containers_around_them():
    """The 65 replacements of the limit are nested replacements: containers the visit walks
    through on its way, here three Sequentials deep, do not count toward it."""
    model = nn.Sequential(nn.Sequential(nn.Sequential(nn.ReLU())))
    replaced = replace_module_classes(
        model, {nn.ReLU: lambda m, i: nn.Sequential(nn.ReLU()) if i < 65 else None}, recurse_on_replacements=True
    )
    assert len(replaced) == 65 and list(replaced)[-1] == "0.0." + "0." * 64 + "0"


def test_bad_input_is_refused_naming_the_argument():
    message = (
        "model: is wrapped for a parallel mode; apply surgery to the model before wrapping it "
        "(the Trainer does it at Event.INIT)"
    )
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        replace_module_classes(nn.DataParallel(_net()), {nn.ReLU: lambda m, i: None})
    with pytest.raises(ValueError, match="^policies: key 'ReLU'"):
        replace_module_classes(_net(), {"ReLU": lambda m, i: None})
    with pytest.raises(ValueError, match="^policies: the replacement for 1 \\(ReLU\\) returned int"):
        replace_module_classes(_net(), {nn.ReLU: lambda m, i: 3})


def test_recording_replacements_collects_every_replacement_inside_the_block_nested_or_not():
    model = _net()
    replace_module_classes(model, {nn.ReLU: lambda m, i: nn.GELU()})  # outside any block: not recorded
    with surgery.recording_replacements() as outer:
        replace_module_classes(model, {nn.GELU: lambda m, i: nn.Tanh()})
        with surgery.recording_replacements() as inner:
            replace_module_classes(model, {nn.Linear: lambda m, i: nn.Linear(m.in_features, m.out_features)})
    assert inner == ["0", "2.0", "3"]
    assert outer == ["1", "2.1", "0", "2.0", "3"]
    with surgery.recording_replacements() as after:
        pass
    assert after == []


def test_a_module_reachable_under_two_names_is_replaced_once_and_the_optimizer_holds_its_weights():
    # Composer's behaviour (the reproduction): an aliased module, reached as model.net[0]
    # and model.conv1, becomes one replacement under both names, and the optimizer holds its weights.
    conv = nn.Conv2d(32, 8, 3, stride=2)
    model = nn.Module()
    model.net = nn.Sequential(conv)
    model.conv1 = conv
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    apply_blurpool(model, optimizers=optimizer)
    assert model.net[0] is model.conv1 and isinstance(model.conv1, blurpool.BlurConv2d)
    held = [p for group in optimizer.param_groups for p in group["params"]]
    assert {id(p) for p in held} == {id(p) for p in model.parameters()} and len(held) == 2


def test_a_shared_module_is_offered_to_the_policy_once():
    shared = nn.Linear(4, 4)
    model = nn.Sequential(nn.Sequential(shared), nn.Sequential(shared))
    calls = []

    def policy(module, index):
        calls.append(index)
        return nn.Linear(4, 4)

    replaced = replace_module_classes(model, {nn.Linear: policy})
    assert calls == [0] and list(replaced) == ["0.0"]
    assert model[0][0] is model[1][0] is replaced["0.0"]


# -- frozen parameters: surgery leaves a frozen part of the model alone, or says why not -------------


class _Head(nn.Linear):
    pass


def _partly_frozen():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Sequential(nn.Linear(4, 8), nn.ReLU()), nn.Dropout(0.1), _Head(8, 2))
    model[0].requires_grad_(False)  # a frozen part, as a peft model's base or a frozen backbone
    return model


@pytest.mark.parametrize(
    ("policies", "first"),
    [
        ({nn.Linear: lambda m, i: nn.Linear(m.in_features, m.out_features)}, "0.0 (Linear)"),
        ({nn.Sequential: lambda m, i: None}, "0 (Sequential)"),  # it holds the frozen layer below it
    ],
    ids=["the-frozen-module", "a-module-above-it"],
)
def test_a_policy_matching_a_module_that_holds_a_frozen_parameter_is_refused_before_anything_changes(policies, first):
    model = _partly_frozen()
    before = [type(m) for m in model.modules()]
    with pytest.raises(ValueError) as refused:
        replace_module_classes(model, {nn.ReLU: lambda m, i: nn.GELU(), **policies}, method="Example")
    assert str(refused.value) == (
        f"Example: {first} holds frozen parameters (0.0.weight has requires_grad=False), a part of the model "
        "that does not train and that surgery would change — run Example on the model before freezing it (before "
        "peft.get_peft_model), or leave it out"
    )
    assert [type(m) for m in model.modules()] == before  # not even the ReLU, which a policy also matched


def test_modules_without_parameters_and_trainable_ones_are_replaced_in_a_partly_frozen_model():
    model = _partly_frozen()
    frozen = [p.clone() for p in model[0].parameters()]
    replaced = replace_module_classes(
        model,
        {nn.ReLU: lambda m, i: nn.GELU(), nn.Dropout: lambda m, i: nn.Identity(), _Head: lambda m, i: nn.Linear(8, 3)},
    )
    assert list(replaced) == ["0.1", "1", "2"]
    assert [type(m).__name__ for m in model.modules()][1:] == ["Sequential", "Linear", "GELU", "Identity", "Linear"]
    assert all(torch.equal(p, q) for p, q in zip(model[0].parameters(), frozen, strict=True))


def test_a_policy_that_preserves_parameters_is_applied_to_frozen_modules():
    """Activation Checkpointing's kind: the replacement holds the module's own parameters, under the
    same names, and computes the same function; marked, it runs on frozen modules, given with the
    method's options (functools.partial, as a Registry passes them) too."""
    import functools

    def same_layer(module, index, scale=1.0):
        new = nn.Linear.__new__(type(module))
        new.__dict__.update({k: v.copy() if isinstance(v, dict) else v for k, v in vars(module).items()})
        return new

    marked = surgery.preserves_parameters(same_layer)
    for policy in (marked, functools.partial(marked, scale=2.0)):
        model = _partly_frozen()
        frozen = list(model[0][0].parameters())
        replaced = replace_module_classes(model, {nn.Linear: policy})
        assert list(replaced) == ["0.0", "2"]
        assert all(p is q for p, q in zip(model[0][0].parameters(), frozen, strict=True))
