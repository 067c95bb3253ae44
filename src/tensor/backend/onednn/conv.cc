// Convolution, pooling, batch and layer normalisation on oneDNN.
//
// Activations stay channels-last (nhwc) as Keras keeps them; weights are
// handed to oneDNN as "any" so it can pick its fastest implementation, and
// reordered from (and, for gradients, back to) Keras's layout on each call —
// a copy the size of the kernel, small next to the convolution itself.
// Convolution and pooling run in float32 or natively in bfloat16 (the
// shape's precision: data, kernel, bias and their gradients alike, with
// float32 accumulation inside oneDNN); batch and layer normalisation are
// float32.
#include <cstddef>
#include <cstring>
#include <unordered_map>
#include <vector>

#include "tensor/backend/onednn/common.h"
#include "tensor/backend/onednn/onednn.h"

namespace lockstep::backend::onednn {
using namespace detail_onednn;

namespace {

using Key =
    std::tuple<std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t,
               std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t,
               std::int64_t, std::int64_t, std::int64_t, std::int64_t, int>;

Key conv_key(const ConvShape& s, int kind) {
  return Key{s.n,
             s.h,
             s.w,
             s.c,
             s.kh,
             s.kw,
             s.oc,
             s.groups,
             s.sh * 1000 + s.sw,
             s.dh * 1000 + s.dw,
             s.pad_t,
             s.pad_l,
             s.pad_b,
             s.pad_r,
             s.oh,
             s.ow,
             kind + (s.precision == Precision::kBFloat16 ? 8 : 0)};
}

memory::desc nhwc(std::int64_t n, std::int64_t c, std::int64_t h, std::int64_t w,
                  Precision p = Precision::kFloat32) {
  return memory::desc(Dims{n, c, h, w}, data_type(p), memory::format_tag::nhwc);
}
memory::desc src(const ConvShape& s) { return nhwc(s.n, s.c, s.h, s.w, s.precision); }
memory::desc dst(const ConvShape& s) { return nhwc(s.n, s.oc, s.oh, s.ow, s.precision); }
memory::desc bias_desc(const ConvShape& s, bool bias) {
  return bias ? memory::desc(Dims{s.oc}, data_type(s.precision), memory::format_tag::a)
              : memory::desc();
}

// Keras's kernel [kh, kw, ic_g, oc] described in oneDNN's logical order
// ({oc, ic, kh, kw}, or {g, oc_g, ic_g, kh, kw} when grouped) by strides.
memory::desc user_weights(const ConvShape& s) {
  const std::int64_t icg = s.c / s.groups, ocg = s.oc / s.groups;
  if (s.groups == 1) {
    return memory::desc(Dims{s.oc, s.c, s.kh, s.kw}, data_type(s.precision),
                        Dims{1, s.oc, s.kw * s.c * s.oc, s.c * s.oc});
  }
  return memory::desc(Dims{s.groups, ocg, icg, s.kh, s.kw}, data_type(s.precision),
                      Dims{ocg, 1, s.oc, s.kw * icg * s.oc, icg * s.oc});
}

memory::desc any_weights(const ConvShape& s) {
  const std::int64_t icg = s.c / s.groups, ocg = s.oc / s.groups;
  if (s.groups == 1)
    return memory::desc(Dims{s.oc, s.c, s.kh, s.kw}, data_type(s.precision),
                        memory::format_tag::any);
  return memory::desc(Dims{s.groups, ocg, icg, s.kh, s.kw}, data_type(s.precision),
                      memory::format_tag::any);
}

Dims strides(const ConvShape& s) { return {s.sh, s.sw}; }
Dims dilates(const ConvShape& s) { return {s.dh - 1, s.dw - 1}; }  // oneDNN counts the gaps
Dims pad_l(const ConvShape& s) { return {s.pad_t, s.pad_l}; }
Dims pad_r(const ConvShape& s) { return {s.pad_b, s.pad_r}; }

dnnl::convolution_forward::primitive_desc forward_pd(const ConvShape& s, bool bias) {
  dnnl::convolution_forward::desc d(
      dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct, src(s),
      any_weights(s), bias_desc(s, bias), dst(s), strides(s), dilates(s), pad_l(s), pad_r(s));
  return {d, engine()};
}

// A weights tensor in the primitive's layout, with the reorder that fills it
// from (or empties it to) Keras's layout when the two differ.
struct WeightsBuffer {
  memory user, internal;
  std::vector<std::byte> storage;
  dnnl::reorder reorder;  // user -> internal, or internal -> user for gradients
  bool needs_reorder = false;

