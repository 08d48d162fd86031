// CPU kernels for CutMix, MixUp and CutOut that write each output byte once, and the row lookup of
// label smoothing.
//
// Built on first use by algorithms/_kernels.py (torch.utils.cpp_extension), and registered as
// torch.ops.methods_library.*. Each op returns false (or None), having written nothing, where it
// does not apply (another device, layout or dtype, indices out of range, or, in place, indices
// that are not a permutation); the caller then takes torch's own ops, which raise the usual errors.
//
// In place, the examples are mixed along each cycle of the permutation (along_cycles), so only each
// cycle's first example (or its box) is saved and the batch is read and written once; the ops bump
// the version counter, as torch's in-place ops do.

#include <ATen/EmptyTensor.h>
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <c10/core/InferenceMode.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <vector>

namespace {

// The partners as host integers, or empty where they are not all in [0, n) (or, with
// `permutation`, are not a permutation of 0..n-1).
std::vector<int64_t> partners_of(const at::Tensor& indices, int64_t n, bool permutation) {
  std::vector<int64_t> partners;
  if (indices.device().type() != c10::DeviceType::CPU || indices.scalar_type() != at::kLong ||
      indices.dim() != 1 || indices.size(0) != n || !indices.is_contiguous()) {
    return partners;
  }
  const int64_t* data = indices.const_data_ptr<int64_t>();
  std::vector<bool> seen(permutation ? n : 0, false);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t j = data[i];
    if (j < 0 || j >= n || (permutation && seen[j])) {
      return {};
    }
    if (permutation) {
      seen[j] = true;
    }
  }
  partners.assign(data, data + n);
  return partners;
}

// Along each cycle i0 -> i1 -> ... -> ik of the permutation (fixed points skipped): save(buffer, i0),
// then write(i_s, i_{s+1}, nullptr) for each step and write(ik, -1, buffer) to close the cycle. Each
// example is overwritten after the one that reads it, so only the cycle's first is saved. Cycles
// are independent and split over threads, each with a buffer of `saved_bytes`.
template <typename Save, typename Write>
void along_cycles(const std::vector<int64_t>& partners, int64_t saved_bytes, const Save& save, const Write& write) {
  std::vector<std::vector<int64_t>> cycles;
  std::vector<bool> done(partners.size(), false);
  for (int64_t start = 0; start < static_cast<int64_t>(partners.size()); ++start) {
    if (done[start] || partners[start] == start) {
      continue;
    }
    std::vector<int64_t> cycle;
    for (int64_t i = start; !done[i]; i = partners[i]) {
      done[i] = true;
      cycle.push_back(i);
    }
    cycles.push_back(std::move(cycle));
  }
  at::parallel_for(0, static_cast<int64_t>(cycles.size()), 1, [&](int64_t begin, int64_t end) {
    std::vector<char> saved(saved_bytes);
    for (int64_t k = begin; k < end; ++k) {
      const std::vector<int64_t>& cycle = cycles[k];
      save(saved.data(), cycle[0]);
      for (size_t s = 0; s + 1 < cycle.size(); ++s) {
        write(cycle[s], cycle[s + 1], nullptr);
      }
      write(cycle.back(), -1, saved.data());
    }
  });
}

bool on_cpu_dense(const at::Tensor& t) {
  return t.device().type() == c10::DeviceType::CPU && t.layout() == c10::kStrided && !t.requires_grad() &&
         !t.is_conj() && !t.is_neg();
}

// An output the out-of-place ops may write for `input`: its sizes, strides and dtype, and not the
// input itself.
bool output_for(const at::Tensor& out, const at::Tensor& input) {
  return out.sizes() == input.sizes() && out.strides() == input.strides() &&
         out.scalar_type() == input.scalar_type() && out.data_ptr() != input.data_ptr();
}

// A tensor the in-place ops may write: as torch's own in-place ops, not an inference tensor outside
// inference mode (torch's ops then raise the usual error).
bool writable(const at::Tensor& t) {
  return on_cpu_dense(t) && !(t.is_inference() && !c10::InferenceMode::is_enabled());
}

// After an in-place write through the data pointer: the version counter bumped, as torch's in-place
// ops bump it, so autograd refuses a backward pass through a value saved before the write.
bool written(at::Tensor& t) {
  t.unsafeGetTensorImpl()->bump_version();
  return true;
}

