// oneDNN primitives behind matmul, softmax and elementwise transcendentals.
//
// Creating a oneDNN primitive costs tens of microseconds, executing a small
// one a few; a training step calls the same shapes every time, so each thread
// keeps its primitives in a map keyed by shape and attributes. Per-thread
// maps need no lock, and replica threads never share one.
#include "tensor/backend/onednn/onednn.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

#include <cstring>
#include <oneapi/dnnl/dnnl.hpp>
#include <string>
#include <tuple>
#include <unordered_map>

#include "tensor/backend/onednn/common.h"

namespace lockstep::backend::onednn {
using namespace detail_onednn;

bool native_bfloat16() {
  static const bool native = dnnl::get_effective_cpu_isa() >= dnnl::cpu_isa::avx512_core_bf16;
  return native;
}

bool cpu_has_bfloat16() {
#if defined(__x86_64__)
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx) && (eax & (1u << 5)))
    return true;  // AVX512_BF16
  if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) && (edx & (1u << 22)))
    return true;  // AMX-BF16
#endif
  return false;
}

namespace {

// The matmul primitive's descriptor: transposes expressed as strides (no copy
// is ever made), the bias broadcast over rows.
dnnl::matmul::primitive_desc matmul_pd(const MatmulShape& s, bool bias) {
  const memory::data_type t = data_type(s.precision);
  const std::int64_t bb = s.b_shared ? 1 : s.batch;
  memory::desc a_md(Dims{s.batch, s.m, s.k}, t,
                    s.transpose_a ? Dims{s.m * s.k, 1, s.m} : Dims{s.m * s.k, s.k, 1});
  memory::desc b_md(Dims{bb, s.k, s.n}, t,
                    s.transpose_b ? Dims{s.k * s.n, 1, s.k} : Dims{s.k * s.n, s.n, 1});
  memory::desc c_md(Dims{s.batch, s.m, s.n}, t, memory::format_tag::abc);
  dnnl::primitive_attr attr;
  if (s.relu) {
    dnnl::post_ops ops;
    ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
    attr.set_post_ops(ops);
  }
  if (!bias) return {dnnl::matmul::desc(a_md, b_md, c_md), attr, engine()};
  memory::desc bias_md(Dims{1, 1, s.n}, t, memory::format_tag::abc);
  return {dnnl::matmul::desc(a_md, b_md, bias_md, c_md), attr, engine()};
}

}  // namespace

const char* bfloat16_matmul_implementation() {
  static const std::string name = [] {
    std::string n = "none";
    if (!native_bfloat16()) return n;
    guarded("matmul", [&] {
      MatmulShape s{.batch = 1, .m = 64, .k = 64, .n = 64, .precision = Precision::kBFloat16};
      n = matmul_pd(s, true).impl_info_str();
    });
    return n;
  }();
  return name.c_str();
}

void matmul(const MatmulShape& s, const void* a, const void* b, const void* bias, void* c) {
  using Key = std::tuple<std::int64_t, std::int64_t, std::int64_t, std::int64_t, bool, bool, bool,
                         bool, bool, int>;
  // The primitive plus its memory objects and argument map: a call only
  // swaps data handles, so a small GEMM pays no allocation in the adapter.
  struct Entry {
    dnnl::matmul prim;
    memory a, b, c, bias;
    std::unordered_map<int, memory> args;
  };
  KernelScope scope;
  if (s.batch == 1 && s.precision == Precision::kFloat32) {
    // Unbatched float32 products go straight to oneDNN's sgemm: the same JIT
    // kernels without the primitive's per-call dispatch, which is what small
    // GEMMs (the classifier head, N = 10) are made of. Bias is fused as
    // beta = 1 over an output pre-filled with it.
    float* cf = static_cast<float*>(c);
    const std::int64_t ldc = s.ldc > 0 ? s.ldc : s.n;
    float beta = 0.0f;
    if (bias) {
      for (std::int64_t i = 0; i < s.m; ++i)
        std::memcpy(cf + i * ldc, bias, static_cast<std::size_t>(s.n) * sizeof(float));
      beta = 1.0f;
    }
    const std::int64_t lda = s.lda > 0 ? s.lda : (s.transpose_a ? s.m : s.k);
    const std::int64_t ldb = s.ldb > 0 ? s.ldb : (s.transpose_b ? s.k : s.n);
    const dnnl_status_t status = dnnl_sgemm(s.transpose_a ? 'T' : 'N', s.transpose_b ? 'T' : 'N',
                                            s.m, s.n, s.k, 1.0f, static_cast<const float*>(a), lda,
                                            static_cast<const float*>(b), ldb, beta, cf, ldc);
    LOCKSTEP_CHECK_AS(InternalError, status == dnnl_success, "oneDNN sgemm failed with status ",
                      static_cast<int>(status), " for M=", s.m, " K=", s.k, " N=", s.n);
    if (s.relu) {
      for (std::int64_t i = 0; i < s.m; ++i) {
        for (std::int64_t j = 0; j < s.n; ++j)
          cf[i * ldc + j] = cf[i * ldc + j] > 0.0f ? cf[i * ldc + j] : 0.0f;
      }
    }
    return;
  }
  LOCKSTEP_CHECK(s.lda == 0 && s.ldb == 0 && s.ldc == 0,
                 "onednn::matmul: row strides are for unbatched float32 products only");
  // Primitive caches are per thread (here and in conv.cc): each replica
  // thread runs its own kernels with its own memory objects bound to them,
  // and a shared cache would put a lock on every op.
  thread_local std::unordered_map<Key, Entry, TupleHash> cache;
  const Key key{s.batch,       s.m,
                s.k,           s.n,
                s.transpose_a, s.transpose_b,
                s.b_shared,    bias != nullptr,
                s.relu,        static_cast<int>(s.precision)};
  guarded("matmul", [&] {
    auto it = cache.find(key);
    if (it == cache.end()) {
      const auto pd = matmul_pd(s, bias != nullptr);
      Entry e{dnnl::matmul(pd),
              memory(pd.src_desc(), engine(), DNNL_MEMORY_NONE),
              memory(pd.weights_desc(), engine(), DNNL_MEMORY_NONE),
              memory(pd.dst_desc(), engine(), DNNL_MEMORY_NONE),
              {},
              {}};
      e.args = {{DNNL_ARG_SRC, e.a}, {DNNL_ARG_WEIGHTS, e.b}, {DNNL_ARG_DST, e.c}};
      if (bias) {
        e.bias = memory(pd.bias_desc(), engine(), DNNL_MEMORY_NONE);
        e.args.emplace(DNNL_ARG_BIAS, e.bias);
      }
      it = cache.emplace(key, std::move(e)).first;
    }
    Entry& e = it->second;
    e.a.set_data_handle(mut(a));
    e.b.set_data_handle(mut(b));
    e.c.set_data_handle(c);
    if (bias) e.bias.set_data_handle(mut(bias));
    e.prim.execute(stream(), e.args);
    stream().wait();
  });
}

