// ParameterServer: the service of a ps task (parameter_server.cc). Internal
// to distribute/; Server (worker.cc) serves it.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

#include "lockstep/comm/rpc.h"
#include "lockstep/optim/optimizers.h"

namespace lockstep::distribute::ps {

class ParameterServer final : public comm::rpc::ParameterServerService {
 public:
  explicit ParameterServer(std::string task);

  void create(std::vector<comm::rpc::VariableEntry> variables) override;
  comm::rpc::ReadResult read(const std::vector<std::int64_t>& ids, bool with_slots) override;
  void assign(std::vector<comm::rpc::VariableEntry> variables,
              std::optional<std::int64_t> iterations) override;
  comm::rpc::ApplyResult apply_gradients(const comm::rpc::OptimizerSpec& optimizer,
                                         std::vector<comm::rpc::Gradient> gradients,
                                         bool count_iteration) override;
  comm::rpc::ParameterServerStats stats() override;

 private:
  // One variable or shard. `mu` makes its reads and updates atomic.
  struct Entry {
    std::mutex mu;
    std::string name;
    bool trainable = true;
    Variable var;
    std::int64_t version = 0;  // updates applied
    Optimizer optimizer;       // made by the first update, from the workers' spec
    std::string optimizer_key;
    std::map<std::string, Tensor> pending_slots;  // assigned before the optimizer existed
  };
  std::shared_ptr<Entry> find(std::int64_t id, const char* op);
  static std::vector<comm::rpc::NamedWireTensor> slots_of(Entry& e);

  std::string task_;
  std::mutex table_mu_;
  std::unordered_map<std::int64_t, std::shared_ptr<Entry>> entries_;
  std::atomic<std::int64_t> iterations_{0}, updates_{0}, staleness_sum_{0}, staleness_max_{0},
      bytes_applied_{0}, apply_nanos_{0};
};

}  // namespace lockstep::distribute::ps
