"""Image operations shared by the methods that augment with random chains of them (RandAugment,
AugMix): Composer's augmentation sets, written on batched torch tensors.

The operations are those of AugMix's reference code as Composer keeps them
(``composer/algorithms/utils/augmentation_primitives.py``), with Composer's mapping from a
severity in ``[0, 10]`` to each operation's magnitude. Each works on a batch ``(N, C, H, W)``,
uint8 in ``[0, 255]`` or floating point in ``[0, 1]``, every image with its own magnitude. The
geometric operations are one batched ``affine_grid`` + ``grid_sample``; the others are tensor
arithmetic, histograms included, with no Python loop over images and no host synchronisation.

Private: the public forms are :func:`algorithms.functional.randaugment_image` and
:func:`algorithms.functional.augmix_image` and their classes.
"""

from __future__ import annotations

import math
from abc import abstractmethod
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F

from ._pil import check_image_type, from_pil, is_pil_image, to_pil
from .core.algorithm import Algorithm
from .core.event import Event
from .core.parameters import Other, Real
from .core.state import State

__all__ = [
    "AUGMENTATION_SET",
    "AUGMENTATION_SETS",
    "OPERATIONS",
    "SEVERITY",
    "ImageAugmentation",
    "apply_operation",
    "from_unit_range",
    "random_operations",
    "resolve_augmentation_set",
    "to_unit_range",
    "working_copy",
    "restored",
]

#: Every operation name, in Composer's order; the ``*_original`` ones differ only in how their
#: enhancement factor is drawn from the severity.
OPERATIONS = (
    "autocontrast",
    "equalize",
    "posterize",
    "rotate",
    "solarize",
    "shear_x",
    "shear_y",
    "translate_x",
    "translate_y",
    "color",
    "contrast",
    "brightness",
    "sharpness",
    "color_original",
    "contrast_original",
    "brightness_original",
    "sharpness_original",
)
_GEOMETRIC = (
    "autocontrast",
    "equalize",
    "posterize",
    "rotate",
    "solarize",
    "shear_x",
    "shear_y",
    "translate_x",
    "translate_y",
)
#: Composer's sets: ``safe`` leaves out the operations that resemble the corruptions of
#: ImageNet-C and CIFAR-10-C (color, contrast, brightness, sharpness); ``original`` draws their
#: factors as AugMix's reference code does.
AUGMENTATION_SETS: dict[str, tuple[str, ...]] = {
    "all": _GEOMETRIC + ("color", "contrast", "brightness", "sharpness"),
    "safe": _GEOMETRIC,
    "original": _GEOMETRIC + ("color_original", "contrast_original", "brightness_original", "sharpness_original"),
}
_AFFINE = ("rotate", "shear_x", "shear_y", "translate_x", "translate_y")


# -- argument checks ---------------------------------------------------------------------------


#: The hyperparameters RandAugment and AugMix share, declared once.
SEVERITY = Real(low=0, high=10, note="The strength of every operation; 10 is the strongest.")


def resolve_augmentation_set(augmentation_set: str | Sequence[str]) -> tuple[str, ...]:
    """The operation names a set name or a sequence of names stands for."""
    allowed = (
        f"a set name ({', '.join(repr(k) for k in AUGMENTATION_SETS)}) or a non-empty sequence of "
        f"operation names from {', '.join(OPERATIONS)}"
    )
    if isinstance(augmentation_set, str):
        if augmentation_set not in AUGMENTATION_SETS:
            raise ValueError(f"augmentation_set={augmentation_set!r}: must be {allowed}")
        return AUGMENTATION_SETS[augmentation_set]
    if not isinstance(augmentation_set, Sequence) or not augmentation_set:
        raise ValueError(f"augmentation_set={augmentation_set!r}: must be {allowed}")
    unknown = [name for name in augmentation_set if name not in OPERATIONS]
    if unknown:
        raise ValueError(
            f"augmentation_set={augmentation_set!r}: {unknown[0]!r} is not an operation; must be {allowed}"
        )
    return tuple(augmentation_set)


AUGMENTATION_SET = Other(
    requires="'all', 'safe', 'original' or a non-empty sequence of operation names",
    parse=lambda name, value: resolve_augmentation_set(value),
    note="The operations drawn from: a set's name, or a sequence of operation names.",
)


