// ParameterServerStrategy's figures (bench/parameter_server.sh starts this
// program as every task of a job, each with its TF_CONFIG): ps and worker
// tasks serve; the chief measures one thing and prints one line.
//
//   ps_bench mlp BATCH STEPS     the seed MLP (Adam) trained with fit on the
//                                synthetic cached batches (bench/seed_mlp.h),
//                                each worker its own input: samples/s of an
//                                epoch of STEPS steps after a 30-step one,
//                                and its mean staleness
//   ps_bench overhead N          N functions that do nothing: µs per
//                                function scheduled all at once then joined,
//                                and scheduled and fetched one at a time
//   ps_bench apply MIB N         one MIB-MiB variable on ps 0 (Adam), N
//                                functions each applying a gradient to it:
//                                the update's GB/s on the ps (gradient bytes
//                                over the time in the optimizer) and end to
//                                end (bytes over the wall time)
#include <chrono>
#include <cstdio>
#include <string>

#include "lockstep/lockstep.h"
#include "seed_mlp.h"

namespace {

using namespace lockstep;
namespace ld = lockstep::distribute;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

void register_functions() {
  ld::register_dataset_function("synthetic",
                                [](const ld::InputContext&, const std::vector<Tensor>& args) {
                                  return bench::synthetic_batches(args.at(0).item<std::int64_t>());
                                });
  ld::register_worker_function("noop", [](ld::WorkerContext&) { return std::vector<Tensor>{}; });
  ld::register_worker_function("apply", [](ld::WorkerContext& ctx) {
    struct Big {
      Variable v;
      Optimizer opt = optimizers::Adam();
      Tensor grad;
    };
    auto big = ctx.resource<Big>("big");
    if (!big) {
      const Shape shape = ctx.coordinator_variables().at(0).second;
      big = std::make_shared<Big>(
          Big{Variable(Tensor::zeros(shape)), optimizers::Adam(), Tensor::full(shape, 0.001)});
      ctx.bind_variables({big->v});
      ctx.set_resource("big", big);
    }
    big->opt.apply_gradients({big->grad}, {big->v});
    return std::vector<Tensor>{};
  });
}

int mlp(std::int64_t batch, std::int64_t steps) {
  ld::ParameterServerStrategy strategy;
  Model model;
  {
    auto scope = strategy.scope();
    model = bench::seed_mlp();
  }
  const ld::DatasetCreator input{"synthetic",
                                 {Tensor::from_vector(std::vector<std::int64_t>{batch}, Shape{})}};
  model.fit(input, {.epochs = 1, .verbose = 0, .steps_per_epoch = 30});  // warm-up
  const auto start = Clock::now();
  const History h = model.fit(input, {.epochs = 1, .verbose = 0, .steps_per_epoch = steps});
  const double s = seconds_since(start);
  std::printf("ps mlp workers=%d ps=%d batch=%lld %.0f samples/s staleness %.2f\n",
              strategy.num_worker_tasks(), strategy.num_ps(), static_cast<long long>(batch),
              static_cast<double>(batch * steps) / s, h["staleness"].back());
  return 0;
}

int overhead(int n) {
  ld::ParameterServerStrategy strategy;
  ld::ClusterCoordinator coordinator(strategy);
  for (int i = 0; i < 100; ++i) coordinator.schedule("noop");  // warm-up
  coordinator.join();
  auto start = Clock::now();
  for (int i = 0; i < n; ++i) coordinator.schedule("noop");
  coordinator.join();
  const double batched = seconds_since(start) / n * 1e6;
  start = Clock::now();
  for (int i = 0; i < n; ++i) coordinator.schedule("noop").fetch();
  const double one_by_one = seconds_since(start) / n * 1e6;
  std::printf("ps overhead workers=%d %.1f us/function scheduled at once, %.1f us one at a time\n",
              strategy.num_worker_tasks(), batched, one_by_one);
  return 0;
}

int apply(std::int64_t mib, int n) {
  ld::ParameterServerStrategy strategy;
  {
    auto scope = strategy.scope();
    create_variable(Tensor::zeros({mib * 1024 * 1024 / 4}), {.name = "big"});
  }
  ld::ClusterCoordinator coordinator(strategy);
  coordinator.schedule("apply");
  coordinator.join();  // warm-up: the binding, the slots
  const ld::ParameterServerStats before = strategy.stats();
  const auto start = Clock::now();
  for (int i = 0; i < n; ++i) coordinator.schedule("apply");
  coordinator.join();
  const double wall = seconds_since(start);
  const ld::ParameterServerStats after = strategy.stats();
  const double bytes = static_cast<double>(after.bytes_applied - before.bytes_applied);
  std::printf("ps apply %lld MiB: %.2f GB/s in the update on the ps, %.2f GB/s end to end\n",
              static_cast<long long>(mib),
              bytes / (after.apply_seconds - before.apply_seconds) / 1e9, bytes / wall / 1e9);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    register_functions();
    const auto resolver = ld::ClusterResolver::from_environment();
    if (resolver && (resolver->task_type() == "ps" || resolver->task_type() == "worker")) {
      ld::Server server(*resolver);
      server.join();
      return 0;
    }
    const std::string what = argc > 1 ? argv[1] : "";
    if (what == "mlp" && argc > 3) return mlp(std::atoll(argv[2]), std::atoll(argv[3]));
    if (what == "overhead" && argc > 2) return overhead(std::atoi(argv[2]));
    if (what == "apply" && argc > 3) return apply(std::atoll(argv[2]), std::atoi(argv[3]));
    std::fprintf(stderr, "usage: ps_bench mlp BATCH STEPS | overhead N | apply MIB N\n");
    return 2;
  } catch (const Error& e) {
    std::fprintf(stderr, "ps_bench: %s\n", e.what());
    return 1;
  }
}