  void init(const ConvShape& s, const memory::desc& wanted, bool to_user) {
    user = memory(user_weights(s), engine(), DNNL_MEMORY_NONE);
    needs_reorder = wanted != user.get_desc();
    if (needs_reorder) {
      storage.resize(wanted.get_size());
      internal = memory(wanted, engine(), storage.data());
      reorder = to_user ? dnnl::reorder(internal, user) : dnnl::reorder(user, internal);
    } else {
      internal = user;
    }
  }
  // Points the user side at `data`; for inputs, converts into the primitive's layout.
  memory& load(const void* data) {
    user.set_data_handle(mut(data));
    if (needs_reorder) reorder.execute(stream(), user, internal);
    return internal;
  }
  memory& target(void* data) {
    user.set_data_handle(data);
    return internal;
  }
  void store() {
    if (needs_reorder) reorder.execute(stream(), internal, user);
  }
};

}  // namespace

void conv2d_forward(const ConvShape& s, const void* x, const void* w, const void* bias, void* y) {
  struct Entry {
    dnnl::convolution_forward prim;
    memory src, dst, bias;
    WeightsBuffer weights;
  };
  thread_local std::unordered_map<Key, Entry, TupleHash> cache;  // per thread: see onednn.cc
  KernelScope scope;
  guarded("conv2d", [&] {
    const Key key = conv_key(s, bias ? 1 : 0);
    auto it = cache.find(key);
    if (it == cache.end()) {
      auto pd = forward_pd(s, bias != nullptr);
      Entry e{dnnl::convolution_forward(pd),
              memory(pd.src_desc(), engine(), DNNL_MEMORY_NONE),
              memory(pd.dst_desc(), engine(), DNNL_MEMORY_NONE),
              memory(),
              {}};
      if (bias) e.bias = memory(pd.bias_desc(), engine(), DNNL_MEMORY_NONE);
      e.weights.init(s, pd.weights_desc(), false);
      it = cache.emplace(key, std::move(e)).first;
    }
    Entry& e = it->second;
    e.src.set_data_handle(mut(x));
    e.dst.set_data_handle(y);
    std::unordered_map<int, memory> args{
        {DNNL_ARG_SRC, e.src}, {DNNL_ARG_WEIGHTS, e.weights.load(w)}, {DNNL_ARG_DST, e.dst}};
    if (bias) {
      e.bias.set_data_handle(mut(bias));
      args.emplace(DNNL_ARG_BIAS, e.bias);
    }
    e.prim.execute(stream(), args);
    stream().wait();
  });
}

void conv2d_backward_data(const ConvShape& s, const void* dy, const void* w, void* dx) {
  struct Entry {
    dnnl::convolution_backward_data prim;
    memory diff_dst, diff_src;
    WeightsBuffer weights;
  };
  thread_local std::unordered_map<Key, Entry, TupleHash> cache;  // per thread: see onednn.cc
  KernelScope scope;
  guarded("conv2d backward (data)", [&] {
    const Key key = conv_key(s, 2);
    auto it = cache.find(key);
    if (it == cache.end()) {
      auto hint = forward_pd(s, false);
      dnnl::convolution_backward_data::desc d(dnnl::algorithm::convolution_direct, src(s),
                                              any_weights(s), dst(s), strides(s), dilates(s),
                                              pad_l(s), pad_r(s));
      dnnl::convolution_backward_data::primitive_desc pd(d, engine(), hint);
      Entry e{dnnl::convolution_backward_data(pd),
              memory(pd.diff_dst_desc(), engine(), DNNL_MEMORY_NONE),
              memory(pd.diff_src_desc(), engine(), DNNL_MEMORY_NONE),
              {}};
      e.weights.init(s, pd.weights_desc(), false);
      it = cache.emplace(key, std::move(e)).first;
    }
    Entry& e = it->second;
    e.diff_dst.set_data_handle(mut(dy));
    e.diff_src.set_data_handle(dx);
    e.prim.execute(stream(), {{DNNL_ARG_DIFF_DST, e.diff_dst},
                              {DNNL_ARG_WEIGHTS, e.weights.load(w)},
                              {DNNL_ARG_DIFF_SRC, e.diff_src}});
    stream().wait();
  });
}

void conv2d_backward_weights(const ConvShape& s, const void* x, const void* dy, void* dw,
                             void* dbias) {
  if (s.kh == 1 && s.kw == 1 && (s.sh > 1 || s.sw > 1) && s.pad_t == 0 && s.pad_l == 0 &&
      s.pad_b == 0 && s.pad_r == 0) {
    // A 1×1 kernel with strides: oneDNN's jit_1x1:avx2 weights gradient
    // (which reduces the strides internally) gave wrong values that changed
    // from run to run on a Zen 3 EPYC with AVX2 alone (half the runs of
    // ConvLayers.Conv2DTransposeIsTheConvolutionsInputGradient). The same
    // gradient from the pixels the windows read, at stride 1.
    ConvShape t = s;
    t.h = s.oh, t.w = s.ow, t.sh = 1, t.sw = 1, t.dh = 1, t.dw = 1;
    const std::size_t bytes = s.precision == Precision::kBFloat16 ? 2 : 4;
    const std::size_t pixel = static_cast<std::size_t>(s.c) * bytes;
    std::vector<unsigned char> picked(static_cast<std::size_t>(s.n * t.h * t.w) * pixel);
    const auto* from = static_cast<const unsigned char*>(x);
    unsigned char* to = picked.data();
    for (std::int64_t n = 0; n < s.n; ++n)
      for (std::int64_t i = 0; i < t.h; ++i)
        for (std::int64_t j = 0; j < t.w; ++j, to += pixel)
          std::memcpy(
              to, from + static_cast<std::size_t>(((n * s.h + i * s.sh) * s.w + j * s.sw)) * pixel,
              pixel);
    conv2d_backward_weights(t, picked.data(), dy, dw, dbias);
    return;
  }
  struct Entry {
    dnnl::convolution_backward_weights prim;
    memory src, diff_dst, diff_bias;
    WeightsBuffer weights;
  };
  thread_local std::unordered_map<Key, Entry, TupleHash> cache;  // per thread: see onednn.cc
  KernelScope scope;
  guarded("conv2d backward (weights)", [&] {
    const Key key = conv_key(s, dbias ? 4 : 3);
    auto it = cache.find(key);
    if (it == cache.end()) {
      auto hint = forward_pd(s, dbias != nullptr);
      dnnl::convolution_backward_weights::desc d(
          dnnl::algorithm::convolution_direct, src(s), any_weights(s),
          bias_desc(s, dbias != nullptr), dst(s), strides(s), dilates(s), pad_l(s), pad_r(s));
      dnnl::convolution_backward_weights::primitive_desc pd(d, engine(), hint);
      Entry e{dnnl::convolution_backward_weights(pd),
              memory(pd.src_desc(), engine(), DNNL_MEMORY_NONE),
              memory(pd.diff_dst_desc(), engine(), DNNL_MEMORY_NONE),
              memory(),
              {}};
      if (dbias) e.diff_bias = memory(pd.diff_bias_desc(), engine(), DNNL_MEMORY_NONE);
      e.weights.init(s, pd.diff_weights_desc(), true);
      it = cache.emplace(key, std::move(e)).first;
    }
    Entry& e = it->second;
    e.src.set_data_handle(mut(x));
    e.diff_dst.set_data_handle(mut(dy));
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, e.src},
                                         {DNNL_ARG_DIFF_DST, e.diff_dst},
                                         {DNNL_ARG_DIFF_WEIGHTS, e.weights.target(dw)}};
    if (dbias) {
      e.diff_bias.set_data_handle(dbias);
      args.emplace(DNNL_ARG_DIFF_BIAS, e.diff_bias);
    }
    e.prim.execute(stream(), args);
    e.weights.store();
    stream().wait();
  });
}

