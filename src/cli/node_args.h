// The options of a tensor-parallel run across hosts, shared by `run` and `serve`:
// --nnodes N --node-rank R --master ADDR:PORT (parallel/rendezvous.h has how the nodes meet).
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "core/tensor.h"
#include "parallel/communicator.h"
#include "parallel/rendezvous.h"

namespace hibana::cli {

struct NodeArgs {
  int nnodes = 1;
  int node_rank = 0;
  std::string master;

  void add_to(CLI::App& cmd);
  // Throws Error(invalid_argument) when `--tp tp` with these options cannot run with the model
  // on `device` (node_group_error).
  void validate(int tp, Device device) const;
  // The ranks this host runs: --tp over the nodes.
  int local_ranks(int tp) const { return tp / nnodes; }
  // This node's part (with the fingerprint of this process's arguments); one node: the default.
  NodeGroup group(int tp) const;
  // Why this build and host cannot run this node's ranks, or "" (tp_unavailable_reason for one
  // node).
  std::string unavailable_reason(int tp, Device device) const;
};

struct ModelArgs;
// The start of a `--tp` command (run and serve): outside an MPI job, checks what every rank
// would hit (build, host, shardability; said once) and re-executes the command as this node's
// ranks (returns only inside the job, or with one local rank).
void start_ranks(const ModelArgs& model, const NodeArgs& nodes, int tp);
// This rank's communicator (MPI on the CPU, NCCL with --device cuda), checked to span --tp ranks.
std::shared_ptr<Communicator> join_ranks(const ModelArgs& model, const NodeArgs& nodes, int tp);

}  // namespace hibana::cli
