// The rendezvous of the nodes of a run across hosts (parallel/rendezvous.h), with the nodes as
// threads of this process on 127.0.0.1, and the checks of --nnodes/--node-rank/--master.
#include "parallel/rendezvous.h"

#include <arpa/inet.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <future>
#include <string>
#include <vector>

#include "core/error.h"
#include "parallel/communicator.h"

namespace hibana {
namespace {

using namespace std::chrono_literals;
using testing::HasSubstr;

NodeGroup node(int node_rank, int nnodes, int port, std::chrono::milliseconds timeout = 20s) {
  NodeGroup g;
  g.nnodes = nnodes;
  g.node_rank = node_rank;
  g.master = {"127.0.0.1", port};
  g.ranks = 2 * nnodes;
  g.fingerprint = 42;
  g.timeout = timeout;
  return g;
}

// What a call threw: its kind and words (kind internal and "" when it returned).
struct Thrown {
  ErrorKind kind = ErrorKind::internal;
  std::string what;
};
template <typename F>
Thrown thrown(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return {e.kind(), e.what()};
  }
  return {};
}

std::future<std::string> join_async(NodeGroup g, std::string not_ready = "") {
  return std::async(std::launch::async, [g, not_ready] { return rendezvous_join(g, not_ready); });
}

// A raw connection to the master, saying `bytes` (then keeping the connection open).
int raw_connect(int port, const std::string& bytes) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  if (!bytes.empty()) {
    EXPECT_EQ(::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(bytes.size()));
  }
  return fd;
}

TEST(Rendezvous, EveryNodeGetsNodeZerosPayload) {
  RendezvousMaster master(node(0, 3, 0));
  ASSERT_GT(master.port(), 0);
  const std::string id(128, '\x07');  // the size of an NCCL unique id
  auto one = join_async(node(1, 3, master.port()));
  auto two = join_async(node(2, 3, master.port()));
  master.serve(id);
  EXPECT_EQ(one.get(), id);
  EXPECT_EQ(two.get(), id);
}

TEST(Rendezvous, NodesMayComeBeforeNodeZeroListens) {
  // Find a free port, then let the node try it before node 0 is there.
  int port = 0;
  { port = RendezvousMaster(node(0, 2, 0)).port(); }
  auto one = join_async(node(1, 2, port));
  std::this_thread::sleep_for(300ms);  // a refused connection or two, retried
  RendezvousMaster master(node(0, 2, port));
  master.serve("id");
  EXPECT_EQ(one.get(), "id");
}

TEST(Rendezvous, ADifferentTpIsRefusedOnBothSides) {
  RendezvousMaster master(node(0, 2, 0));
  NodeGroup other = node(1, 2, master.port());
  other.ranks = 6;
  auto one = join_async(other);
  const Thrown m = thrown([&] { master.serve("id"); });
  EXPECT_EQ(m.kind, ErrorKind::invalid_argument);
  EXPECT_THAT(m.what, HasSubstr("node 1 was started with --tp 6 --nnodes 2, node 0 with --tp 4"));
  const Thrown c = thrown([&] { one.get(); });
  EXPECT_EQ(c.kind, ErrorKind::invalid_argument);
  EXPECT_THAT(c.what, HasSubstr("refused this run: node 1 was started with --tp 6"));
  EXPECT_THAT(c.what, HasSubstr("127.0.0.1:" + std::to_string(master.port())));
}

TEST(Rendezvous, ADifferentNnodesIsRefusedOnBothSides) {
  RendezvousMaster master(node(0, 3, 0));
  auto first = join_async(node(1, 3, master.port()));  // agrees: told why the run stops too
  std::this_thread::sleep_for(100ms);
  NodeGroup other = node(2, 4, master.port());
  other.ranks = 6;
  auto second = join_async(other);
  const Thrown m = thrown([&] { master.serve("id"); });
  EXPECT_THAT(m.what, HasSubstr("--nnodes 4, node 0 with --tp 6 --nnodes 3"));
  EXPECT_THAT(thrown([&] { second.get(); }).what, HasSubstr("--nnodes 4, node 0 with"));
  EXPECT_THAT(thrown([&] { first.get(); }).what, HasSubstr("refused this run: node 2 was"));
}

TEST(Rendezvous, ADifferentCommandIsRefused) {
  RendezvousMaster master(node(0, 2, 0));
  NodeGroup other = node(1, 2, master.port());
  other.fingerprint = 43;
  auto one = join_async(other);
  EXPECT_THAT(thrown([&] { master.serve("id"); }).what, HasSubstr("command differs from node 0's"));
  EXPECT_THAT(thrown([&] { one.get(); }).what, HasSubstr("must be the same on every node"));
}

TEST(Rendezvous, TwoNodesWithOneNodeRankAreRefused) {
  RendezvousMaster master(node(0, 3, 0));
  auto one = join_async(node(1, 3, master.port()));
  auto again = join_async(node(1, 3, master.port()));
  EXPECT_THAT(thrown([&] { master.serve("id"); }).what,
              HasSubstr("two nodes were started with --node-rank 1"));
  EXPECT_THAT(thrown([&] { one.get(); }).what, HasSubstr("--node-rank 1"));
  EXPECT_THAT(thrown([&] { again.get(); }).what, HasSubstr("--node-rank 1"));
}