// ---- pooling ---------------------------------------------------------------------

namespace {

Key pool_key(const PoolShape& s, int kind) {
  return Key{s.n,
             s.h,
             s.w,
             s.c,
             s.kh,
             s.kw,
             0,
             0,
             s.sh * 1000 + s.sw,
             0,
             s.pad_t,
             s.pad_l,
             s.pad_b,
             s.pad_r,
             s.oh,
             s.ow,
             kind * 2 + (s.max ? 1 : 0) + (s.precision == Precision::kBFloat16 ? 8 : 0)};
}

dnnl::pooling_forward::primitive_desc pool_pd(const PoolShape& s, bool training) {
  dnnl::pooling_forward::desc d(
      training ? dnnl::prop_kind::forward_training : dnnl::prop_kind::forward_inference,
      s.max ? dnnl::algorithm::pooling_max : dnnl::algorithm::pooling_avg_exclude_padding,
      nhwc(s.n, s.c, s.h, s.w, s.precision), nhwc(s.n, s.c, s.oh, s.ow, s.precision),
      Dims{s.sh, s.sw}, Dims{s.kh, s.kw}, Dims{s.pad_t, s.pad_l}, Dims{s.pad_b, s.pad_r});
  return {d, engine()};
}

}  // namespace

std::size_t pool_workspace_bytes(const PoolShape& s) {
  if (!s.max) return 0;
  std::size_t bytes = 0;
  guarded("pooling", [&] { bytes = pool_pd(s, true).workspace_desc().get_size(); });
  return bytes;
}