// An image batch as bytes: each example is `planes` planes of `rows` rows of `row` bytes, one
// after another, and the box is rows [x1, x2), bytes [q1, q2) of every plane. NCHW: a plane is a
// channel, a row is a row of pixels. Channels-last: one plane, a row holds every channel of a row.
struct Images {
  char* data = nullptr;
  int64_t example = 0, planes = 0, rows = 0, row = 0, q1 = 0, q2 = 0, x1 = 0, x2 = 0;
};

bool describe(const at::Tensor& t, int64_t x1, int64_t y1, int64_t x2, int64_t y2, Images& out) {
  if (t.dim() != 4 || !on_cpu_dense(t)) {
    return false;
  }
  const int64_t c = t.size(1), h = t.size(2), w = t.size(3), item = t.element_size();
  if (!(0 <= x1 && x1 <= x2 && x2 <= h && 0 <= y1 && y1 <= y2 && y2 <= w)) {
    return false;
  }
  int64_t per_pixel;  // elements between neighbouring pixels of a row
  if (t.is_contiguous()) {
    out.planes = c;
    per_pixel = 1;
  } else if (t.is_contiguous(at::MemoryFormat::ChannelsLast)) {
    out.planes = 1;
    per_pixel = c;
  } else {
    return false;
  }
  out.data = static_cast<char*>(t.data_ptr());
  out.example = c * h * w * item;
  out.rows = h;
  out.row = w * per_pixel * item;
  out.q1 = y1 * per_pixel * item;
  out.q2 = y2 * per_pixel * item;
  out.x1 = x1;
  out.x2 = x2;
  return true;
}

// Each example of `out` as the same example of `in` outside the box and its partner's inside.
bool cutmix_into(at::Tensor out, const at::Tensor& input, const at::Tensor& indices, int64_t x1, int64_t y1,
                 int64_t x2, int64_t y2) {
  Images dst, src;
  if (!describe(out, x1, y1, x2, y2, dst) || !describe(input, x1, y1, x2, y2, src) || !output_for(out, input)) {
    return false;
  }
  const std::vector<int64_t> partners = partners_of(indices, input.size(0), false);
  if (partners.size() != static_cast<size_t>(input.size(0))) {
    return false;
  }
  const int64_t plane = src.rows * src.row;
  at::parallel_for(0, input.size(0), 1, [&](int64_t begin, int64_t end) {
    for (int64_t n = begin; n < end; ++n) {
      char* d = dst.data + n * src.example;
      const char* own = src.data + n * src.example;
      const char* other = src.data + partners[n] * src.example;
      // Each plane copied whole, then its box rows from the partner while the plane is still in
      // cache: each output cache line goes to memory once, in a call or two per row.
      for (int64_t p = 0; p < src.planes; ++p, d += plane, own += plane, other += plane) {
        std::memcpy(d, own, plane);
        for (int64_t r = src.x1 * src.row + src.q1; r < src.x2 * src.row; r += src.row) {
          std::memcpy(d + r, other + r, src.q2 - src.q1);
        }
      }
    }
  });
  return true;
}

// Copies a box from `from` to `to`, each either an example of the batch or a saved box (the box's
// rows one after another, `saved`).
void copy_box(const Images& im, char* to, bool to_saved, const char* from, bool from_saved) {
  const int64_t width = im.q2 - im.q1, plane = im.rows * im.row;
  for (int64_t p = 0; p < im.planes; ++p) {
    for (int64_t x = im.x1; x < im.x2; ++x) {
      const int64_t in_batch = p * plane + x * im.row + im.q1;
      const int64_t in_saved = (p * (im.x2 - im.x1) + (x - im.x1)) * width;
      std::memcpy(to + (to_saved ? in_saved : in_batch), from + (from_saved ? in_saved : in_batch), width);
    }
  }
}

