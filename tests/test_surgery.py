"""The module-surgery helper, against its contract: the modules a policy matches are replaced in
their parents (and nothing else is), each on the original's device and in its dtype; optimizers
drop the old parameters and train the new ones; the replaced modules are returned; a surgery
that matches nothing warns, naming the method."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

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
    model = _net()
    seen = []

    def policy(module, index):
        seen.append(index)
        return nn.Tanh() if index == 1 else None

    replaced = replace_module_classes(model, {nn.ReLU: policy})
    assert seen == [0, 1] and list(replaced) == ["2.1"]
    assert isinstance(model[1], nn.ReLU) and isinstance(model[2][1], nn.Tanh)


def test_the_count_on_a_reference_resnet_equals_its_modules_of_that_class():
    model = resnet20(10)
    convs = sum(isinstance(m, nn.Conv2d) for m in model.modules())
    replaced = replace_module_classes(model, {nn.Conv2d: lambda m, i: nn.Conv2d(m.in_channels, m.out_channels,
                                                                                 m.kernel_size, m.stride,
                                                                                 m.padding, bias=False)})
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
    replace_module_classes(model, {nn.Linear: lambda m, i: nn.Linear(m.in_features, m.out_features)
                                   if i == 0 else None}, optimizers=opt)
    held = [p for g in opt.param_groups for p in g["params"]]
    assert all(p is not old for p in held) and old not in opt.state
    assert sum(p is model[0].weight for p in held) == 1 and len(held) == len(list(model.parameters()))
    new = model[0].weight.detach().clone()
    opt.zero_grad()
    model(torch.randn(2, 4)).sum().backward()
    opt.step()
    assert not torch.equal(model[0].weight, new)  # the new parameter is trained


def test_a_parameter_the_replacement_keeps_keeps_its_optimizer_state():
    class Wrapped(nn.Module):
        def __init__(self, linear):
            super().__init__()
            self.weight, self.bias = linear.weight, linear.bias  # the same tensors

        def forward(self, x):
            return nn.functional.linear(x, self.weight, self.bias)

    model = _net()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model(torch.randn(2, 4)).sum().backward()
    opt.step()
    momentum = opt.state[model[0].weight]["momentum_buffer"].clone()
    replace_module_classes(model, {nn.Linear: lambda m, i: Wrapped(m) if i == 0 else None}, optimizers=opt)
    assert torch.equal(opt.state[model[0].weight]["momentum_buffer"], momentum)


def test_nothing_matched_warns_naming_the_method_and_changes_nothing():
    model = _net()
    before = repr(model)
    with pytest.warns(NoModulesReplacedWarning, match=r"^BlurPool: no module of the model matched \(Conv2d\)"):
        assert replace_module_classes(model, {nn.Conv2d: lambda m, i: None}, method="BlurPool") == {}
    assert repr(model) == before


def test_replacements_are_not_visited_unless_asked():
    model = nn.Sequential(nn.ReLU())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        replace_module_classes(model, {nn.ReLU: lambda m, i: nn.Sequential(nn.ReLU(), nn.Identity())})
    assert isinstance(model[0], nn.Sequential) and isinstance(model[0][0], nn.ReLU)
    with pytest.raises(ValueError, match="^policies: replacing"):
        replace_module_classes(model, {nn.ReLU: lambda m, i: nn.Sequential(nn.ReLU())}, recurse_on_replacements=True)


def test_bad_input_is_refused_naming_the_argument():
    with pytest.raises(ValueError, match="^model: is wrapped"):
        replace_module_classes(nn.DataParallel(_net()), {nn.ReLU: lambda m, i: None})
    with pytest.raises(ValueError, match="^policies: key 'ReLU'"):
        replace_module_classes(_net(), {"ReLU": lambda m, i: None})
    with pytest.raises(ValueError, match="^policies: the replacement for 1 \\(ReLU\\) returned int"):
        replace_module_classes(_net(), {nn.ReLU: lambda m, i: 3})