void pool_forward(const PoolShape& s, const void* x, void* y, void* workspace) {
  struct Entry {
    dnnl::pooling_forward prim;
    memory src, dst, ws;
  };
  thread_local std::unordered_map<Key, Entry, TupleHash> cache;  // per thread: see onednn.cc
  KernelScope scope;
  const bool training = workspace != nullptr || !s.max;
  guarded("pooling", [&] {
    const Key key = pool_key(s, training ? 1 : 0);
    auto it = cache.find(key);
    if (it == cache.end()) {
      auto pd = pool_pd(s, training);
      Entry e{dnnl::pooling_forward(pd), memory(pd.src_desc(), engine(), DNNL_MEMORY_NONE),
              memory(pd.dst_desc(), engine(), DNNL_MEMORY_NONE), memory()};
      if (s.max && training) e.ws = memory(pd.workspace_desc(), engine(), DNNL_MEMORY_NONE);
      it = cache.emplace(key, std::move(e)).first;
    }
    Entry& e = it->second;
    e.src.set_data_handle(mut(x));
    e.dst.set_data_handle(y);
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, e.src}, {DNNL_ARG_DST, e.dst}};
    if (s.max && training) {
      e.ws.set_data_handle(workspace);
      args.emplace(DNNL_ARG_WORKSPACE, e.ws);
    }
    e.prim.execute(stream(), args);
    stream().wait();
  });
}

void pool_backward(const PoolShape& s, const void* dy, const void* workspace, void* dx) {
  struct Entry {
    dnnl::pooling_backward prim;
    memory diff_dst, diff_src, ws;
  };
  thread_local std::unordered_map<Key, Entry, TupleHash> cache;  // per thread: see onednn.cc
  KernelScope scope;
  guarded("pooling backward", [&] {
    const Key key = pool_key(s, 2);
    auto it = cache.find(key);
    if (it == cache.end()) {
      auto hint = pool_pd(s, true);
      dnnl::pooling_backward::desc d(
          s.max ? dnnl::algorithm::pooling_max : dnnl::algorithm::pooling_avg_exclude_padding,
          nhwc(s.n, s.c, s.h, s.w, s.precision), nhwc(s.n, s.c, s.oh, s.ow, s.precision),
          Dims{s.sh, s.sw}, Dims{s.kh, s.kw}, Dims{s.pad_t, s.pad_l}, Dims{s.pad_b, s.pad_r});
      dnnl::pooling_backward::primitive_desc pd(d, engine(), hint);
      Entry e{dnnl::pooling_backward(pd), memory(pd.diff_dst_desc(), engine(), DNNL_MEMORY_NONE),
              memory(pd.diff_src_desc(), engine(), DNNL_MEMORY_NONE), memory()};
      if (s.max) e.ws = memory(hint.workspace_desc(), engine(), DNNL_MEMORY_NONE);
      it = cache.emplace(key, std::move(e)).first;
    }
    Entry& e = it->second;
    e.diff_dst.set_data_handle(mut(dy));
    e.diff_src.set_data_handle(dx);
    std::unordered_map<int, memory> args{{DNNL_ARG_DIFF_DST, e.diff_dst},
                                         {DNNL_ARG_DIFF_SRC, e.diff_src}};
    if (s.max) {
      e.ws.set_data_handle(mut(workspace));
      args.emplace(DNNL_ARG_WORKSPACE, e.ws);
    }
    e.prim.execute(stream(), args);
    stream().wait();
  });
}