// The box of each example replaced by its partner's box, in place; nothing outside the box written.
bool cutmix_inplace(at::Tensor input, const at::Tensor& indices, int64_t x1, int64_t y1, int64_t x2, int64_t y2) {
  Images im;
  if (!writable(input) || !describe(input, x1, y1, x2, y2, im)) {
    return false;
  }
  const std::vector<int64_t> partners = partners_of(indices, input.size(0), true);
  if (partners.size() != static_cast<size_t>(input.size(0))) {
    return false;
  }
  char* const data = im.data;
  along_cycles(
      partners, im.planes * (im.x2 - im.x1) * (im.q2 - im.q1),
      [&](char* saved, int64_t i) { copy_box(im, saved, true, data + i * im.example, false); },
      [&](int64_t to, int64_t from, const char* saved) {
        copy_box(im, data + to * im.example, false, saved ? saved : data + from * im.example, saved != nullptr);
      });
  return written(input);
}

// CutOut's holes, boxes of rows [r1, r2) and columns [c1, c2): a hole of `side` pixels centred on c
// covers c - side / 2 .. c - side / 2 + side - 1, clipped to the image. `centres` is float32
// (2, N, K, 1): the rows' centres of the K holes of every example, then the columns'. False where
// it is not that, or a centre is not finite.
bool holes_of(const at::Tensor& centres, int64_t n, int64_t h, int64_t w, int64_t side, std::vector<int64_t>& boxes) {
  if (centres.device().type() != c10::DeviceType::CPU || centres.scalar_type() != at::kFloat ||
      centres.dim() != 4 || centres.size(0) != 2 || centres.size(1) != n || centres.size(3) != 1 ||
      !centres.is_contiguous() || side < 0) {
    return false;
  }
  const int64_t count = n * centres.size(2);
  const float* rows = centres.const_data_ptr<float>();
  const float* cols = rows + count;
  const auto clip = [](double v, int64_t size) { return static_cast<int64_t>(std::min(std::max(v, 0.0), double(size))); };
  boxes.resize(4 * count);
  for (int64_t i = 0; i < count; ++i) {
    if (!std::isfinite(rows[i]) || !std::isfinite(cols[i])) {
      return false;
    }
    const double top = double(rows[i]) - double(side / 2), left = double(cols[i]) - double(side / 2);
    boxes[4 * i] = clip(top, h);
    boxes[4 * i + 1] = clip(top + double(side), h);
    boxes[4 * i + 2] = clip(left, w);
    boxes[4 * i + 3] = clip(left + double(side), w);
  }
  return true;
}

// Zeroes (every byte) the holes of one plane of an example: `holes` boxes of 4 integers each.
void zero_holes(const Images& im, char* plane, const int64_t* holes, int64_t count, int64_t pixel) {
  for (int64_t k = 0; k < count; ++k) {
    const int64_t* box = holes + 4 * k;
    for (int64_t r = box[0]; r < box[1]; ++r) {
      std::memset(plane + r * im.row + box[2] * pixel, 0, (box[3] - box[2]) * pixel);
    }
  }
}

// Zeroes the holes of every example of the batch `t`, described by `to`. With `from`, the data of a
// batch of the same layout, each plane is first copied from it, then its holes zeroed while it is
// still in cache; without, only the holes are written.
bool cut_holes(const at::Tensor& t, const Images& to, const char* from, const at::Tensor& centres, int64_t side) {
  std::vector<int64_t> boxes;
  if (!holes_of(centres, t.size(0), t.size(2), t.size(3), side, boxes)) {
    return false;
  }
  const int64_t plane = to.rows * to.row, holes = centres.size(2);
  const int64_t pixel = t.size(3) ? to.row / t.size(3) : 0;
  at::parallel_for(0, t.size(0), 1, [&](int64_t begin, int64_t end) {
    for (int64_t n = begin; n < end; ++n) {
      for (int64_t p = 0; p < to.planes; ++p) {
        const int64_t offset = n * to.example + p * plane;
        if (from != nullptr) {
          std::memcpy(to.data + offset, from + offset, plane);
        }
        zero_holes(to, to.data + offset, boxes.data() + 4 * n * holes, holes, pixel);
      }
    }
  });
  return true;
}

// Each example of `out` as the same example of `input`, zero in its holes.
bool cutout_into(at::Tensor out, const at::Tensor& input, const at::Tensor& centres, int64_t side) {
  Images dst, src;
  if (!describe(out, 0, 0, 0, 0, dst) || !describe(input, 0, 0, 0, 0, src) || !output_for(out, input)) {
    return false;
  }
  return cut_holes(input, dst, src.data, centres, side);
}

