// Where the nodes of a run across hosts meet before NCCL starts (`--nnodes N --node-rank R
// --master ADDR:PORT`). Each node's hibana starts its own ranks under mpirun (one MPI job per
// node, for the node's own coordination); the rendezvous joins the nodes: node 0's first rank
// listens on PORT, every other node's first rank connects to ADDR:PORT, says who it is and what
// it runs, and receives a payload (NCCL's unique id) that it then hands to its node's ranks over
// MPI. It is a bootstrap only, over plain TCP (POSIX sockets): the collectives are NCCL's. It
// knows nothing of NCCL or MPI.
//
// Wire format, version 1. Integers are unsigned, big-endian (network order).
//
//   hello, node R -> node 0 (40 bytes, then `length` bytes of message):
//     8  magic "hibanaRZ"
//     4  version (1)
//     4  nnodes          as this node was started (--nnodes)
//     4  node_rank       (--node-rank), 1..nnodes-1
//     4  ranks           --tp: the ranks over all nodes
//     8  fingerprint     arguments_fingerprint() of this node's command
//     4  status          0: this node's ranks are ready; 1: they are not (message says why)
//     4  length          of the message, at most kRendezvousMaxBytes
//
//   reply, node 0 -> node R (16 bytes, then `length` bytes):
//     8  magic "hibanaRZ"
//     4  status          0: the bytes are the payload; 1: refused, the bytes say why
//     4  length          at most kRendezvousMaxBytes
//
// Node 0 answers once every node has said hello: the payload to each when all agree with it
// (version, nnodes, ranks, fingerprint; every node rank once) and are ready, else the refusal to
// every node connected so far, and fails itself with the same words. A connection that does
// not begin with the magic, announces too long a message or closes early is dropped (logged):
// it ends nothing. Then the connections stay open for the run's NodeWatch (node_watch.h),
// which says one byte more on them: 'B' (goodbye) when its side ends cleanly.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace hibana {

constexpr size_t kRendezvousMaxBytes = 4096;
constexpr uint32_t kRendezvousVersion = 1;

struct MasterAddress {
  std::string host;  // a name, an IPv4 address or an IPv6 address (given in brackets)
  int port = 0;
};

// "ADDR:PORT" or "[IPv6]:PORT", PORT 1..65535; throws Error(invalid_argument) naming the text.
MasterAddress parse_master_address(const std::string& text);

// One node's part in a run across hosts.
struct NodeGroup {
  int nnodes = 1;
  int node_rank = 0;
  MasterAddress master;
  int ranks = 1;             // --tp: every node's ranks together
  uint64_t fingerprint = 0;  // arguments_fingerprint() of the command
  std::chrono::milliseconds timeout{std::chrono::seconds(300)};
};

// Why `--tp tp --nnodes nnodes --node-rank node_rank --master master` cannot make a run with the
// model on the GPUs (cuda) or the CPU, or "" when it can. One node (nnodes 1) needs neither
// --node-rank nor --master.
std::string node_group_error(int tp, int nnodes, int node_rank, const std::string& master,
                             bool cuda);

// A hash (64-bit FNV-1a) of a command's arguments, leaving out what may differ between nodes:
// args[0] (the executable), --node-rank, --threads and --log-level (with their values).
uint64_t arguments_fingerprint(const std::vector<std::string>& args);
// This process's arguments (/proc/self/cmdline), args[0] first.
std::vector<std::string> process_arguments();

// Node 0's side. The constructor listens on group.master.port on every interface (port 0: any
// free one, which port() tells: for tests); serve() does the rest.
class RendezvousMaster {
 public:
  explicit RendezvousMaster(const NodeGroup& group);
  ~RendezvousMaster();
  RendezvousMaster(const RendezvousMaster&) = delete;
  RendezvousMaster& operator=(const RendezvousMaster&) = delete;

  int port() const { return port_; }
  // Waits for nodes 1..nnodes-1 (until group.timeout), then sends `payload` to each. Throws
  // Error (invalid_argument: the nodes disagree or one is not ready; timeout: a node never
  // came), having told every connected node why.
  void serve(const std::string& payload);
  // After serve(): the connections to nodes 1..nnodes-1, open, now the caller's to close (for
  // a NodeWatch).
  std::vector<int> take_connections() { return std::move(connections_); }

 private:
  NodeGroup group_;
  int listener_ = -1;
  int port_ = 0;
  std::vector<int> connections_;
};

// Node R's side (R > 0): connects to group.master, retrying with backoff until group.timeout,
// says hello (`not_ready`: "" when this node's ranks are ready, else why not) and returns node
// 0's payload. Throws Error: timeout (node 0 unreachable or the others late, naming ADDR:PORT),
// invalid_argument (node 0 refused this run, with its reason), io (the connection broke).
// With `keep`, the connection stays open and *keep is its socket, the caller's to close.
std::string rendezvous_join(const NodeGroup& group, const std::string& not_ready = "",
                            int* keep = nullptr);

}  // namespace hibana
