// Cluster resolution for multi-worker training (issue #7): who the workers
// are and which one this process is, from a TF_CONFIG cluster spec (each
// worker started on its own, as Kubeflow-style launchers do), from the
// environment an MPI launcher (mpirun, srun with an MPI plugin) gives its
// processes, or from Slurm's (srun: TensorFlow's SlurmClusterResolver).
//
//   TF_CONFIG='{"cluster": {"worker": ["10.0.0.1:2222", "10.0.0.2:2222"]},
//               "task": {"type": "worker", "index": 0}}'
//
//   auto resolver = lockstep::distribute::ClusterResolver::from_environment();
//   if (resolver) std::printf("%s %d of %d\n", resolver->task_type().c_str(),
//                             resolver->task_id(), resolver->num_workers());
//
// Parsing is strict, as a cluster that half-parses fails later and far less
// clearly: unknown keys, a missing task, a task type the cluster does not
// have, an index out of range, a malformed or duplicated address are each a
// ValueError naming the key (and both tasks, for a duplicate). As in
// TensorFlow, an "evaluator" task may sit outside the cluster it evaluates.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace lockstep::distribute {

// host:port of one task.
struct TaskAddress {
  std::string host{};
  int port = 0;
  std::string to_string() const { return host + ":" + std::to_string(port); }
};

// Job name ("chief", "worker", "ps", "evaluator") -> its tasks' addresses.
class ClusterSpec {
 public:
  ClusterSpec() = default;
  explicit ClusterSpec(std::map<std::string, std::vector<TaskAddress>> jobs);
  const std::map<std::string, std::vector<TaskAddress>>& jobs() const { return jobs_; }
  int num_tasks(const std::string& job) const;
  const TaskAddress& task_address(const std::string& job, int index) const;
  bool empty() const { return jobs_.empty(); }

 private:
  std::map<std::string, std::vector<TaskAddress>> jobs_;
};

enum class Launcher {
  kTfConfig,  // TF_CONFIG: addresses known, each worker started on its own
  kMpi,       // mpirun / srun with PMI: ranks known, the collectives are MPI's
  kSlurm,     // srun: addresses from the step's node list, collectives over TCP (Gloo)
};

// Slurm's compressed host lists, expanded in order: "node[01-03,07],gpu5"
// -> node01 node02 node03 node07 gpu5 (zero padding kept; several bracket
// groups in one name expand as a product). ValueError naming `what` for a
// malformed list.
std::vector<std::string> expand_slurm_hostlist(const std::string& list,
                                               const std::string& what = "SLURM_JOB_NODELIST");
// Slurm's tasks per node: "2(x3),1" -> 2 2 2 1.
std::vector<int> expand_slurm_tasks_per_node(const std::string& list,
                                             const std::string& what = "SLURM_TASKS_PER_NODE");

class ClusterResolver {
 public:
  // Parses a TF_CONFIG document; `source` names it in errors.
  static ClusterResolver from_tf_config(const std::string& json_text,
                                        const std::string& source = "TF_CONFIG");
  // A process started by an MPI launcher: OpenMPI's OMPI_COMM_WORLD_RANK /
  // _SIZE, or PMI_RANK / PMI_SIZE (MPICH, Intel MPI, srun --mpi=pmi2).
  // `getenv` is injectable for tests.
  static std::optional<ClusterResolver> from_mpi_environment(
      const std::function<const char*(const char*)>& getenv);
  // A process started by Slurm's srun (TensorFlow's SlurmClusterResolver):
  // the workers are the step's SLURM_NTASKS tasks, placed on the nodes of
  // SLURM_STEP_NODELIST as SLURM_STEP_TASKS_PER_NODE says, in order (srun's
  // block distribution); the i-th task of a node listens at port_base + i,
  // port_base from LOCKSTEP_SLURM_PORT_BASE or 8888 (TensorFlow's). This
  // process is task SLURM_PROCID. nullopt outside an srun step (no
  // SLURM_PROCID or no SLURM_STEP_NODELIST: a batch script trains alone);
  // each inconsistency a ValueError naming the variables.
  // GPUs: when the step gave the node's GPUs to all its tasks at once
  // (--gres=gpu:N or --gpus-per-node without a per-task binding: every
  // task sees all of SLURM_STEP_GPUS), each task takes an equal share in
  // SLURM_LOCALID order — task_gpus() — as TensorFlow's auto_set_gpu; a
  // step that bound each task's GPUs itself (--gpus-per-task) is left as
  // it is, and LOCKSTEP_SLURM_AUTO_SET_GPU=0 leaves every step alone.
  static std::optional<ClusterResolver> from_slurm_environment(
      const std::function<const char*(const char*)>& getenv);
  // TF_CONFIG if set, else an MPI launch (OpenMPI's or PMI's variables),
  // else a Slurm one, else nullopt (a single worker).
  static std::optional<ClusterResolver> from_environment();
  // One worker, this process ("worker" 0 at localhost, port 0).
  static ClusterResolver single_worker();