TEST(Rendezvous, ANodeWhoseRanksFailedStopsTheRun) {
  RendezvousMaster master(node(0, 2, 0));
  auto one = join_async(node(1, 2, master.port()), "rank 1 (local rank 1) sees no CUDA device");
  const Thrown m = thrown([&] { master.serve("id"); });
  EXPECT_THAT(m.what, HasSubstr("node 1 could not start its ranks: rank 1 (local rank 1) sees"));
  EXPECT_THAT(thrown([&] { one.get(); }).what, HasSubstr("could not start its ranks"));
}

TEST(Rendezvous, NodeZeroGivesUpOnANodeThatNeverComes) {
  RendezvousMaster master(node(0, 3, 0, 600ms));
  auto one = join_async(node(1, 3, master.port()));
  const auto start = std::chrono::steady_clock::now();
  const Thrown m = thrown([&] { master.serve("id"); });
  EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
  EXPECT_EQ(m.kind, ErrorKind::timeout);
  EXPECT_THAT(m.what, HasSubstr("node 0 waited 0.6 s on port " + std::to_string(master.port())));
  EXPECT_THAT(m.what, HasSubstr("node(s) 2 of --nnodes 3 never came"));
  EXPECT_THAT(thrown([&] { one.get(); }).what, HasSubstr("node(s) 2 of --nnodes 3 never came"));
}

TEST(Rendezvous, ANodeGivesUpWhenNodeZeroIsNotThere) {
  int port = 0;
  { port = RendezvousMaster(node(0, 2, 0)).port(); }  // free again: nothing listens there
  const auto start = std::chrono::steady_clock::now();
  const Thrown c = thrown([&] { rendezvous_join(node(1, 2, port, 500ms)); });
  EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
  EXPECT_EQ(c.kind, ErrorKind::timeout);
  EXPECT_THAT(c.what, HasSubstr("node 1 could not reach node 0 at 127.0.0.1:" +
                                std::to_string(port) + " within 0.5 s"));
  EXPECT_THAT(c.what, HasSubstr("Connection refused"));
}

TEST(Rendezvous, GarbageConnectionsAreDroppedAndTheRunGoesOn) {
  RendezvousMaster master(node(0, 2, 0, 20s));
  auto serving = std::async(std::launch::async, [&] { master.serve("id"); });
  std::vector<int> fds;
  fds.push_back(raw_connect(master.port(), "GET / HTTP/1.1\r\nHost: x\r\n\r\n"));
  fds.push_back(raw_connect(master.port(), ""));  // says nothing, closes below
  std::string huge("hibanaRZ", 8);
  huge += std::string(28, '\0') + std::string("\xff\xff\xff\xff", 4);  // a 4 GiB message
  fds.push_back(raw_connect(master.port(), huge));
  fds.push_back(raw_connect(master.port(), "hiba"));  // a hello cut short, kept open
  ::close(fds[1]);
  std::this_thread::sleep_for(200ms);
  EXPECT_EQ(join_async(node(1, 2, master.port())).get(), "id");
  EXPECT_NO_THROW(serving.get());
  for (int fd : {fds[0], fds[2], fds[3]}) ::close(fd);
}

TEST(Rendezvous, APortInUseIsSaid) {
  RendezvousMaster first(node(0, 2, 0));
  const Thrown t = thrown([&] { RendezvousMaster second(node(0, 2, first.port())); });
  EXPECT_EQ(t.kind, ErrorKind::io);
  EXPECT_THAT(t.what, HasSubstr("cannot listen on port " + std::to_string(first.port())));
  EXPECT_THAT(t.what, HasSubstr("choose another port"));
}

// The NCCL communicator across hosts on a host without a GPU: node 1's rank says why to node 0
// through the rendezvous, and both fail with its words; node 0's fails before it listens.
TEST(NcclAcrossHosts, ANodeWithoutItsGpuStopsTheRunOnEveryNode) {
  if (!nccl_available()) GTEST_SKIP() << "built without NCCL";
  if (visible_gpus() > 0) GTEST_SKIP() << "this host has a GPU";
  NodeGroup zero = node(0, 2, 0);
  zero.ranks = 2;  // one rank per node: the single communicator is each node's bootstrap
  RendezvousMaster master(zero);
  NodeGroup one = node(1, 2, master.port());
  one.ranks = 2;
  auto joining = std::async(std::launch::async, [one] {
    return thrown([&] { make_nccl_communicator(make_single_communicator(), nullptr, one); });
  });
  const Thrown m = thrown([&] { master.serve("id"); });
  EXPECT_THAT(m.what, HasSubstr("node 1 could not start its ranks: rank 1 (local rank 0) sees no "
                                "CUDA device"));
  const Thrown c = joining.get();  // its own words (node 0's refusal repeats them)
  EXPECT_EQ(c.kind, ErrorKind::unsupported);
  EXPECT_THAT(c.what, HasSubstr("rank 1 (local rank 0) sees no CUDA device"));
  const Thrown z =
      thrown([&] { make_nccl_communicator(make_single_communicator(), nullptr, zero); });
  EXPECT_EQ(z.kind, ErrorKind::unsupported);
  EXPECT_THAT(z.what, HasSubstr("rank 0 (local rank 0) sees no CUDA device"));
}

