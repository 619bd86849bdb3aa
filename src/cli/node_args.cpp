#include "cli/node_args.h"

#include "backend/backend.h"
#include "cli/model_args.h"
#include "core/error.h"
#include "parallel/launch.h"
#include "parallel/communicator.h"

namespace hibana::cli {

void NodeArgs::add_to(CLI::App& cmd) {
  cmd.add_option("--nnodes", nnodes,
                 "hosts the --tp ranks span (default 1); each host runs --tp/--nnodes ranks, one "
                 "per GPU, over NCCL (--device cuda)")
      ->check(CLI::Range(1, 1024));
  cmd.add_option("--node-rank", node_rank,
                 "this host's number with --nnodes: 0 to N-1 (default 0)");
  cmd.add_option("--master", master,
                 "ADDR:PORT where node 0 listens for the other nodes with --nnodes (the same on "
                 "every node)");
}

void NodeArgs::validate(int tp, Device device) const {
  const std::string why = node_group_error(tp, nnodes, node_rank, master, device == Device::cuda);
  if (!why.empty()) throw Error(ErrorKind::invalid_argument, why);
}

NodeGroup NodeArgs::group(int tp) const {
  NodeGroup g;
  if (nnodes <= 1) return g;
  g.nnodes = nnodes;
  g.node_rank = node_rank;
  g.master = parse_master_address(master);
  g.ranks = tp;
  g.fingerprint = arguments_fingerprint(process_arguments());
  return g;
}

std::string NodeArgs::unavailable_reason(int tp, Device device) const {
  if (nnodes <= 1) return tp_unavailable_reason(device, tp);
  return node_unavailable_reason(tp, nnodes);
}

namespace {
Device rank_device(const ModelArgs& model) {
  return model.device == "cuda" ? Device::cuda : Device::cpu;
}
}  // namespace

void start_ranks(const ModelArgs& model, const NodeArgs& nodes, int tp) {
  if (launched_as_ranks()) return;
  const std::string why = nodes.unavailable_reason(tp, rank_device(model));
  if (!why.empty()) throw Error(ErrorKind::unsupported, why);
  check_shardable(model.read_config(), tp, model.weights == "fp8", model.expert_parallel);
  if (nodes.local_ranks(tp) > 1) relaunch_as_ranks(nodes.local_ranks(tp));
}

std::shared_ptr<Communicator> join_ranks(const ModelArgs& model, const NodeArgs& nodes, int tp) {
  std::shared_ptr<Communicator> comm =
      make_rank_communicator(rank_device(model), &cuda_stream_handle, nodes.group(tp));
  check(comm->size() == tp, ErrorKind::invalid_argument,
        "--tp " + std::to_string(tp) + " in an MPI job of " + std::to_string(comm->size()) +
            " ranks");
  return comm;
}

}  // namespace hibana::cli