  const ClusterSpec& cluster_spec() const { return cluster_; }
  const std::string& task_type() const { return task_type_; }
  int task_id() const { return task_id_; }
  const std::string& rpc_layer() const { return rpc_layer_; }
  Launcher launcher() const { return launcher_; }
  // The GPUs (CUDA's numbers, as CUDA_VISIBLE_DEVICES lists them) that
  // this task should see: its share of its node's, when Slurm showed every
  // task all of them (from_slurm_environment); empty when there is
  // nothing to choose. MultiWorkerMirroredStrategy sets
  // CUDA_VISIBLE_DEVICES to them before it lists the GPUs.
  const std::vector<std::string>& task_gpus() const { return task_gpus_; }
  // "local task 1 of 2 on node gpu01, SLURM_STEP_GPUS=0,1,2,3": where
  // task_gpus() came from, for logs and errors.
  const std::string& task_gpus_reason() const { return task_gpus_reason_; }

  // Chief and workers: the processes that train in sync.
  int num_workers() const;
  // This process's rank among them: the chief first, then the workers.
  // -1 for ps and evaluator tasks.
  int worker_rank() const;
  // The task that writes checkpoints and logs: the chief, or worker 0 when
  // the cluster has no chief (TensorFlow's rule).
  bool is_chief() const;
  // The address of worker `rank` (chief first, as worker_rank()).
  const TaskAddress& worker_address(int rank) const;
  // "worker 2 (10.0.0.3:2222)": how errors name a worker.
  std::string describe_worker(int rank) const;
  // "ps 1 (10.0.0.5:2222)": how errors name any task.
  std::string describe_task(const std::string& job, int index) const;
  // A cluster ParameterServerStrategy can run: a chief (the coordinator),
  // at least one worker and one ps task, and no evaluator inside it (the
  // evaluator is a sidecar with its own TF_CONFIG); each breach a
  // ValueError naming the key ("cluster.ps"), `source` first.
  void check_parameter_server_cluster(const std::string& source = "TF_CONFIG") const;
  // The cluster spec in one canonical line, equal on every worker that was
  // given the same cluster (compared at start-up).
  std::string canonical_cluster_spec() const;
  // The job re-formed with these workers alone (ranks as worker_rank(), in
  // increasing order, this process among them): the others leave the
  // cluster, and this process's index is its place among those kept.
  // Elastic shrink (MultiWorkerMirroredStrategyOptions::min_workers).
  ClusterResolver with_workers(const std::vector<int>& ranks) const;

 private:
  ClusterSpec cluster_;
  std::string task_type_;
  int task_id_ = 0;
  std::string rpc_layer_;
  Launcher launcher_ = Launcher::kTfConfig;
  std::vector<std::string> task_gpus_;
  std::string task_gpus_reason_;
};

}  // namespace lockstep::distribute