TEST(MasterAddress, Parses) {
  MasterAddress m = parse_master_address("10.0.0.1:29500");
  EXPECT_EQ(m.host, "10.0.0.1");
  EXPECT_EQ(m.port, 29500);
  m = parse_master_address("spark-1.local:1");
  EXPECT_EQ(m.host, "spark-1.local");
  EXPECT_EQ(m.port, 1);
  m = parse_master_address("[fd00::1]:65535");
  EXPECT_EQ(m.host, "fd00::1");
  EXPECT_EQ(m.port, 65535);
}

TEST(MasterAddress, RefusesWhatIsNotAddrPort) {
  for (const char* bad : {"10.0.0.1", "10.0.0.1:", ":29500", "host:0", "host:65536", "host:29x",
                          "host:-1", "fd00::1:29500", "[fd00::1]29500", "[fd00::1", ""}) {
    SCOPED_TRACE(bad);
    const Thrown t = thrown([&] { parse_master_address(bad); });
    EXPECT_EQ(t.kind, ErrorKind::invalid_argument);
    EXPECT_THAT(t.what, HasSubstr("is not ADDR:PORT"));
  }
}

TEST(NodeGroupError, SaysWhatIsWrong) {
  const std::string m = "10.0.0.1:29500";
  EXPECT_EQ(node_group_error(1, 1, 0, "", false), "");
  EXPECT_EQ(node_group_error(4, 2, 1, m, true), "");
  EXPECT_EQ(node_group_error(2, 2, 0, m, true), "");
  EXPECT_THAT(node_group_error(3, 2, 0, m, true), HasSubstr("must be a multiple of --nnodes 2"));
  EXPECT_THAT(node_group_error(1, 2, 0, m, true), HasSubstr("must be a multiple of --nnodes 2"));
  EXPECT_THAT(node_group_error(4, 2, 2, m, true),
              HasSubstr("--node-rank 2 is out of range: --nnodes 2 numbers the nodes 0 to 1"));
  EXPECT_THAT(node_group_error(4, 2, -1, m, true), HasSubstr("--node-rank -1 is out of range"));
  EXPECT_THAT(node_group_error(4, 2, 0, "", true), HasSubstr("needs --master ADDR:PORT"));
  EXPECT_THAT(node_group_error(4, 2, 0, "10.0.0.1", true), HasSubstr("is not ADDR:PORT"));
  const std::string cpu = node_group_error(2, 2, 0, m, false);
  EXPECT_THAT(cpu, HasSubstr("needs --device cuda"));
  EXPECT_THAT(cpu, HasSubstr("mpirun -H host1,host2 -np 2 hibana run --tp 2"));
  EXPECT_THAT(node_group_error(1, 1, 1, "", true), HasSubstr("give --nnodes N"));
  EXPECT_THAT(node_group_error(1, 1, 0, m, true), HasSubstr("give --nnodes N"));
}

TEST(NodeUnavailableReason, NamesWhatIsMissing) {
  EXPECT_EQ(node_unavailable_reason(4, 2, true, 2), "");
  EXPECT_EQ(node_unavailable_reason(2, 2, true, 1), "");
  EXPECT_THAT(node_unavailable_reason(2, 2, false, 8), HasSubstr("needs the NCCL communicator"));
  EXPECT_THAT(node_unavailable_reason(8, 2, true, 2),
              HasSubstr("runs 4 ranks on each host, one per GPU, and needs 4 GPUs; this process "
                        "sees 2"));
}

TEST(ArgumentsFingerprint, LeavesOutWhatMayDifferBetweenNodes) {
  const std::vector<std::string> a = {"/opt/hibana", "serve",    "m",  "--tp",
                                      "4",           "--nnodes", "2",  "--node-rank",
                                      "0",           "--master", "h:1"};
  const std::vector<std::string> b = {
      "./hibana",      "--threads",    "8",           "serve", "m", "--tp", "4", "--nnodes", "2",
      "--node-rank=1", "--master=g:1", "--log-level", "debug"};
  EXPECT_EQ(arguments_fingerprint(a), arguments_fingerprint(b));
  std::vector<std::string> c = a;
  c[4] = "2";  // --tp 2
  EXPECT_NE(arguments_fingerprint(a), arguments_fingerprint(c));
  EXPECT_NE(arguments_fingerprint({"x", "ab", "c"}), arguments_fingerprint({"x", "a", "bc"}));
  EXPECT_NE(arguments_fingerprint({"x", "m", "--dtype", "f32"}),
            arguments_fingerprint({"x", "m", "--dtype", "bf16"}));
}

TEST(ArgumentsFingerprint, ThisProcess) {
  const std::vector<std::string> args = process_arguments();
  ASSERT_FALSE(args.empty());
  EXPECT_THAT(args[0], HasSubstr("parallel_tests"));
}

}  // namespace
}  // namespace hibana