// A cached unary primitive (softmax, eltwise) with its src/dst memory objects.
struct UnaryEntry {
  dnnl::primitive prim;
  memory src, dst;
  std::unordered_map<int, memory> args;
};

UnaryEntry make_unary_entry(dnnl::primitive prim, const memory::desc& md) {
  UnaryEntry e{std::move(prim),
               memory(md, engine(), DNNL_MEMORY_NONE),
               memory(md, engine(), DNNL_MEMORY_NONE),
               {}};
  e.args = {{DNNL_ARG_SRC, e.src}, {DNNL_ARG_DST, e.dst}};
  return e;
}

void run_unary(UnaryEntry& e, const float* x, float* y) {
  KernelScope scope;
  e.src.set_data_handle(mut(x));
  e.dst.set_data_handle(y);
  e.prim.execute(stream(), e.args);
  stream().wait();
}

void softmax(const float* x, float* y, std::int64_t outer, std::int64_t axis, std::int64_t inner,
             bool log) {
  using Key = std::tuple<std::int64_t, std::int64_t, std::int64_t, bool>;
  thread_local std::unordered_map<Key, UnaryEntry, TupleHash> cache;  // per thread, as above
  const Key key{outer, axis, inner, log};
  guarded(log ? "log_softmax" : "softmax", [&] {
    auto it = cache.find(key);
    if (it == cache.end()) {
      memory::desc md(Dims{outer, axis, inner}, memory::data_type::f32, memory::format_tag::abc);
      dnnl::primitive prim;
      if (log) {
        dnnl::logsoftmax_forward::desc d(dnnl::prop_kind::forward_inference, md, 1);
        prim = dnnl::logsoftmax_forward(dnnl::logsoftmax_forward::primitive_desc(d, engine()));
      } else {
        dnnl::softmax_forward::desc d(dnnl::prop_kind::forward_inference, md, 1);
        prim = dnnl::softmax_forward(dnnl::softmax_forward::primitive_desc(d, engine()));
      }
      it = cache.emplace(key, make_unary_entry(std::move(prim), md)).first;
    }
    run_unary(it->second, x, y);
  });
}

void eltwise(Eltwise kind, const float* x, float* y, std::int64_t n) {
  using Key = std::tuple<int, std::int64_t>;
  thread_local std::unordered_map<Key, UnaryEntry, TupleHash> cache;  // per thread, as above
  const Key key{static_cast<int>(kind), n};
  guarded("eltwise", [&] {
    auto it = cache.find(key);
    if (it == cache.end()) {
      dnnl::algorithm alg = dnnl::algorithm::eltwise_exp;
      switch (kind) {
        case Eltwise::kExp:
          alg = dnnl::algorithm::eltwise_exp;
          break;
        case Eltwise::kLog:
          alg = dnnl::algorithm::eltwise_log;
          break;
        case Eltwise::kSqrt:
          alg = dnnl::algorithm::eltwise_sqrt;
          break;
        case Eltwise::kTanh:
          alg = dnnl::algorithm::eltwise_tanh;
          break;
        case Eltwise::kSigmoid:
          alg = dnnl::algorithm::eltwise_logistic;
          break;
      }
      memory::desc md(Dims{n}, memory::data_type::f32, memory::format_tag::a);
      dnnl::eltwise_forward::desc d(dnnl::prop_kind::forward_inference, alg, md, 0.f, 0.f);
      dnnl::primitive prim =
          dnnl::eltwise_forward(dnnl::eltwise_forward::primitive_desc(d, engine()));
      it = cache.emplace(key, make_unary_entry(std::move(prim), md)).first;
    }
    run_unary(it->second, x, y);
  });
}

void reference_sgemm(bool transpose_a, bool transpose_b, std::int64_t m, std::int64_t n,
                     std::int64_t k, const float* a, const float* b, float* c) {
  const std::int64_t lda = transpose_a ? m : k;
  const std::int64_t ldb = transpose_b ? k : n;
  const dnnl_status_t status = dnnl_sgemm(transpose_a ? 'T' : 'N', transpose_b ? 'T' : 'N', m, n, k,
                                          1.0f, a, lda, b, ldb, 0.0f, c, n);
  LOCKSTEP_CHECK_AS(InternalError, status == dnnl_success, "dnnl_sgemm failed with status ",
                    static_cast<int>(status));
}

}  // namespace lockstep::backend::onednn