// ---- batch normalisation ---------------------------------------------------------------

namespace {

using BnKey = std::tuple<std::int64_t, std::int64_t, std::int64_t, float, int>;

// The data as 4-D channels-last {examples, channels, positions, 1}: oneDNN
// 2.6 has JIT kernels for nhwc (bnorm_tbb_jit), while a 2-D "nc"
// descriptor falls to its reference kernel (ncsp_bnorm): 932 ms forward on
// [32, 112, 112, 96] before (issue #19), see tensor_bench
// BM_BatchNorm_TrainingVsMemcpy for today's figures (docs/benchmarks.md).
memory::desc bn_data(const BatchNormShape& s) {
  return memory::desc(Dims{s.examples, s.channels, s.rows / s.examples, 1}, memory::data_type::f32,
                      memory::format_tag::nhwc);
}

const auto kScaleShift =
    dnnl::normalization_flags::use_scale | dnnl::normalization_flags::use_shift;

// Training's forward (the backward's hint), or normalisation by given
// statistics.
dnnl::batch_normalization_forward::primitive_desc bn_pd(const BatchNormShape& s, bool given_stats) {
  dnnl::batch_normalization_forward::desc d(
      given_stats ? dnnl::prop_kind::forward_inference : dnnl::prop_kind::forward_training,
      bn_data(s), s.epsilon,
      given_stats ? kScaleShift | dnnl::normalization_flags::use_global_stats : kScaleShift);
  return {d, engine()};
}

memory vec(const BatchNormShape& s) {
  return memory(memory::desc(Dims{s.channels}, memory::data_type::f32, memory::format_tag::a),
                engine(), DNNL_MEMORY_NONE);
}

}  // namespace

void batchnorm_forward(const BatchNormShape& s, const float* x, const float* gamma,
                       const float* beta, const float* mean, const float* variance, float* y) {
  struct Entry {
    dnnl::batch_normalization_forward prim;
    memory src, dst, scale, shift, mean, var;
  };
  thread_local std::unordered_map<BnKey, Entry, TupleHash> cache;  // per thread: see onednn.cc
  KernelScope scope;
  guarded("batch_normalization", [&] {
    const BnKey key{s.examples, s.rows, s.channels, s.epsilon, 0};
    auto it = cache.find(key);
    if (it == cache.end()) {
      auto pd = bn_pd(s, true);
      Entry e{dnnl::batch_normalization_forward(pd),
              memory(bn_data(s), engine(), DNNL_MEMORY_NONE),
              memory(bn_data(s), engine(), DNNL_MEMORY_NONE),
              vec(s),
              vec(s),
              vec(s),
              vec(s)};
      it = cache.emplace(key, std::move(e)).first;
    }
    Entry& e = it->second;
    e.src.set_data_handle(mut(x));
    e.dst.set_data_handle(y);
    e.scale.set_data_handle(mut(gamma));
    e.shift.set_data_handle(mut(beta));
    e.mean.set_data_handle(mut(mean));
    e.var.set_data_handle(mut(variance));
    e.prim.execute(stream(), {{DNNL_ARG_SRC, e.src},
                              {DNNL_ARG_DST, e.dst},
                              {DNNL_ARG_SCALE, e.scale},
                              {DNNL_ARG_SHIFT, e.shift},
                              {DNNL_ARG_MEAN, e.mean},
                              {DNNL_ARG_VARIANCE, e.var}});
    stream().wait();
  });
}