def _check_images(img: torch.Tensor) -> None:
    check_image_type(img, "img")
    if img.ndim not in (3, 4):
        raise ValueError(f"img: needs an image (C, H, W) or a batch (N, C, H, W), got {tuple(img.shape)}")
    if img.dtype != torch.uint8 and not img.is_floating_point():
        raise ValueError(f"img: needs uint8 images in [0, 255] or floating point images in [0, 1], got {img.dtype}")


# -- the working copy: float, batched, with the input's scale ---------------------------------


class _Work:
    """A batch as the operations see it: float ``values`` on the input's scale ``peak`` (255 for
    uint8, 1 for floating point); ``integer`` rounds every result to whole levels, as PIL holds
    8-bit images between operations."""

    def __init__(self, values: torch.Tensor, peak: float, integer: bool):
        self.values, self.peak, self.integer = values, peak, integer

    def finish(self, values: torch.Tensor) -> torch.Tensor:
        values = values.clamp(0, self.peak)
        return values.round() if self.integer else values


def working_copy(img: torch.Tensor) -> _Work:
    """``img`` (checked) as a float ``(N, C, H, W)`` working batch; the input is never written to."""
    _check_images(img)
    batch = img if img.ndim == 4 else img.unsqueeze(0)
    dtype = torch.float64 if batch.dtype == torch.float64 else torch.float32
    integer = batch.dtype == torch.uint8
    return _Work(batch.to(dtype), 255.0 if integer else 1.0, integer)