// The holes of each example zeroed, in place; nothing outside them written.
bool cutout_inplace(at::Tensor input, const at::Tensor& centres, int64_t side) {
  Images im;
  if (!writable(input) || !describe(input, 0, 0, 0, 0, im)) {
    return false;
  }
  return cut_holes(input, im, nullptr, centres, side) && written(input);
}

// torch.lerp's formula (aten/src/ATen/native/Lerp.h): start + w * (end - start) for |w| < 0.5, else
// end - (end - start) * (1 - w). Where torch's CPU kernels use fused multiply-adds (its capability
// is AVX2 or above), so does this loop, as fma(w, end - start, start) and fma(w - 1, end - start,
// end), which round as torch's do; otherwise the two products are rounded first, as in torch's
// default kernels.
template <typename T>
void lerp_plain(T* out, const T* start, const T* end, T weight, int64_t count) {
  if (weight < T(0.5) && weight > T(-0.5)) {
    for (int64_t i = 0; i < count; ++i) {
      out[i] = start[i] + weight * (end[i] - start[i]);
    }
  } else {
    const T rest = T(1) - weight;
    for (int64_t i = 0; i < count; ++i) {
      out[i] = end[i] - (end[i] - start[i]) * rest;
    }
  }
}

#if defined(__x86_64__) && defined(__GNUC__)
#define METHODS_FUSED __attribute__((target("avx2,fma")))
#else
#define METHODS_FUSED
#endif

template <typename T>
METHODS_FUSED void lerp_fused(T* out, const T* start, const T* end, T weight, int64_t count) {
  if (weight < T(0.5) && weight > T(-0.5)) {
    for (int64_t i = 0; i < count; ++i) {
      out[i] = std::fma(weight, end[i] - start[i], start[i]);
    }
  } else {
    const T coeff = weight - T(1);
    for (int64_t i = 0; i < count; ++i) {
      out[i] = std::fma(coeff, end[i] - start[i], end[i]);
    }
  }
}

// Set once after loading, from torch.backends.cpu.get_cpu_capability() (torch does not export it to C++).
bool fused = false;

void use_fused_multiply_add(bool yes) {
  fused = yes;
}

template <typename T>
void lerp_into(T* out, const T* start, const T* end, T weight, int64_t count) {
  if (fused) {
    lerp_fused<T>(out, start, end, weight, count);
  } else {
    lerp_plain<T>(out, start, end, weight, count);
  }
}

bool mixable(const at::Tensor& t) {
  return t.dim() >= 1 && on_cpu_dense(t) && (t.scalar_type() == at::kFloat || t.scalar_type() == at::kDouble) &&
         (t.is_contiguous() || (t.dim() == 4 && t.is_contiguous(at::MemoryFormat::ChannelsLast)));
}

template <typename T>
void mixup_into_typed(at::Tensor& out, const at::Tensor& input, const std::vector<int64_t>& partners, double mixing) {
  const int64_t example = input.size(0) ? input.numel() / input.size(0) : 0;
  T* dst = out.data_ptr<T>();
  const T* src = input.const_data_ptr<T>();
  at::parallel_for(0, input.size(0), 1, [&](int64_t begin, int64_t end) {
    for (int64_t n = begin; n < end; ++n) {
      lerp_into<T>(dst + n * example, src + n * example, src + partners[n] * example, static_cast<T>(mixing), example);
    }
  });
}

// Each example of `out` as lerp(input[n], input[indices[n]], mixing).
bool mixup_into(at::Tensor out, const at::Tensor& input, const at::Tensor& indices, double mixing) {
  if (!mixable(out) || !mixable(input) || !output_for(out, input)) {
    return false;
  }
  const std::vector<int64_t> partners = partners_of(indices, input.size(0), false);
  if (partners.size() != static_cast<size_t>(input.size(0))) {
    return false;
  }
  if (input.scalar_type() == at::kFloat) {
    mixup_into_typed<float>(out, input, partners, mixing);
  } else {
    mixup_into_typed<double>(out, input, partners, mixing);
  }
  return true;
}