void batchnorm_backward(const BatchNormShape& s, bool batch_stats, const float* x, const float* dy,
                        const float* gamma, const float* beta, const float* mean,
                        const float* variance, float* dx, float* dgamma, float* dbeta) {
  struct Entry {
    dnnl::batch_normalization_backward prim;
    memory src, diff_dst, diff_src, scale, shift, mean, var, diff_scale, diff_shift;
  };
  thread_local std::unordered_map<BnKey, Entry, TupleHash> cache;  // per thread: see onednn.cc
  KernelScope scope;
  guarded("batch_normalization backward", [&] {
    const BnKey key{s.examples, s.rows, s.channels, s.epsilon, batch_stats ? 1 : 2};
    auto it = cache.find(key);
    if (it == cache.end()) {
      auto hint = bn_pd(s, !batch_stats);
      dnnl::batch_normalization_backward::desc d(
          dnnl::prop_kind::backward, bn_data(s), bn_data(s), s.epsilon,
          batch_stats ? kScaleShift : kScaleShift | dnnl::normalization_flags::use_global_stats);
      dnnl::batch_normalization_backward::primitive_desc pd(d, engine(), hint);
      Entry e{dnnl::batch_normalization_backward(pd),
              memory(bn_data(s), engine(), DNNL_MEMORY_NONE),
              memory(bn_data(s), engine(), DNNL_MEMORY_NONE),
              memory(bn_data(s), engine(), DNNL_MEMORY_NONE),
              vec(s),
              vec(s),
              vec(s),
              vec(s),
              vec(s),
              vec(s)};
      it = cache.emplace(key, std::move(e)).first;
    }
    Entry& e = it->second;
    e.shift.set_data_handle(mut(beta));
    e.src.set_data_handle(mut(x));
    e.diff_dst.set_data_handle(mut(dy));
    e.diff_src.set_data_handle(dx);
    e.scale.set_data_handle(mut(gamma));
    e.mean.set_data_handle(mut(mean));
    e.var.set_data_handle(mut(variance));
    e.diff_scale.set_data_handle(dgamma);
    e.diff_shift.set_data_handle(dbeta);
    e.prim.execute(stream(), {{DNNL_ARG_SRC, e.src},
                              {DNNL_ARG_DIFF_DST, e.diff_dst},
                              {DNNL_ARG_DIFF_SRC, e.diff_src},
                              {DNNL_ARG_SCALE, e.scale},
                              {DNNL_ARG_SHIFT, e.shift},
                              {DNNL_ARG_MEAN, e.mean},
                              {DNNL_ARG_VARIANCE, e.var},
                              {DNNL_ARG_DIFF_SCALE, e.diff_scale},
                              {DNNL_ARG_DIFF_SHIFT, e.diff_shift}});
    stream().wait();
  });
}

// ---- layer normalisation ---------------------------------------------------------------

namespace {

using LnKey = std::tuple<std::int64_t, std::int64_t, float, int>;

memory::desc ln_data(const LayerNormShape& s) {
  return memory::desc(Dims{s.rows, s.channels}, memory::data_type::f32, memory::format_tag::ab);
}
memory::desc ln_stats(const LayerNormShape& s) {
  return memory::desc(Dims{s.rows}, memory::data_type::f32, memory::format_tag::a);
}
memory ln_vec(const LayerNormShape& s) {
  return memory(memory::desc(Dims{s.channels}, memory::data_type::f32, memory::format_tag::a),
                engine(), DNNL_MEMORY_NONE);
}
dnnl::normalization_flags ln_flags(const LayerNormShape& s) {
  auto f = dnnl::normalization_flags::none;
  if (s.scale) f = f | dnnl::normalization_flags::use_scale;
  if (s.shift) f = f | dnnl::normalization_flags::use_shift;
  return f;
}
int ln_affine(const LayerNormShape& s) { return (s.scale ? 1 : 0) | (s.shift ? 2 : 0); }

dnnl::layer_normalization_forward::primitive_desc ln_pd(const LayerNormShape& s) {
  dnnl::layer_normalization_forward::desc d(dnnl::prop_kind::forward_training, ln_data(s),
                                            ln_stats(s), s.epsilon, ln_flags(s));
  return {d, engine()};
}

}  // namespace