def restored(values: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """Working values back to ``like``'s dtype, rank and memory format."""
    out = values.round().clamp(0, 255) if like.dtype == torch.uint8 else values
    out = out.to(like.dtype)
    if like.ndim == 3:
        return out.squeeze(0)
    if like.is_contiguous(memory_format=torch.channels_last) and not like.is_contiguous():
        out = out.contiguous(memory_format=torch.channels_last)
    return out


# -- the operations, on a working batch and per-image magnitudes ------------------------------


def _per_image(magnitude: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    return magnitude.to(x.device, x.dtype, non_blocking=True).view(-1, 1, 1, 1)


def _levels(w: _Work, x: torch.Tensor) -> torch.Tensor:
    """The 256 levels of PIL's 8-bit image (uint8 values as they are; floats rounded)."""
    return x if w.integer else (x * 255).round().clamp(0, 255)


def _gray(w: _Work, x: torch.Tensor) -> torch.Tensor:
    """``(N, 1, H, W)``: ITU-R 601 luma for RGB (PIL's ``convert("L")``), else the channel mean."""
    if x.shape[1] == 3:
        gray = 0.299 * x[:, 0:1] + 0.587 * x[:, 1:2] + 0.114 * x[:, 2:3]
    else:
        gray = x.mean(dim=1, keepdim=True)
    return gray.round() if w.integer else gray


def _blend(w: _Work, x: torch.Tensor, degenerate: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    """PIL's ``ImageEnhance``: ``degenerate + factor * (x - degenerate)``, clipped to the range."""
    return w.finish(degenerate + _per_image(factor, x) * (x - degenerate))


def _autocontrast(w: _Work, x: torch.Tensor, _: torch.Tensor) -> torch.Tensor:
    low, high = x.amin(dim=(2, 3), keepdim=True), x.amax(dim=(2, 3), keepdim=True)
    span = high - low
    stretched = (x - low) * (w.peak / torch.where(span > 0, span, torch.ones_like(span)))
    return w.finish(torch.where(span > 0, stretched, x))


def _equalize(w: _Work, x: torch.Tensor, _: torch.Tensor) -> torch.Tensor:
    """PIL's ``ImageOps.equalize``, per image and channel: the histogram of each (one
    ``scatter_add_`` over offset bins), ``step = (pixels - count of the top level) // 255`` and
    ``lut[i] = (step // 2 + pixels below i) // step``; a channel with ``step == 0`` is kept."""
    n, c, h, width = x.shape
    levels = _levels(w, x).long().reshape(n * c, h * width)
    offsets = torch.arange(n * c, device=x.device).unsqueeze(1) * 256
    hist = torch.zeros(n * c * 256, dtype=torch.long, device=x.device)
    hist.scatter_add_(0, (levels + offsets).reshape(-1), torch.ones_like(levels).reshape(-1))
    hist = hist.view(n * c, 256)
    top = hist.gather(1, levels.amax(dim=1, keepdim=True))
    step = (h * width - top) // 255
    below = hist.cumsum(dim=1) - hist
    lut = ((step // 2 + below) // step.clamp(min=1)).clamp(max=255)
    out = torch.where(step > 0, lut.gather(1, levels), levels).reshape(n, c, h, width).to(x.dtype)
    return out if w.integer else out / 255


def _posterize(w: _Work, x: torch.Tensor, bits: torch.Tensor) -> torch.Tensor:
    """Keep the top ``bits`` bits of each 8-bit level."""
    unit = _per_image(2.0 ** (8 - bits.double()), x)
    out = (_levels(w, x) / unit).floor() * unit
    return out if w.integer else out / 255


def _solarize(w: _Work, x: torch.Tensor, threshold: torch.Tensor) -> torch.Tensor:
    """Invert every value at or above ``threshold`` (in 8-bit levels, 0 to 256)."""
    return torch.where(x * (255 / w.peak) >= _per_image(threshold, x), w.peak - x, x)


def _color(w: _Work, x: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    return _blend(w, x, _gray(w, x), factor)


def _contrast(w: _Work, x: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    mean = _gray(w, x).mean(dim=(2, 3), keepdim=True)
    return _blend(w, x, mean.round() if w.integer else mean, factor)


def _brightness(w: _Work, x: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    return _blend(w, x, torch.zeros_like(x), factor)


def _sharpness(w: _Work, x: torch.Tensor, factor: torch.Tensor) -> torch.Tensor:
    """Blend with PIL's ``SMOOTH`` filter (3 x 3, weights 1 around and 5 at the centre, over 13),
    whose border pixels are the image's own."""
    degenerate = x
    if x.shape[2] > 2 and x.shape[3] > 2:
        kernel = torch.ones(3, 3, dtype=x.dtype, device=x.device)
        kernel[1, 1] = 5
        kernel = (kernel / 13).expand(x.shape[1], 1, 3, 3)
        smooth = F.conv2d(x, kernel, groups=x.shape[1])
        degenerate = x.clone()
        degenerate[:, :, 1:-1, 1:-1] = smooth.round() if w.integer else smooth
    return _blend(w, x, degenerate, factor)


def _affine_matrices(name: str, magnitude: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """``(n, 3, 3)`` float64 maps from an output pixel to the input point it samples, in pixel
    units from the top-left corner (PIL's ``Image.transform`` data ``(a, b, c, d, e, f)``)."""
    m = magnitude.double()
    matrices = torch.eye(3, dtype=torch.float64).repeat(m.shape[0], 1, 1)
    if name == "rotate":  # counter-clockwise by m degrees about the centre, as PIL's rotate
        theta = -torch.deg2rad(m)
        cos, sin = torch.cos(theta), torch.sin(theta)
        cx, cy = width / 2, height / 2
        matrices[:, 0, 0], matrices[:, 0, 1], matrices[:, 0, 2] = cos, sin, cx - cos * cx - sin * cy
        matrices[:, 1, 0], matrices[:, 1, 1], matrices[:, 1, 2] = -sin, cos, cy + sin * cx - cos * cy
    elif name == "shear_x":
        matrices[:, 0, 1] = m
    elif name == "shear_y":
        matrices[:, 1, 0] = m
    elif name == "translate_x":
        matrices[:, 0, 2] = m
    else:
        matrices[:, 1, 2] = m
    return matrices


def _warp(w: _Work, x: torch.Tensor, matrices: torch.Tensor) -> torch.Tensor:
    """Bilinear resampling of every image with its own affine map, as PIL's ``BILINEAR``
    transform: a sample point inside the image interpolates its neighbours (the edge pixels
    repeated), one outside it is filled with 0 (black).

    The sample points are computed in the working dtype element by element from the maps (float64
    maps, not ``affine_grid``'s batched matrix product, whose rounding depends on the batch and the
    machine): an image is then resampled alike whatever else its batch holds, and a point on the
    edge, such as a shear's, falls on the same side of it in a batch as alone.
    """
    height, width = x.shape[-2:]
    matrices = matrices.to(x.device, x.dtype, non_blocking=True)
    rows = torch.arange(height, dtype=x.dtype, device=x.device).add_(0.5).view(1, height, 1)
    cols = torch.arange(width, dtype=x.dtype, device=x.device).add_(0.5).view(1, 1, width)
    (a, b, c), (d, e, f) = ([matrices[:, r, k].view(-1, 1, 1) for k in range(3)] for r in range(2))
    px, py = a * cols + b * rows + c, d * cols + e * rows + f  # (n, height, width), pixel units
    inside = ((px >= 0) & (px < width) & (py >= 0) & (py < height)).unsqueeze(1)
    # pixel units -> grid_sample's normalized units (align_corners=False: the image spans [-1, 1])
    grid = torch.stack((px * (2 / width) - 1, py * (2 / height) - 1), dim=-1)
    sampled = F.grid_sample(x, grid, mode="bilinear", padding_mode="border", align_corners=False)
    return w.finish(sampled * inside)


_PIXELWISE: dict[str, Callable[[_Work, torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "autocontrast": _autocontrast,
    "equalize": _equalize,
    "posterize": _posterize,
    "solarize": _solarize,
    "color": _color,
    "contrast": _contrast,
    "brightness": _brightness,
    "sharpness": _sharpness,
}
_PRIMITIVE = {name: name.removesuffix("_original") for name in OPERATIONS}


def _apply(w: _Work, x: torch.Tensor, name: str, magnitude: torch.Tensor) -> torch.Tensor:
    primitive = _PRIMITIVE[name]
    if primitive in _AFFINE:
        return _warp(w, x, _affine_matrices(primitive, magnitude, x.shape[2], x.shape[3]))
    return _PIXELWISE[primitive](w, x, magnitude)


def apply_operation(img: torch.Tensor, name: str, magnitude: float | torch.Tensor = 0.0) -> torch.Tensor:
    """One operation with a given magnitude, in the operation's own units: degrees (rotate,
    counter-clockwise), the shear factor, pixels (translate; the image moves left or up for a
    positive value), bits kept (posterize), the 8-bit threshold (solarize) or the enhancement
    factor (color, contrast, brightness, sharpness: 1 is the image, 0 the degenerate image);
    autocontrast and equalize take none. ``magnitude`` is a number or one value per image.
    A PIL image of 8-bit levels (as Composer's ``augmentation_primitives`` take) gives one back."""
    if is_pil_image(img):
        return to_pil(apply_operation(from_pil(img, "img", eight_bit=True), name, magnitude), img)
    w = working_copy(img)
    if name not in OPERATIONS:
        raise ValueError(f"name={name!r}: must be one of {', '.join(OPERATIONS)}")
    magnitude = torch.as_tensor(magnitude, dtype=torch.float64).expand(w.values.shape[0])
    return restored(_apply(w, w.values, name, magnitude), img)


# -- Composer's severity -> magnitude mapping ---------------------------------------------------


def _magnitudes(name: str, severity: float, u: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """Each image's magnitude, from its three uniform draws ``u = (level, sign, branch)``:
    ``level ~ U(0.1, severity)`` scales the operation's maximum (``int`` where Composer truncates),
    ``sign`` flips a geometric operation when above 0.5, and the enhancement factors of the
    ``all`` set take Composer's symmetric sample around 1."""
    level = 0.1 + (severity - 0.1) * u[0]
    sign = torch.where(u[1] > 0.5, -1.0, 1.0)
    symmetric = torch.where(u[2] > 0.5, 1 + (severity - 1) * u[0], (1 - 0.09 * severity) + 0.09 * severity * u[0])
    if name == "posterize":
        return 4 - (level * 4 / 10).floor()
    if name == "rotate":
        return (level * 30 / 10).floor() * sign
    if name == "solarize":
        return 256 - (level * 256 / 10).floor()
    if name in ("shear_x", "shear_y"):
        return level * 0.3 / 10 * sign
    if name == "translate_x":
        return (level * (width / 3) / 10).floor() * sign
    if name == "translate_y":
        return (level * (height / 3) / 10).floor() * sign
    if name in ("color", "contrast", "sharpness"):
        return symmetric
    if name == "brightness":
        return torch.where(symmetric > 1, symmetric * 0.75, symmetric)
    if name.endswith("_original"):
        return level * 1.8 / 10 + 0.1
    return torch.zeros_like(level)  # autocontrast, equalize


def random_operations(
    w: _Work,
    x: torch.Tensor,
    names: tuple[str, ...],
    severity: float,
    generator: torch.Generator | None,
    active: torch.Tensor | None = None,
) -> torch.Tensor:
    """One random operation per image of ``x``, each with its own magnitude.

    Drawn on the host from ``generator``, in this order: the operation of each image
    (``randint(len(names), (n,))``), then ``rand(3, n, dtype=float64)`` for the level, sign and
    branch of each (:func:`_magnitudes`). Images where ``active`` is false are kept as they are.
    Each operation drawn runs once on the images that drew it (the geometric ones together, in
    one resampling), and the results are copied back by index.
    """
    n, _, height, width = x.shape
    choice = torch.randint(len(names), (n,), generator=generator)
    u = torch.rand(3, n, generator=generator, dtype=torch.float64)
    if active is not None:
        choice = torch.where(active, choice, -1)
    out = x
    affine_rows, affine_matrices = [], []
    for k, name in enumerate(names):
        rows = (choice == k).nonzero().squeeze(1)  # host tensors: no device sync
        if rows.numel() == 0:
            continue
        magnitude = _magnitudes(name, severity, u[:, rows], height, width)
        if _PRIMITIVE[name] in _AFFINE:
            affine_rows.append(rows)
            affine_matrices.append(_affine_matrices(_PRIMITIVE[name], magnitude, height, width))
        else:
            out = _put(out, rows, _PIXELWISE[_PRIMITIVE[name]](w, _take(x, rows), magnitude))
    if affine_rows:
        rows = torch.cat(affine_rows)
        out = _put(out, rows, _warp(w, _take(x, rows), torch.cat(affine_matrices)))
    return out


def _take(x: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    if rows.numel() == x.shape[0] and bool((rows == torch.arange(x.shape[0])).all()):  # host check
        return x
    return x.index_select(0, rows.to(x.device, non_blocking=True))


def _put(out: torch.Tensor, rows: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    if rows.numel() == out.shape[0] and bool((rows == torch.arange(out.shape[0])).all()):
        return values
    return out.index_copy(0, rows.to(out.device, non_blocking=True), values)


# -- the classes: data of any range, mapped to the operations' range and back ------------------


def check_value_range(value_range: Any) -> tuple[float, float] | None:
    if value_range is None:
        return None
    ok = (
        isinstance(value_range, (tuple, list))
        and len(value_range) == 2
        and all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in value_range)
    )
    if not ok or not value_range[0] < value_range[1]:
        raise ValueError(
            f"value_range={value_range!r}: must be None (each image's own min..max) or a pair "
            "(low, high) of finite numbers with low < high"
        )
    return (float(value_range[0]), float(value_range[1]))


def to_unit_range(
    images: torch.Tensor, value_range: tuple[float, float] | None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Floating point images mapped to ``[0, 1]``: from ``value_range`` (values outside it are
    clipped), or with None from each image's own minimum and maximum (a constant image maps to
    0). Returns ``(unit, low, span)`` for :func:`from_unit_range`; tensor ops only, no sync."""
    x = images.float() if images.dtype in (torch.float16, torch.bfloat16) else images
    if value_range is None:
        dims = tuple(range(1, x.ndim)) if x.ndim == 4 else tuple(range(x.ndim))
        low, high = x.amin(dim=dims, keepdim=True), x.amax(dim=dims, keepdim=True)
        span = high - low
        span = torch.where(span > 0, span, torch.ones_like(span))
    else:
        low = torch.tensor(value_range[0], dtype=x.dtype, device=x.device)
        span = torch.tensor(value_range[1] - value_range[0], dtype=x.dtype, device=x.device)
    return ((x - low) / span).clamp(0, 1), low, span


def from_unit_range(unit: torch.Tensor, low: torch.Tensor, span: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    return (unit * span + low).to(like.dtype)


class ImageAugmentation(Algorithm):
    """Replaces the batch's images after the data loader with :meth:`augment` of them.

    uint8 images go to the functional form as they are. Floating point images are first mapped to
    ``[0, 1]`` (:func:`to_unit_range`, by ``value_range``), since the Trainer's data is usually
    standardized, and mapped back afterwards.

    It counts ``batches_augmented``, the batches it replaced; none means it did not act.
    """

    activity = {"batches_augmented": "batches augmented"}

    def __init__(self, value_range: tuple[float, float] | None, input_key: int | str):
        self.value_range = check_value_range(value_range)
        self.input_key = input_key

    @abstractmethod
    def augment(self, images: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        """The functional form applied to ``images`` (uint8, or float in ``[0, 1]``)."""

    def match(self, event: Event, state: State) -> bool:
        return event is Event.AFTER_DATALOADER

    def apply(self, event: Event, state: State, logger: Any | None = None) -> None:
        images = state.batch_get_item(self.input_key)
        generator = self.generator(state)
        if images.is_floating_point():
            unit, low, span = to_unit_range(images, self.value_range)
            out = from_unit_range(self.augment(unit, generator), low, span, images)
        else:
            out = self.augment(images, generator)
        state.batch_set_item(self.input_key, out)
        self.report(logger, "batches_augmented")