template <typename T>
void mixup_inplace_typed(at::Tensor& input, const std::vector<int64_t>& partners, double mixing) {
  const int64_t example = input.size(0) ? input.numel() / input.size(0) : 0;
  T* data = input.data_ptr<T>();
  const T weight = static_cast<T>(mixing);
  along_cycles(
      partners, example * static_cast<int64_t>(sizeof(T)),
      [&](char* saved, int64_t i) { std::memcpy(saved, data + i * example, example * sizeof(T)); },
      [&](int64_t to, int64_t from, const char* saved) {
        T* here = data + to * example;
        lerp_into<T>(here, here, saved ? reinterpret_cast<const T*>(saved) : data + from * example, weight, example);
      });
}

// Each example replaced by lerp(input[n], input[indices[n]], mixing), in place.
bool mixup_inplace(at::Tensor input, const at::Tensor& indices, double mixing) {
  if (!writable(input) || !mixable(input)) {
    return false;
  }
  const std::vector<int64_t> partners = partners_of(indices, input.size(0), true);
  if (partners.size() != static_cast<size_t>(input.size(0))) {
    return false;
  }
  if (input.scalar_type() == at::kFloat) {
    mixup_inplace_typed<float>(input, partners, mixing);
  } else {
    mixup_inplace_typed<double>(input, partners, mixing);
  }
  return written(input);
}

template <typename I>
std::optional<at::Tensor> rows_at_typed(const at::Tensor& rows, const I* index, int64_t n) {
  const int64_t count = rows.size(0);
  for (int64_t i = 0; i < n; ++i) {
    if (index[i] < 0 || index[i] >= count) {
      return std::nullopt;
    }
  }
  at::Tensor out = at::detail::empty_cpu({n, rows.size(1)}, rows.scalar_type(), std::nullopt, std::nullopt,
                                         std::nullopt, std::nullopt);
  const int64_t row = rows.size(1) * rows.element_size();
  const char* from = static_cast<const char*>(rows.const_data_ptr());
  char* to = static_cast<char*>(out.data_ptr());
  for (int64_t i = 0; i < n; ++i) {
    std::memcpy(to + i * row, from + index[i] * row, row);
  }
  return out;
}

// rows.index_select(0, index) for a contiguous CPU table of rows (N, K) and int64 or int32 indices
// (N,) on the CPU; None, instead of an error, where an index is negative or not below N, or for
// other arguments. Label smoothing looks class indices up in the table of smoothed rows with it.
std::optional<at::Tensor> rows_at(const at::Tensor& rows, const at::Tensor& index) {
  if (rows.dim() != 2 || !on_cpu_dense(rows) || !rows.is_contiguous() || index.dim() != 1 ||
      index.device().type() != c10::DeviceType::CPU || index.layout() != c10::kStrided || !index.is_contiguous()) {
    return std::nullopt;
  }
  if (index.scalar_type() == at::kLong) {
    return rows_at_typed(rows, index.const_data_ptr<int64_t>(), index.size(0));
  }
  if (index.scalar_type() == at::kInt) {
    return rows_at_typed(rows, index.const_data_ptr<int32_t>(), index.size(0));
  }
  return std::nullopt;
}

}  // namespace

TORCH_LIBRARY(methods_library, m) {
  m.def("use_fused_multiply_add(bool yes) -> ()", &use_fused_multiply_add);
  m.def("cutmix_into(Tensor(a!) out, Tensor input, Tensor indices, int x1, int y1, int x2, int y2) -> bool",
        &cutmix_into);
  m.def("cutmix_inplace(Tensor(a!) input, Tensor indices, int x1, int y1, int x2, int y2) -> bool", &cutmix_inplace);
  m.def("cutout_into(Tensor(a!) out, Tensor input, Tensor centres, int side) -> bool", &cutout_into);
  m.def("cutout_inplace(Tensor(a!) input, Tensor centres, int side) -> bool", &cutout_inplace);
  m.def("mixup_into(Tensor(a!) out, Tensor input, Tensor indices, float mixing) -> bool", &mixup_into);
  m.def("mixup_inplace(Tensor(a!) input, Tensor indices, float mixing) -> bool", &mixup_inplace);
  m.def("rows_at(Tensor rows, Tensor index) -> Tensor?", &rows_at);
}