void layernorm_forward(const LayerNormShape& s, const float* x, const float* gamma,
                       const float* beta, float* y, float* mean, float* variance) {
  struct Entry {
    dnnl::layer_normalization_forward prim;
    memory src, dst, scale, shift, mean, var;
  };
  thread_local std::unordered_map<LnKey, Entry, TupleHash> cache;  // per thread: see onednn.cc
  KernelScope scope;
  guarded("layer_normalization", [&] {
    const LnKey key{s.rows, s.channels, s.epsilon, ln_affine(s)};
    auto it = cache.find(key);
    if (it == cache.end()) {
      Entry e{dnnl::layer_normalization_forward(ln_pd(s)),
              memory(ln_data(s), engine(), DNNL_MEMORY_NONE),
              memory(ln_data(s), engine(), DNNL_MEMORY_NONE),
              ln_vec(s),
              ln_vec(s),
              memory(ln_stats(s), engine(), DNNL_MEMORY_NONE),
              memory(ln_stats(s), engine(), DNNL_MEMORY_NONE)};
      it = cache.emplace(key, std::move(e)).first;
    }
    Entry& e = it->second;
    e.src.set_data_handle(mut(x));
    e.dst.set_data_handle(y);
    e.mean.set_data_handle(mean);
    e.var.set_data_handle(variance);
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, e.src},
                                         {DNNL_ARG_DST, e.dst},
                                         {DNNL_ARG_MEAN, e.mean},
                                         {DNNL_ARG_VARIANCE, e.var}};
    if (s.scale) {
      e.scale.set_data_handle(mut(gamma));
      args.emplace(DNNL_ARG_SCALE, e.scale);
    }
    if (s.shift) {
      e.shift.set_data_handle(mut(beta));
      args.emplace(DNNL_ARG_SHIFT, e.shift);
    }
    e.prim.execute(stream(), args);
    stream().wait();
  });
}

void layernorm_backward(const LayerNormShape& s, const float* x, const float* dy,
                        const float* gamma, const float* beta, const float* mean,
                        const float* variance, float* dx, float* dgamma, float* dbeta) {
  struct Entry {
    dnnl::layer_normalization_backward prim;
    memory src, diff_dst, diff_src, scale, shift, mean, var, diff_scale, diff_shift;
  };
  thread_local std::unordered_map<LnKey, Entry, TupleHash> cache;  // per thread: see onednn.cc
  KernelScope scope;
  guarded("layer_normalization backward", [&] {
    const LnKey key{s.rows, s.channels, s.epsilon, ln_affine(s)};
    auto it = cache.find(key);
    if (it == cache.end()) {
      dnnl::layer_normalization_backward::desc d(dnnl::prop_kind::backward, ln_data(s), ln_data(s),
                                                 ln_stats(s), s.epsilon, ln_flags(s));
      dnnl::layer_normalization_backward::primitive_desc pd(d, engine(), ln_pd(s));
      Entry e{dnnl::layer_normalization_backward(pd),
              memory(ln_data(s), engine(), DNNL_MEMORY_NONE),
              memory(ln_data(s), engine(), DNNL_MEMORY_NONE),
              memory(ln_data(s), engine(), DNNL_MEMORY_NONE),
              ln_vec(s),
              ln_vec(s),
              memory(ln_stats(s), engine(), DNNL_MEMORY_NONE),
              memory(ln_stats(s), engine(), DNNL_MEMORY_NONE),
              ln_vec(s),
              ln_vec(s)};
      it = cache.emplace(key, std::move(e)).first;
    }
    Entry& e = it->second;
    e.src.set_data_handle(mut(x));
    e.diff_dst.set_data_handle(mut(dy));
    e.diff_src.set_data_handle(dx);
    e.mean.set_data_handle(mut(mean));
    e.var.set_data_handle(mut(variance));
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, e.src},
                                         {DNNL_ARG_DIFF_DST, e.diff_dst},
                                         {DNNL_ARG_DIFF_SRC, e.diff_src},
                                         {DNNL_ARG_MEAN, e.mean},
                                         {DNNL_ARG_VARIANCE, e.var}};
    if (s.scale) {
      e.scale.set_data_handle(mut(gamma));
      e.diff_scale.set_data_handle(dgamma);
      args.emplace(DNNL_ARG_SCALE, e.scale);
      args.emplace(DNNL_ARG_DIFF_SCALE, e.diff_scale);
    }
    if (s.shift) {
      e.shift.set_data_handle(mut(beta));
      e.diff_shift.set_data_handle(dbeta);
      args.emplace(DNNL_ARG_SHIFT, e.shift);
      args.emplace(DNNL_ARG_DIFF_SHIFT, e.diff_shift);
    }
    e.prim.execute(stream(), args);
    stream().wait();
  });
}

}  // namespace lockstep::backend::onednn
